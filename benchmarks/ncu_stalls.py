"""Where a kernel's warps stall, by SASS opcode, from Nsight Compute's per-instruction source page.

On the GPU host (the kernel must be cached; ``ncu_pipeline.py`` runs one 4096^3 GEMM)::

    ncu --clock-control none -k regex:^gemm --section SourceCounters --section WarpStateStats \\
        --page source --print-source sass --csv python benchmarks/ncu_pipeline.py float64 > source.csv

then anywhere (no GPU)::

    python benchmarks/ncu_stalls.py source.csv

Prints each opcode's share of the warp-stall samples, split by reason (``wait``: a fixed-latency
dependency, ``math``: the pipe is busy, ``long_sb``: waiting on global/local memory or a barrier
try-wait, ``short_sb``: shared memory, ...), for a DMMA kernel the same split at its last DMMA
(the K loop against the epilogue and stores after it), then the instructions with the most samples.
"""

from __future__ import annotations

import collections
import csv
import sys

REASONS = ("wait", "math", "long_sb", "short_sb", "selected", "mio", "lg", "branch_resolving", "barrier", "misc")


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def _opcode(source: str) -> str:
    words = source.split()
    words = words[1:] if words and words[0].startswith("@") else words
    return words[0].split(".")[0] if words else "?"


def main(path: str, top: int = 12) -> None:
    lines = open(path).read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    rows = list(csv.reader(lines[start:]))
    col = {name: i for i, name in enumerate(rows[0])}
    data = rows[1:]
    samples = "Warp Stall Sampling (All Samples)"
    total = sum(_number(r[col[samples]]) for r in data) or 1.0
    by_opcode: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in data:
        opcode = _opcode(r[col["Source"]])
        by_opcode[opcode]["all"] += _number(r[col[samples]])
        for reason in REASONS:
            by_opcode[opcode][reason] += _number(r[col[f"stall_{reason}"]])
    print(f"{len(data)} SASS instructions, {total:.0f} stall samples; share of all samples, %")
    for opcode, c in sorted(by_opcode.items(), key=lambda kv: -kv[1]["all"])[:top]:
        parts = " ".join(f"{reason}={c[reason] / total * 100:.1f}" for reason in REASONS if c[reason] / total >= 0.001)
        print(f"  {opcode:8} {c['all'] / total * 100:5.1f}  {parts}")
    last = max((i for i, r in enumerate(data) if _opcode(r[col["Source"]]) == "DMMA"), default=None)
    if last is not None:  # a DMMA kernel: its K loop against what follows it (the epilogue and the stores)
        for name, part in (("to the last DMMA", data[:last + 1]), ("after it", data[last + 1:])):
            share = sum(_number(r[col[samples]]) for r in part) / total * 100
            parts = " ".join(f"{reason}={v:.1f}" for reason in REASONS
                             if (v := sum(_number(r[col[f'stall_{reason}']]) for r in part) / total * 100) >= 0.1)
            print(f"  {name:17} {share:5.1f}  {parts}")
    print("instructions with the most samples, %")
    for r in sorted(data, key=lambda r: -_number(r[col[samples]]))[:top]:
        main_reason = max(REASONS, key=lambda reason: _number(r[col[f"stall_{reason}"]]))
        print(f"  {r[col['Address']][-6:]}  {_number(r[col[samples]]) / total * 100:5.2f}  "
              f"executed {r[col['Instructions Executed']]:>10}  {main_reason:8}  {r[col['Source']].strip()[:60]}")


if __name__ == "__main__":
    main(sys.argv[1])
