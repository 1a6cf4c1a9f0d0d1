"""Rung 5, shared-memory layout and index arithmetic.

Three changes to rung 4, each aimed at what its compiled code spends time on:
* Bank conflicts. Rung 4 gives thread t the columns t*TN .. t*TN+TN-1, so a warp's
  reads Bs[k, t*TN + j] are TN words apart: a 4-way conflict for TN = 8. Here the
  micro-tile is strided (thread t takes columns t, t+16, t+32, ...): a warp reads 16
  consecutive words (conflict-free) and its stores to P are coalesced too. The M tile
  is kept k-major (As[k, m]) and its rows padded by 4 words so that the transposing
  stores land in 32 different banks.
* int32 index arithmetic (the sizes are cast once; CUDA's own indices are 32-bit).
* An interior fast path: blocks and phases wholly inside the matrices load without
  bounds tests; only boundary blocks pay for the lectures' zero-fill.
"""
from __future__ import annotations

from numba import int32

from ..._backend import numba_cuda
from ._launch import numba_type, register_simt
from ._tiles import phase_loader, store
from .k04_regtile2d import BK, NT, config, shape

cuda = numba_cuda()
PAD = 4


def make(tile: int, dtype: str):
    acc_t = numba_type(dtype)
    BM, BN, TM, TN = shape(tile)
    TR, TC = BM // TM, BN // TN          # 16 x 16 threads
    NACC, AS_SHAPE = TM * TN, (BK, BM + PAD)   # numba needs literal sizes: compute them here
    load_phase = phase_loader(BM, BN, BK, NT, dtype, True)
    store_c = store(TM, TN, TR, TC)

    @cuda.jit
    def conflict_free(M, N, P):
        As = cuda.shared.array(AS_SHAPE, acc_t)
        Bs = cuda.shared.array((BK, BN), acc_t)
        J = int32(M.shape[0])
        K = int32(M.shape[1])
        L = int32(N.shape[1])
        tid = int32(cuda.threadIdx.x)
        trow = tid // TC
        tcol = tid % TC
        row0 = int32(cuda.blockIdx.y) * BM
        col0 = int32(cuda.blockIdx.x) * BN
        interior = row0 + BM <= J and col0 + BN <= L
        acc = cuda.local.array(NACC, acc_t)
        regM = cuda.local.array(TM, acc_t)
        regN = cuda.local.array(TN, acc_t)
        for i in range(NACC):
            acc[i] = 0
        for k0 in range(int32(0), K, BK):
            load_phase(M, N, As, Bs, row0, k0, col0, tid, interior, K)
            cuda.syncthreads()
            for kk in range(BK):
                for i in range(TM):
                    regM[i] = As[kk, trow + i * TR]
                for j in range(TN):
                    regN[j] = Bs[kk, tcol + j * TC]
                for i in range(TM):
                    for j in range(TN):
                        acc[i * TN + j] += regM[i] * regN[j]
            cuda.syncthreads()
        store_c(P, acc, row0 + trow, col0 + tcol)

    return conflict_free


SPEC = register_simt("conflict-free", "rung 5: strided micro-tile (no bank conflicts), k-major padded M tile, "
                     "int32 indices, interior fast path", make, order=50, config=config, tiles=(64, 128),
                     default_tile=128)
