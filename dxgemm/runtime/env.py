"""The environment variables dxgemm reads, all of them, read here and nowhere else.

==========================  ===========================================  ==========================================
variable                    default                                      effect
==========================  ===========================================  ==========================================
``DXGEMM_CACHE_DIR``        the user cache directory (platformdirs:      where compiled kernels (both backends) and
                            ``~/.cache/dxgemm`` on Linux)                the autotune table are kept
``XDG_CACHE_HOME``          ``~/.cache``                                 moves the user cache directory (when
                                                                         ``DXGEMM_CACHE_DIR`` is not set)
``DXGEMM_AUTO_PIPELINE``    ``1``                                        ``0`` keeps ``backend="auto"`` on the
                                                                         handwritten kernels (no pipeline compile
                                                                         behind the caller's back, e.g. in a test
                                                                         suite); ``backend="pipeline"`` still works
``DXGEMM_COMPILE_WORKERS``  one per CPU core beyond the first, at most   processes a cold pipeline build spreads
                            12                                           its NVRTC compiles over
``CC``                      ``gcc``                                      the C compiler that builds the stand-in
                                                                         driver on a machine without a GPU
``NUMBA_ENABLE_CUDASIM``    unset                                        Numba's own: ``1`` runs every kernel on
                                                                         Numba's CUDA simulator (CPU, slow)
``DXGEMM_DEVICE_AS``        unset                                        for testing: a GPU of
                                                                         :data:`dxgemm.gpus.DEVICES` (e.g. ``L40S``,
                                                                         ``B200``) whose figures every decision
                                                                         uses instead of the real GPU's (backend,
                                                                         tile, split, pipeline availability);
                                                                         kernels are still built for and run on
                                                                         the real GPU
``DXGEMM_SPLIT_REDUCE``     unset (the policy's choice)                  how a handwritten call split over K sums
                                                                         its slices: ``separate`` (a reduce kernel
                                                                         after the slices' kernel) or ``serial``
                                                                         (the last slice of each tile sums it, in
                                                                         the slices' kernel: one launch); for
                                                                         measuring the two
==========================  ===========================================  ==========================================

Each is read when it is used (a test or a script may set it between calls), never at import.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..gpus import DeviceInfo

__all__ = ["cache_dir", "auto_pipeline", "compile_workers", "c_compiler", "simulator_requested", "device_as",
           "split_reduce", "steering_state", "VARIABLES"]

VARIABLES = ("DXGEMM_CACHE_DIR", "XDG_CACHE_HOME", "DXGEMM_AUTO_PIPELINE", "DXGEMM_COMPILE_WORKERS", "CC",
             "NUMBA_ENABLE_CUDASIM", "DXGEMM_DEVICE_AS", "DXGEMM_SPLIT_REDUCE")
"""Every variable the table above lists."""


def _environment_reader():
    """``os.environ.get`` without its per-read key encoding, this module's one reader (a
    repeat call reads several variables every time): ``os.environ`` writes every change
    through to its ``_data`` mapping (encoded keys), so a lookup there sees what
    ``os.environ.get`` would, for a dictionary read.  Falls back to ``os.environ.get``
    where that mapping is not there."""
    data = getattr(os.environ, "_data", None)
    encode = getattr(os.environ, "encodekey", None)
    decode = getattr(os.environ, "decodevalue", None)
    if not isinstance(data, dict) or encode is None or decode is None:
        return os.environ.get
    keys: dict[str, object] = {}

    def get(name: str, default: str | None = None) -> str | None:
        key = keys.get(name)
        if key is None:
            key = keys[name] = encode(name)
        raw = data.get(key)
        return default if raw is None else decode(raw)

    return get


_get = _environment_reader()


def cache_dir() -> Path:
    """``$DXGEMM_CACHE_DIR``, else the user cache directory for dxgemm."""
    env = _get("DXGEMM_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return _user_cache_dir(_get("XDG_CACHE_HOME"))


def cache_dir_set() -> bool:
    """Whether ``DXGEMM_CACHE_DIR`` names the cache directory."""
    return bool(_get("DXGEMM_CACHE_DIR"))


@functools.lru_cache(maxsize=None)
def _user_cache_dir(xdg_cache_home: str | None) -> Path:
    """platformdirs' answer, asked once (every pipeline call consults the cache directory)."""
    try:
        import platformdirs
    except ImportError:  # a host without platformdirs: the XDG rule it would apply on Linux
        base = xdg_cache_home or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "dxgemm"
    return Path(platformdirs.user_cache_dir("dxgemm"))


def auto_pipeline() -> bool:
    """Whether ``backend="auto"`` may pick the pipeline (``DXGEMM_AUTO_PIPELINE`` is not ``0``)."""
    return _get("DXGEMM_AUTO_PIPELINE", "1") != "0"


def compile_workers() -> int:
    """Processes a cold pipeline build spreads its NVRTC compiles over (``DXGEMM_COMPILE_WORKERS``)."""
    text = _get("DXGEMM_COMPILE_WORKERS")
    if text:
        return max(int(text), 1)
    return max(min((os.cpu_count() or 1) - 1, 12), 1)


def c_compiler() -> str:
    """The C compiler for the stand-in driver (``CC``, default ``gcc``)."""
    return _get("CC", "gcc")


def simulator_requested() -> bool:
    """Whether ``NUMBA_ENABLE_CUDASIM=1`` asks for Numba's CUDA simulator."""
    return _get("NUMBA_ENABLE_CUDASIM") == "1"


def device_as() -> "DeviceInfo | None":
    """The :data:`dxgemm.gpus.DEVICES` record ``DXGEMM_DEVICE_AS`` names (None when unset or
    empty): the GPU whose figures the decisions use, to test on one GPU the paths another
    takes (an H100 choosing as an L40S, without the sm_90a pipeline).  Matched by record key
    or product name, ignoring case, spaces, ``-`` and ``_``; ValueError listing the records
    for any other name."""
    text = _get("DXGEMM_DEVICE_AS", "").strip()
    return _device_record(text) if text else None


def device_as_text() -> str | None:
    """``DXGEMM_DEVICE_AS`` as set (None when unset): what the repeat-call memo keys on, a
    dictionary read per call (:func:`device_as` resolves and checks it)."""
    return _get("DXGEMM_DEVICE_AS")


SPLIT_REDUCES = ("separate", "serial")
"""The values ``DXGEMM_SPLIT_REDUCE`` takes."""


def split_reduce() -> str | None:
    """How a handwritten split-K call sums its slices as ``DXGEMM_SPLIT_REDUCE`` forces it (None:
    unset, :func:`dxgemm.policy.split_sum_serial` chooses); ValueError for a value not in
    :data:`SPLIT_REDUCES`."""
    text = _get("DXGEMM_SPLIT_REDUCE", "").strip().lower()
    if not text:
        return None
    if text not in SPLIT_REDUCES:
        raise ValueError(f"DXGEMM_SPLIT_REDUCE={text!r}: set it to one of {', '.join(SPLIT_REDUCES)}, or unset it")
    return text


def split_reduce_text() -> str | None:
    """``DXGEMM_SPLIT_REDUCE`` as set (None when unset): what the repeat-call memo keys on."""
    return _get("DXGEMM_SPLIT_REDUCE")


def _squeeze(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch not in " -_")


@functools.lru_cache(maxsize=None)
def _device_record(text: str) -> "DeviceInfo":
    from ..gpus import DEVICES

    for key, record in DEVICES.items():
        if _squeeze(text) in (_squeeze(key), _squeeze(record.name)):
            return record
    raise ValueError(f"DXGEMM_DEVICE_AS={text!r} names no GPU dxgemm knows; set it to one of "
                     f"{', '.join(sorted(DEVICES))} (dxgemm.gpus.DEVICES), or unset it to decide for the real GPU")


def steering_state() -> tuple:
    """The variables that change a call's decisions, as a hashable value (the repeat-call
    memo, :mod:`.calls`, keys on it)."""
    return (_get("DXGEMM_AUTO_PIPELINE"), _get("DXGEMM_CACHE_DIR"), _get("XDG_CACHE_HOME"), _get("DXGEMM_DEVICE_AS"))
