"""``dxgemm.pipelines.elf``'s register and local-memory readers agree with ptxas (no GPU: nvJitLink links PTX)."""

from __future__ import annotations

import re

import pytest

from dxgemm.pipelines.elf import kernel_frame_bytes, kernel_registers

# a kernel whose register count depends on how many values stay live, and one with a local array
PTX = r"""
.version 8.7
.target {arch}
.address_size 64
.visible .entry live(.param .u64 p)
{{
 .reg .f32 %f<{n}>; .reg .b64 %rd<3>;
 ld.param.u64 %rd1, [p];
 cvta.to.global.u64 %rd2, %rd1;
{loads}
{sums}
 st.global.f32 [%rd2], %f0;
 ret;
}}
.visible .entry framed(.param .u64 p, .param .u32 i)
{{
 .local .align 4 .b8 buf[64];
 .reg .b32 %r<4>; .reg .b64 %rd<5>;
 ld.param.u64 %rd1, [p];
 ld.param.u32 %r1, [i];
 mov.u64 %rd2, buf;
 mul.wide.u32 %rd3, %r1, 4;
 add.u64 %rd4, %rd2, %rd3;
 st.local.u32 [%rd4], %r1;
 ld.local.u32 %r2, [%rd2+8];
 cvta.to.global.u64 %rd1, %rd1;
 st.global.u32 [%rd1], %r2;
 ret;
}}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_registers_and_frame_match_ptxas(arch):
    linker_mod = pytest.importorskip("cuda.core")
    n = 48
    loads = "\n".join(f" ld.global.f32 %f{i}, [%rd2+{4 * i}];" for i in range(n))
    sums = "\n".join(f" fma.rn.f32 %f0, %f{i}, %f{n - i}, %f0;" for i in range(1, n // 2))
    ptx = PTX.format(arch=arch, n=n + 1, loads=loads, sums=sums)
    linker = linker_mod.Linker(linker_mod.ObjectCode.from_ptx(ptx.encode()),
                               options=linker_mod.LinkerOptions(arch=arch, verbose=True, ptxas_options=("-v",)))
    cubin = bytes(linker.link("cubin").code)
    log = linker.get_info_log()
    said = dict(zip(re.findall(r"Compiling entry function '(\w+)'", log), map(int, re.findall(r"Used (\d+) registers", log))))
    frames = dict(zip(re.findall(r"Compiling entry function '(\w+)'", log), map(int, re.findall(r"(\d+) bytes stack frame", log))))
    assert kernel_registers(cubin) == said and said["live"] > 24
    assert kernel_frame_bytes(cubin).get("framed", 0) == frames["framed"] >= 64
    assert kernel_frame_bytes(cubin).get("live", 0) == frames["live"] == 0
