"""The cubin as ELF: kernel entries, their parameter sizes, out-of-line functions.

A linked pipeline cubin is checked before it is cached: its GEMM entry's parameters (from
``.nv.info.<entry>``) must match the layout the launcher packs (:func:`dxgemm.runtime.launch.param_layout`),
and cuBLASDx's device functions that take the accumulator by pointer must be inlined
(:func:`check_inlined`: an out-of-line one puts the accumulator in local memory and ran an
order of magnitude slower).  Plain ``struct`` reads of the ELF64 file; no toolchain needed.
"""

from __future__ import annotations

import struct
from typing import Any

from ..runtime.launch import KIND_SIZES
from .cache import accumulator_functions, compiler_mismatch


def _function_symbols(cubin: bytes) -> list[tuple[str, int]]:
    """``(name, st_other)`` of every STT_FUNC symbol in a cubin (ELF64)."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not an ELF64 cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, _shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    found: list[tuple[str, int]] = []
    for sh in sections:
        if sh[1] != 2:  # SHT_SYMTAB
            continue
        str_off = sections[sh[6]][4]
        for j in range(sh[5] // sh[9]):
            st_name, st_info, st_other, _shndx, _value, _size = struct.unpack_from("<IBBHQQ", cubin, sh[4] + j * sh[9])
            if st_info & 0xF == 2:  # STT_FUNC
                end = cubin.index(b"\0", str_off + st_name)
                found.append((cubin[str_off + st_name:end].decode(), st_other))
    return found


def kernel_entries(cubin: bytes) -> list[str]:
    """Names of the ``__global__`` functions in a cubin (ELF64), read from its symbol table.

    CUDA marks kernel entry symbols with ``STO_CUDA_ENTRY`` (0x10) in ``st_other``.  Used to
    record Numba's mangled kernel name at build time, so the launcher never needs Numba.
    """
    return [name for name, other in _function_symbols(cubin) if other & 0x10]


def outlined_functions(cubin: bytes) -> list[str]:
    """Device functions the link left out of line in a cubin's kernels, by name.

    ptxas names a kernel's non-inlined callee ``$<kernel>$<callee>``; CUDA's own helpers
    (``$__internal_*``, 64-bit division) are not counted.  A healthy pipeline kernel has
    none from cuBLASDx: nvJitLink inlines its device functions (``execute``, ``copy``...),
    so the accumulator they take by pointer becomes registers.  When they stay out of line
    the accumulator lives in local memory, loaded and stored around every MMA (see
    :func:`check_inlined`).
    """
    return [name.rsplit("$", 1)[-1] for name, other in _function_symbols(cubin)
            if not other & 0x10 and name.startswith("$") and not name.startswith("$__internal_")]


def check_inlined(outlined: list[str], toolchain: dict[str, Any]) -> str | None:
    """None when cuBLASDx's accumulator functions were inlined into the kernel, else a warning.

    ``outlined``: the kernel's :func:`outlined_functions`; ``toolchain``: the compilers that built it.

    A linker newer than the compiler (nvJitLink 13.5 on NVRTC 13.0's LTO-IR) leaves
    ``execute`` and more cuBLASDx functions out of line; the kernel then loads and stores its
    accumulator through local memory around every DMMA and runs an order of magnitude
    slower (``docs/performance.md``).
    NVRTC and nvJitLink 13.5 together inline them (only ``destroy`` stays out of line).
    """
    slow = accumulator_functions(outlined)
    if not slow:
        return None
    mismatch = compiler_mismatch(toolchain)
    fix = (f"{mismatch}; the slow kernels in the cache are then rebuilt when next loaded" if mismatch else
           "report it with the output of `python -m dxgemm info --verbose`")
    return (f"nvJitLink {toolchain.get('nvjitlink')} left cuBLASDx device functions out of line "
            f"({', '.join(slow)}) in a kernel whose LTO-IR NVRTC {toolchain.get('nvrtc')} produced: its "
            f"accumulator lives in local memory and it may run an order of magnitude slower.  {fix}")


def _elf_sections(cubin: bytes) -> dict[str, bytes]:
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_off = headers[shstrndx][4]
    out = {}
    for h in headers:
        start = names_off + h[0]
        name = cubin[start:cubin.index(b"\0", start)].decode()
        out[name] = cubin[h[4]:h[4] + h[5]] if h[1] != 8 else b""  # SHT_NOBITS has no bytes
    return out


def kernel_param_sizes(cubin: bytes, entry: str) -> list[int]:
    """Each parameter's size in bytes, in order, from the cubin's ``.nv.info.<entry>`` section.

    The section is a list of attributes ``(format u8, attribute u8, u16, payload)``;
    ``EIATTR_KPARAM_INFO`` (0x17) records (index, ordinal, offset, flags) with the size in
    bits 18-31 of the flags.  Lets a build check, without a GPU, that the parameter list
    recorded for the launcher matches the compiled kernel.
    """
    info = _elf_sections(cubin).get(f".nv.info.{entry}")
    if info is None:
        raise ValueError(f"no .nv.info section for {entry}")
    params: dict[int, int] = {}
    for attr, payload in _sized_attributes(info):
        if attr == 0x17 and len(payload) >= 12:
            _index, ordinal, _offset, flags = struct.unpack_from("<IHHI", payload)
            params[ordinal] = (flags >> 18) & 0x3FFF
    return [params[i] for i in sorted(params)]


def _sized_attributes(info: bytes):
    """``(attribute, payload)`` of each sized (``EIFMT_SVAL``) entry of a ``.nv.info`` section,
    a list of ``(format u8, attribute u8, u16, payload)``; other formats carry no payload."""
    pos = 0
    while pos + 4 <= len(info):
        fmt, attr, value = struct.unpack_from("<BBH", info, pos)
        pos += 4
        if fmt == 0x04:  # EIFMT_SVAL: value is the payload size
            yield attr, info[pos:pos + value]
            pos += value


def kernel_registers(cubin: bytes) -> dict[str, int]:
    """Registers per thread of each function in a cubin, by name: the ``.nv.info`` section's
    ``EIATTR_REGCOUNT`` (0x2f), the figure ``ptxas -v`` prints as "Used N registers"."""
    return _per_function(cubin, 0x2F)


def kernel_frame_bytes(cubin: bytes) -> dict[str, int]:
    """Local memory (stack frame) bytes per thread of each function, by name: ``EIATTR_FRAME_SIZE``
    (0x11); spilled registers live there, so a pipeline kernel keeping its accumulator in
    registers has a small one."""
    return _per_function(cubin, 0x11)


def _per_function(cubin: bytes, attribute: int) -> dict[str, int]:
    """``.nv.info``'s per-function attribute ``attribute``: payload (symbol index u32, value u32)."""
    info = _elf_sections(cubin).get(".nv.info", b"")
    names = _symbol_names(cubin)
    found: dict[str, int] = {}
    for attr, payload in _sized_attributes(info):
        if attr == attribute and len(payload) >= 8:
            symbol, count = struct.unpack_from("<II", payload)
            found[names.get(symbol, f"symbol {symbol}")] = count
    return found


def _symbol_names(cubin: bytes) -> dict[int, str]:
    """Symbol table index -> name (ELF64)."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, _shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names: dict[int, str] = {}
    for sh in sections:
        if sh[1] != 2:  # SHT_SYMTAB
            continue
        str_off = sections[sh[6]][4]
        for j in range(sh[5] // sh[9]):
            st_name = struct.unpack_from("<I", cubin, sh[4] + j * sh[9])[0]
            end = cubin.index(b"\0", str_off + st_name)
            names[j] = cubin[str_off + st_name:end].decode()
    return names


def _check_param_sizes(cubin: bytes, entry: str, kinds: list[str]) -> None:
    """Refuse to cache a kernel whose compiled parameters differ from the recorded layout."""

    sizes = kernel_param_sizes(cubin, entry)
    expected = [KIND_SIZES[k] for k in kinds]
    if sizes != expected:
        raise RuntimeError(f"{entry[:50]}: compiled parameter sizes {sizes} differ from the recorded layout {expected}")
