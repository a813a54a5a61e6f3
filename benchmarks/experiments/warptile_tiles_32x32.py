"""float64 warptile with 8 warps of 32x32 on 128x64 blocks against the small and medium tiles (not shipped).

    . .whl/activate.sh && python benchmarks/experiments/warptile_tiles_32x32.py --tiles small,medium,w32k16,w32k8 \\
        --epilogue 'bias|gelu' --shapes 4096x4096x256,8192x8192x512

The small tile (8 warps of 64x16) and the medium one (4 warps of 64x32) have the same
128x64 blocks; 8 warps of 32x32 would keep the small tile's 16 warps per SM, which hide the
float64 GELU's FP64 latency, with fewer shared-memory reads per multiply-add (64 values for
1024 against 80 for 1024).  ``w32k16`` takes dxgemm's default DMMA shape, ``w32k8``
m16n8k8; both BK = 8, four ``cp.async`` stages, two blocks per SM (128 registers, no
spills in a CPU compile).  The tiles are added to ``warptile.TILE_CONFIGS`` and
``benchmarks/warptile_tiles.py`` runs with the remaining arguments.  Session 21
(``h100_warptile_tiles_32x32_s21.log``): bare, ``w32k16`` ties the small tile (0.1865
against 0.1858 ms at 4096x4096x256) and both trail the medium one (0.1720); with ``bias |
gelu`` all three 128x64 tiles of 16 warps tie (0.229-0.232 ms).
"""

import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from dxgemm.kernels import warptile  # noqa: E402

BASE = dict(kind="dmma", copy="async", threads=256, BM=128, BN=64, BK=8, WM=32, WN=32, stages=4, min_blocks=2)
warptile.TILE_CONFIGS["float64"]["w32k16"] = dict(BASE)
warptile.TILE_CONFIGS["float64"]["w32k8"] = dict(BASE, mma_sm90=(16, 8))

if __name__ == "__main__":
    sys.argv = [str(ROOT / "benchmarks" / "warptile_tiles.py")] + sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
