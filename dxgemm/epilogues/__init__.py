"""Fused epilogues: functions of the accumulator applied in registers before the single store.

See :mod:`dxgemm.epilogues._base` for the protocol every backend implements.
"""

from ._base import AlphaBeta, BoundEpilogue, Chain, Epilogue, EpilogueContext

__all__ = ["Epilogue", "Chain", "AlphaBeta", "BoundEpilogue", "EpilogueContext"]
