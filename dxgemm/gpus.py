"""The GPUs dxgemm plans for: :class:`DeviceInfo` (the properties the host rules reason about)
and one record per GPU from its published specification (:data:`DEVICES`).

Pure data at the bottom of the package: :mod:`dxgemm.policy` takes a ``DeviceInfo``, and
:mod:`dxgemm.runtime.device` fills one from the running GPU (the one source of a device's
figures at run time); the tests and ``python -m dxgemm warmup --cc`` use the records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DeviceInfo", "DEVICES", "H100", "target_device", "TF32_TENSOR_PER_FP32", "tf32_tensor_ratio"]


@dataclass(frozen=True)
class DeviceInfo:
    """The device properties the host rules reason about.

    ``smem_per_block``: the opt-in maximum dynamic shared memory of one block;
    ``smem_per_sm``, ``regs_per_sm``, ``threads_per_sm``: what all resident blocks of an SM
    share (occupancy: how many blocks of a kernel an SM holds at once)."""

    cc: tuple[int, int]
    sm_count: int
    smem_per_block: int  # opt-in maximum dynamic shared memory per block, bytes
    l2_bytes: int
    smem_per_sm: int = 0  # 0: smem_per_block plus the 1 KiB the driver reserves per block
    regs_per_sm: int = 65536  # 32-bit registers: 64 K on every compute capability from 5.0 to 12.0
    threads_per_sm: int = 2048
    name: str = ""

    @property
    def sm_smem(self) -> int:
        """Shared memory of one SM (bytes) that its resident blocks share."""
        return self.smem_per_sm or self.smem_per_block + 1024

    @classmethod
    def from_device(cls, device: Any = None) -> "DeviceInfo":
        """Read the properties of ``device`` (an ordinal, default the current device) via cuda.core."""
        from cuda.core import Device

        dev = Device(device)
        props = dev.properties
        return cls(
            cc=tuple(dev.compute_capability),
            sm_count=int(props.multiprocessor_count),
            smem_per_block=int(props.max_shared_memory_per_block_optin),
            l2_bytes=int(getattr(props, "l2_cache_size", H100.l2_bytes)),
            smem_per_sm=int(getattr(props, "max_shared_memory_per_multiprocessor", 0)),
            regs_per_sm=int(getattr(props, "max_registers_per_multiprocessor", 65536)),
            threads_per_sm=int(getattr(props, "max_threads_per_multiprocessor", 2048)),
            name=str(getattr(dev, "name", "")),
        )


KiB, MiB = 1024, 2**20

# One record per GPU dxgemm plans for, from each vendor's published specification: the CUDA
# C++ Programming Guide's per-compute-capability limits (shared memory per SM and per block,
# 64 K registers and 2048 or 1536 threads per SM) and NVIDIA's product pages and architecture
# whitepapers for SM counts and L2 sizes (H100 SXM: Hopper whitepaper; H200: its datasheet;
# L40S, RTX 4090: Ada Lovelace whitepaper; B200: Blackwell datasheet; RTX 5090: Blackwell
# GeForce whitepaper; A100: Ampere whitepaper).  "unconfirmed" marks a figure not found in a
# document naming that product.
DEVICES: dict[str, DeviceInfo] = {
    "H100": DeviceInfo((9, 0), 132, 227 * KiB, 50 * MiB, smem_per_sm=228 * KiB, name="H100 SXM"),
    "H200": DeviceInfo((9, 0), 132, 227 * KiB, 60 * MiB, smem_per_sm=228 * KiB, name="H200 SXM"),
    "L40S": DeviceInfo((8, 9), 142, 99 * KiB, 96 * MiB, smem_per_sm=100 * KiB, threads_per_sm=1536, name="L40S"),
    "RTX 4090": DeviceInfo((8, 9), 128, 99 * KiB, 72 * MiB, smem_per_sm=100 * KiB, threads_per_sm=1536,
                           name="GeForce RTX 4090"),
    # B200: 148 SMs and 126 MiB of L2 unconfirmed (the datasheet names neither; what CUDA
    # reports on DGX B200 systems as published by third parties); 228 KiB per SM is sm_100's limit
    "B200": DeviceInfo((10, 0), 148, 227 * KiB, 126 * MiB, smem_per_sm=228 * KiB, name="B200"),
    # RTX 5090: 170 SMs, 96 MiB of L2; sm_120's 100 KiB per SM, 99 KiB a block and 1536 threads
    # per SM as sm_89's (unconfirmed: the programming guide's table)
    "RTX 5090": DeviceInfo((12, 0), 170, 99 * KiB, 96 * MiB, smem_per_sm=100 * KiB, threads_per_sm=1536,
                           name="GeForce RTX 5090"),
    "A100": DeviceInfo((8, 0), 108, 163 * KiB, 40 * MiB, smem_per_sm=164 * KiB, name="A100 SXM"),
}
"""The GPUs the host rules are checked against without them (``tests/test_devices_host.py``),
and the targets ``python -m dxgemm warmup --cc`` builds for."""

H100 = DEVICES["H100"]
"""An H100 SXM: 132 SMs, 227 KiB opt-in shared memory per block, 50 MiB of L2.  What the
simulator reports, and the rules' figures where no GPU is named or can be queried."""


TF32_TENSOR_PER_FP32: dict[tuple[int, int], float] = {
    (8, 0): 8.0,  # A100: 156 dense TF32 TFLOP/s against 19.5 float32 FMA
    (8, 6): 1.0,  # GA10x: a consumer SM's TF32 tensor rate equals its float32 FMA rate
    (8, 9): 1.0,  # Ada (L40S 91.6 / 91.6, RTX 4090 82.6 / 82.6)
    (9, 0): 7.4,  # H100 SXM 495 / 67
    (10, 0): 13.8,  # B200 1100 / 80
    (12, 0): 1.0,  # RTX 5090 104.8 / 104.8
}
"""Dense TF32 tensor-core throughput over float32 FMA throughput, per compute capability (an
SM design's ratio, from NVIDIA's architecture whitepapers and datasheets); 1.0 for one not
listed.  It decides whether float32 gains from the tensor cores at all: the accurate
three-product split needs the tensor cores several times faster than the FMA units."""


def tf32_tensor_ratio(cc: tuple[int, int]) -> float:
    """:data:`TF32_TENSOR_PER_FP32` for ``cc`` (1.0, no gain, for one not listed or below 8.0)."""
    return TF32_TENSOR_PER_FP32.get(tuple(cc), 1.0)


def target_device(cc: tuple[int, int]) -> DeviceInfo:
    """The :data:`DEVICES` record that stands for compute capability ``cc`` when building ahead
    of time: of those with that ``cc``, the one with the least shared memory per block (what
    is built for it fits the others); ValueError naming the known ones for any other ``cc``."""
    found = [d for d in DEVICES.values() if d.cc == tuple(cc)]
    if not found:
        known = ", ".join(f"{a}.{b}" for a, b in sorted({d.cc for d in DEVICES.values()}))
        raise ValueError(f"no known GPU of compute capability {cc[0]}.{cc[1]}; known: {known}")
    return min(found, key=lambda d: (d.smem_per_block, d.sm_count))
