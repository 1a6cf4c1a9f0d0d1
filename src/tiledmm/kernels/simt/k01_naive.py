"""Rung 1, the lectures' simple kernel: one thread per P element, every operand
read from global memory (4 B per FLOP in float32).

    int Row = blockIdx.y*blockDim.y+threadIdx.y;
    int Col = blockIdx.x*blockDim.x+threadIdx.x;
    if ((Row < Width) && (Col < Width)) { ... P[Row*Width+Col] = Pvalue; }

generalised to rectangular J x K by K x L. Consecutive threads (threadIdx.x) take
consecutive columns, so their reads of N[k, Col] are coalesced; their reads of
M[Row, k] are one address broadcast across the warp. ``naive-uncoalesced`` is the
same arithmetic launched the other way round -- the lectures' "two access patterns"
in numbers.
"""
from __future__ import annotations

import functools
import math

from ..._backend import numba_cuda
from ._launch import numba_type, register_simt

# a module global: the CUDA simulator swaps globals bound to numba.cuda for its fake module
cuda = numba_cuda()


def make(tile: int, dtype: str, coalesced: bool = True):
    acc_t = numba_type(dtype)

    @cuda.jit
    def naive(M, N, P):
        Row = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        Col = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if Row < P.shape[0] and Col < P.shape[1]:
            Pvalue = acc_t(0)
            for k in range(M.shape[1]):
                Pvalue += M[Row, k] * N[k, Col]
            P[Row, Col] = Pvalue

    @cuda.jit
    def naive_uncoalesced(M, N, P):
        # the same kernel launched the other way round: threadIdx.x runs down a column of P, so
        # a warp's M[Row, k] reads are Width apart (one DRAM burst each) and its stores too
        Row = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        Col = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if Row < P.shape[0] and Col < P.shape[1]:
            Pvalue = acc_t(0)
            for k in range(M.shape[1]):
                Pvalue += M[Row, k] * N[k, Col]
            P[Row, Col] = Pvalue

    return naive if coalesced else naive_uncoalesced


def transposed_config(tile: int, J: int, K: int, L: int):
    """x runs along the rows of P (the slides' 'cannot tell until you know the launch')."""
    return (math.ceil(J / tile), math.ceil(L / tile)), (tile, tile)


SPEC = register_simt(
    "naive", "lectures' simple kernel: one thread per P element, operands from global memory",
    make, order=10, block_tile=lambda tile: (1, 1), barriers_per_phase=1)
SPEC_UNCOALESCED = register_simt(
    "naive-uncoalesced", "naive kernel with threadIdx.x along a column: M reads and P stores uncoalesced",
    functools.partial(make, coalesced=False), config=transposed_config, order=11,
    block_tile=lambda tile: (1, 1), barriers_per_phase=1)
