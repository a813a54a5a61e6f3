#!/usr/bin/env python3
"""Build one kernel of every handwritten rung and both tf32mma modes for each target GPU, on a CPU.

For each compute capability (default 8.0, 8.9, 9.0, 10.0, 12.0) every kernel is compiled by
Numba to NVVM IR once, lowered by NVVM to that target's PTX, and assembled by ptxas inside
nvJitLink (``cuda.core.Linker``, ``-v``), which reports registers, spills and static shared
memory.  float64 ``warptile`` (DMMA) is built per target (its mma shape depends on the
compute capability).  A kernel fails when it does not build, uses more than 255 registers,
or — where the policy would run it on that target (:func:`dxgemm.policy.tile_fits`,
:func:`dxgemm.policy.tf32_auto` and ``tf32_tile_fits``) — spills or needs more shared memory than the target's
smallest GPU (:func:`dxgemm.runtime.device.target_device`) gives a block; the issues in
:data:`KNOWN` are reported, not counted.  Prints the table; exit status 1 on any failure::

    python tools/build_targets.py [--cc 8.0,8.9,9.0,10.0,12.0] [--jobs 2] [--all] [--out benchmarks/results/targets_build.txt]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dxgemm.pipelines import _standin  # noqa: E402

_standin.activate((9, 0))  # a driver stand-in: Numba lowers without a GPU; each target is given explicitly below
import numpy as np  # noqa: E402
from numba import typeof  # noqa: E402

from dxgemm import policy  # noqa: E402
from dxgemm.kernels import RUNGS, KernelSpec, Layout, compile_rung, compile_target  # noqa: E402
from dxgemm.kernels._device import dmma_shape_for  # noqa: E402
from dxgemm.kernels.tf32mma import tile_min_blocks  # noqa: E402
from dxgemm.runtime.device import target_device  # noqa: E402
from dxgemm.runtime.rungs import plain_epilogue  # noqa: E402

MAX_REGISTERS = 255
R = Layout.ROW

KNOWN = {
    ((9, 0), "tf32mma/tf32x3 float32"): "NVVM 13.0 (the ctk130 extra) spills at 255 registers where 13.5 does not; "
                                         "the H100 ran both builds at the same speed",
    ((10, 0), "tf32mma/tf32x3 float32"): "spills at 255 registers on sm_100a (32 bytes with NVVM 13.5, 160 with "
                                          "13.0; open: issue 38)",
    ((9, 0), "tf32mma/tf32x3_split float32"): "the 13.0 compilers spill its 255 registers as the unsplit tile's; "
                                               "the H100's measurements ran this build",
    ((10, 0), "tf32mma/tf32x3_split float32"): "spills at 255 registers on sm_100a, as the unsplit tile (open: issue 38)",
    ((9, 0), "tf32mma/tf32x3_small_split float32"): "the 13.0 compilers spill at the 168 registers of three blocks a "
                                                     "SM; the H100's measurements ran this build",
    ((9, 0), "tf32mma/tf32x3_small_split_serial float32"): "as the small split part: the 13.0 compilers spill at 168 "
                                                            "registers (not measured yet: DXGEMM_SPLIT_REDUCE=serial)",
    ((10, 0), "warptile/split float64"): "spills at 255 registers on sm_100a (open: issue 38)",
}
"""Known issues, tolerated: reported where they occur, not counted as failures."""


def kernels(extended: bool = False):
    """``(backend, dtype, tile)``: one kernel of every rung (float32; warptile in both dtypes, its
    float64 tile the DMMA one, and its tiny and batched small tiles), gemv's row, column and batched tiles, the split-K reduce, tf32mma's 128x128
    and 64x64 tiles of the default mode and one-pass tf32's 128x128 tile (``tf32mma.CONFIGS``),
    tf32wgmma's tf32x3 kernel, and the split parts whose registers differ from their
    tiles'; ``extended`` (``--all``, the committed table): also the thin tiles and one-pass tf32's
    smaller tiles on both rungs, tf32x3's 128x128 split part and a serial split kernel of each rung
    (``DXGEMM_SPLIT_REDUCE=serial``), left out of CI's run for time."""
    from dxgemm.kernels.tf32mma import CONFIGS
    from dxgemm.kernels.tf32wgmma import CONFIGS as WGMMA_CONFIGS

    out = [(rung, "float32", "large") for rung in RUNGS]
    out += [("warptile", "float64", "tiny"), ("warptile", "float64", "tiny_batched"), ("warptile", "float64", "micro_batched"),
            ("gemv", "float64", "large"), ("gemv", "float32", "rows"),
            ("gemv", "float64", "rows_deep"), ("gemv", "float32", "batched"), ("splitk_reduce", "float64", "large")]
    # the default mode's 128x128 and 64x64 tiles, of one-pass tf32 the 128x128 tile (``extended``: every
    # tile of both, the thin ones too)
    out += [("tf32mma", "float32", tile) for tile in CONFIGS if tile != "large" and "_split" not in tile
            and (tile in ("tf32x3", "tf32x3_small", "tf32") or extended)]
    out += [("tf32wgmma", "float32", tile) for tile in WGMMA_CONFIGS  # built for sm_90a only
            if tile == "tf32x3" or extended]
    # the split parts whose registers differ from their tile's (the thin and 64-wide ones match theirs)
    out += [("warptile", "float64", "split"), ("tf32mma", "float32", "tf32x3_small_split")]
    # float32's split part (the tiny tile's SIMT kernel, sliced), the contract's blocked 64x128 tile and the
    # tiny tile (a three-level sum)
    out += [("warptile", "float32", "split"), ("warptile", "float32", "small_blocked"), ("warptile", "float32", "tiny")]
    if extended:  # the 128x128 part (its tile's registers and spills) and a serial split kernel of each rung
        out += [("tf32mma", "float32", "tf32x3_split"), ("warptile", "float64", "split_n16_serial"),
                ("tf32mma", "float32", "tf32x3_small_split_serial"), ("warptile", "float32", "split_serial")]
    return out


def used_on(backend, dtype, tile, device) -> bool:
    """Whether the policy runs this kernel on ``device`` (a serial form: where its split tile runs)."""
    tile = tile.removesuffix("_serial")
    if backend == "tf32mma":
        return policy.tf32_auto(device) and policy.tf32_tile_fits(device, tile)
    if backend == "tf32wgmma":
        return policy.tf32_wgmma_fits(device)
    if backend == "warptile":
        return policy.tile_fits(device, dtype, tile)
    return True


def assemble(ptx: str, cc: tuple) -> dict:
    from cuda.core import Linker, LinkerOptions, ObjectCode

    arch = f"sm_{cc[0]}{cc[1]}{'a' if cc >= (9, 0) else ''}"
    linker = Linker(ObjectCode.from_ptx(ptx.encode()), options=LinkerOptions(arch=arch, verbose=True, ptxas_options=("-v",)))
    linker.link("cubin")
    log = linker.get_info_log()
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    smem = re.search(r"(\d+) bytes smem", log)
    return {"registers": regs, "spills": int(spill.group(1)) + int(spill.group(2)) if spill else 0,
            "static_smem": int(smem.group(1)) if smem else 0}


def build_rows(job) -> tuple[list[str], int]:
    """The table rows of one kernel on every target, and how many of them failed."""
    (backend, dtype, tile), targets = job
    bound = plain_epilogue(dtype)
    spec = KernelSpec(np.dtype(dtype), R, R, R, bound.key, bound.make(), tile=tile)
    # a serial split kernel takes (the epilogue's arguments, workspace, arrival counts)
    args = (bound.args, np.zeros(1, dtype), np.zeros(1, np.int32)) if tile.endswith("_serial") else bound.args
    compiled, lines, failures = {}, [], 0
    for cc in targets:
        if backend == "tf32wgmma" and cc not in policy.WGMMA_TARGETS:
            lines.append(f"  {cc[0]}.{cc[1]:<4} {backend}/{tile} {dtype:24} not built: wgmma is sm_90a's alone")
            continue
        # float64 warptile's mma shape and tf32mma's register bound depend on the target: one build each
        overrides = {"mma": dmma_shape_for(cc)} if backend == "warptile" and dtype == "float64" and cc < (9, 0) else {}
        if backend == "tf32mma":
            overrides = {"min_blocks": tile_min_blocks(tile, cc)}
        key = tuple(sorted(overrides.items()))
        name = f"{backend}/{tile} {dtype}"
        device = target_device(cc)
        t1 = time.perf_counter()
        try:
            if key not in compiled:
                compiled[key] = compile_rung(backend, spec, typeof(args), **overrides)
            kernel = compiled[key]
            (overload,) = kernel.kernel.overloads.values()
            info = assemble(overload.library.get_asm_str(cc=compile_target(backend, cc)), cc)
        except Exception as e:  # a kernel that does not build for this target
            failures += 1
            lines.append(f"  {cc[0]}.{cc[1]:<3} {name:32} build failed: {type(e).__name__}: {str(e)[:200]}")
            continue
        smem = kernel.built.dynamic_smem + info["static_smem"]
        used = used_on(backend, dtype, tile, device)
        fits = smem <= device.smem_per_block
        # spills matter where the policy runs the kernel; elsewhere they are reported only
        bad = info["registers"] > MAX_REGISTERS or (used and (info["spills"] > 0 or not fits))
        known = KNOWN.get((cc, name))
        if bad and known:
            result, bad = f"KNOWN: {known}", False
        else:
            result = "FAIL" if bad else "ok" if fits else "does not fit (not used here)"
        failures += bad
        lines.append(f"  {cc[0]}.{cc[1]:<4} {name:32} {info['registers']:4} {info['spills']:5} {smem:7} "
                     f"{device.smem_per_block:7}  {'yes ' if used else 'no  '}  {result}"
                     f"  [{time.perf_counter() - t1:.1f} s]")
    return lines, failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cc", default="8.0,8.9,9.0,10.0,12.0")
    parser.add_argument("--out", default=None, help="also write the table to this file")
    parser.add_argument("--jobs", type=int, default=1, help="kernels built at once, one process each")
    parser.add_argument("--all", action="store_true", help="also the kernels kernels(extended=True) adds")
    args = parser.parse_args(argv)
    targets = [tuple(int(x) for x in c.split(".")) for c in args.cc.split(",")]
    t0 = time.perf_counter()
    longest_first = sorted(kernels(args.all), key=lambda k: k[0] != "tf32mma")
    jobs = [(kernel, targets) for kernel in longest_first]
    if args.jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(build_rows, jobs))
    else:
        results = [build_rows(job) for job in jobs]
    lines = [f"# {'cc':6} {'kernel':32} {'regs':>4} {'spill':>5} {'smem B':>7} {'limit B':>7}  used  result  [seconds]"]
    failures = 0
    for rows, bad in results:
        lines += rows
        failures += bad
    lines.append(f"# {failures} failures; {time.perf_counter() - t0:.0f} s with {args.jobs} process(es)")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
