"""Attention scores for every head of a batch in one launch: ``mask(Q @ K^T * scale + bias)``.

``Q`` and ``K`` are ``(batch, heads, seq, dim)``; ``K^T`` is a transposed *view* (no copy), so
each entry of the batch is a column-major matrix, which the kernel reads as it is.  The
scores of all ``batch x heads`` entries come from one ``dxgemm.gemm`` call: the leading
dimensions broadcast as in NumPy's ``matmul``.  The epilogue, fused into the same kernel:

* ``bias(pos)`` with ``pos`` of shape ``(heads, 1, seq)``: a per-head bias over key positions
  (an ALiBi-style position bias), which broadcasts over the batch dimension;
* ``causal``: a ``custom`` function that masks keys after the query; its last parameter is
  named ``batch``, so it also receives the entry's index, which it uses to read a per-entry
  sequence length (padding masked out).

    python examples/batched_attention.py [BATCH HEADS SEQ DIM]

Without a GPU it runs at a small size under Numba's CUDA simulator.
"""

import os
import subprocess
import sys

import numpy as np


def causal(x, row, col, lengths, batch):
    """Keys after the query, or past the entry's sequence length, get -inf (softmax weight 0)."""
    if col > row or col >= lengths[batch]:
        return -np.inf
    return x


def main(batch: int, heads: int, seq: int, dim: int) -> int:
    import dxgemm
    from dxgemm.epilogues import bias, custom

    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    if simulated:
        from numba import cuda

        to_device, to_host = cuda.to_device, lambda d: d.copy_to_host()
    else:
        import cupy

        to_device, to_host = cupy.asarray, cupy.asnumpy
    rng = np.random.default_rng(0)
    q = rng.standard_normal((batch, heads, seq, dim))
    k = rng.standard_normal((batch, heads, seq, dim))
    slopes = 2.0 ** -np.arange(1, heads + 1)
    pos = (-slopes[:, None, None] * np.arange(seq)[None, None, :]).astype(np.float64)  # (heads, 1, seq)
    lengths = rng.integers(seq // 2, seq + 1, batch * heads).astype(np.int64)  # one per (batch, head) entry

    kt = to_device(k).swapaxes(-1, -2) if not simulated else _transposed(to_device, k)
    scores = dxgemm.gemm(to_device(q), kt, alpha=1 / np.sqrt(dim),
                         epilogue=bias(to_device(pos)) | custom(causal, to_device(lengths)))
    got = to_host(scores)

    # The same computation with NumPy, for comparison.
    want = np.matmul(q, np.swapaxes(k, -1, -2)) / np.sqrt(dim) + pos
    rows, cols = np.arange(seq)[:, None], np.arange(seq)[None, :]
    masked = (cols > rows)[None, None] | (cols[None, None] >= lengths.reshape(batch, heads, 1, 1))
    want = np.where(masked, -np.inf, want)
    finite = np.isfinite(want)
    same_mask = np.array_equal(np.isfinite(got), finite)
    error = np.abs(got[finite] - want[finite]).max() / np.abs(want[finite]).max()
    print(f"attention scores, {batch} x {heads} heads of {seq}x{seq} (dim {dim}), float64, one launch"
          + (" (simulated)" if simulated else ""))
    print(f"mask as NumPy's: {same_mask}; max relative difference {error:.3g}")
    return 0 if same_mask and error < 1e-12 else 1


def _transposed(to_device, k):
    """A transposed view of a simulated device copy (the simulator's arrays have no swapaxes)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    return FakeCUDAArray(np.swapaxes(to_device(k)._ary, -1, -2))


if __name__ == "__main__":
    sizes = [int(s) for s in sys.argv[1:5]] or [8, 16, 512, 64]
    from numba import cuda

    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1" and not cuda.is_available():
        print("No CUDA GPU found: running at a small size under Numba's CUDA simulator.", flush=True)
        small = [str(min(s, cap)) for s, cap in zip(sizes, (2, 2, 9, 5))]
        sys.exit(subprocess.call([sys.executable, __file__, *small], env=dict(os.environ, NUMBA_ENABLE_CUDASIM="1")))
    sys.exit(main(*sizes))
