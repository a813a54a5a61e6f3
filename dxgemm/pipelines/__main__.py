"""``python -m dxgemm.pipelines {info,clear,build,suggest}``: the pipeline cache from the shell.

``build`` compiles kernels into the cache (``$DXGEMM_CACHE_DIR`` or ``--cache``); on a
machine without a GPU it compiles for CC 9.0 through the stand-in driver, e.g.::

    DXGEMM_CACHE_DIR=devcarry/pipeline_cache python -m dxgemm.pipelines build --dtype float64
"""

from __future__ import annotations

import argparse
import sys
import time

from .cache import KernelCache
from .config import PipelineConfig, parse_config, suggest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dxgemm.pipelines", description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=None, help="cache folder (default $DXGEMM_CACHE_DIR or the user cache dir)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="where the cache is, its entries and size")
    sub.add_parser("clear", help="remove every cached kernel")
    b = sub.add_parser("build", help="compile kernels into the cache")
    b.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    b.add_argument("--config", default="large", help="large, small or e.g. 128x128x32_t256_d2")
    b.add_argument("--arrangement", default="row_major,row_major", help="A,B: row_major or col_major each")
    s = sub.add_parser("suggest", help="the configuration suggest() picks")
    s.add_argument("m", type=int)
    s.add_argument("n", type=int)
    s.add_argument("k", type=int)
    s.add_argument("--dtype", default="float64")
    args = parser.parse_args(argv)
    cache = KernelCache(args.cache)

    if args.cmd == "info":
        print(cache.info())
        for entry in cache.entries():
            meta = entry.meta
            print(f"  {entry.key}  {meta.get('dtype')}  {'/'.join(meta.get('arrangement', []))}  "
                  f"{meta.get('name') or PipelineConfig(**meta['config']).name}  "
                  f"{entry.path.stat().st_size / 2**20:.1f} MiB")
    elif args.cmd == "clear":
        print(f"removed {cache.clear()} entries from {cache.root}")
    elif args.cmd == "suggest":
        print(suggest(args.m, args.n, args.k, args.dtype).name)
    elif args.cmd == "build":
        from .kernels import get_entry

        config = parse_config(args.config, args.dtype)
        arrangement = tuple(args.arrangement.split(","))
        t0 = time.perf_counter()
        entry = get_entry(config, args.dtype, arrangement, cache=cache,
                          log=lambda msg: print(f"[{time.perf_counter() - t0:7.1f} s] {msg}", flush=True))
        print(f"{config.name} {args.dtype} {args.arrangement}: {entry.path} "
              f"({time.perf_counter() - t0:.1f} s; build times {entry.meta.get('build_times_s')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
