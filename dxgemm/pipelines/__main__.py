"""``python -m dxgemm.pipelines``: forwards to ``python -m dxgemm`` (the one command line)."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from dxgemm.__main__ import main

    print("dxgemm: `python -m dxgemm.pipelines` is now `python -m dxgemm` (info, cache, warmup)", file=sys.stderr)
    argv = sys.argv[1:]
    sys.exit(main(["cache", "clear"] if argv == ["clear"] else argv))
