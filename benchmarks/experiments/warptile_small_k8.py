"""The float64 small tile on m16n8k8 against its m16n8k4 (an experiment, not shipped).

    . .whl/activate.sh && python benchmarks/experiments/warptile_small_k8.py --tiles small,small_k8,medium \\
        --shapes 4096x4096x256,4096x4096x40

The small tile (8 warps of 64x16, BK = 8, four ``cp.async`` stages) runs DMMA.16x8x4, the
shape ``_device.dmma_shape_for`` gives every tile that names none; ``small_k8`` is the same
tile on m16n8k8 (half the mmas a K tile, 128 registers, no spills in a CPU compile).  It
is added to ``warptile.TILE_CONFIGS`` and ``benchmarks/warptile_tiles.py`` runs with the
remaining arguments.  Session 21 (``h100_warptile_small_k8_s21.log``): bare, 2-7 % faster
at short K (4096x4096x256 0.1822 against 0.1861 ms, 4096x4096x40 0.0591 against 0.0636)
and 2 % slower at 1000^3, 1024^3 and 2048^2 x 256; with ``bias | gelu`` a tie (0.2278
against 0.2284 at 4096x4096x256), where the epilogue's FP64 work bounds the kernel.
"""

import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from dxgemm.kernels import warptile  # noqa: E402

warptile.TILE_CONFIGS["float64"]["small_k8"] = dict(warptile.TILE_CONFIGS["float64"]["small"], mma_sm90=(16, 8))

if __name__ == "__main__":
    sys.argv = [str(ROOT / "benchmarks" / "warptile_tiles.py")] + sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
