"""Rung 6, double buffering.

In rungs 2-5 a block loads a phase's tiles, waits at a barrier, computes, waits
again: while it loads, its FMA units idle (other resident blocks hide part of
that). Here there are two shared buffers: each thread fetches its share of the
*next* phase's tiles into registers before computing on the current buffer, then
stores them into the other buffer -- one barrier per phase instead of two, and the
global-memory latency overlaps the arithmetic. Otherwise as rung 5.
"""
from __future__ import annotations

from numba import int32

from ..._backend import numba_cuda
from ._launch import numba_type, register_simt
from ._tiles import prefetchers, store
from .k04_regtile2d import BK, NT, config, shape
from .k05_conflict_free import PAD

cuda = numba_cuda()


def make(tile: int, dtype: str):
    acc_t = numba_type(dtype)
    BM, BN, TM, TN = shape(tile)
    TR, TC = BM // TM, BN // TN
    LA, LB = BM * BK // NT, BK * BN // NT
    NACC, AS_SHAPE, BS_SHAPE = TM * TN, (2, BK, BM + PAD), (2, BK, BN)   # literal sizes for numba
    fetch_a, stash_a, fetch_b, stash_b = prefetchers(BM, BN, BK, NT, dtype)
    store_c = store(TM, TN, TR, TC)

    @cuda.jit
    def double_buffer(M, N, P):
        As = cuda.shared.array(AS_SHAPE, acc_t)
        Bs = cuda.shared.array(BS_SHAPE, acc_t)
        K = int32(M.shape[1])
        tid = int32(cuda.threadIdx.x)
        trow = tid // TC
        tcol = tid % TC
        row0 = int32(cuda.blockIdx.y) * BM
        col0 = int32(cuda.blockIdx.x) * BN
        acc = cuda.local.array(NACC, acc_t)
        regM = cuda.local.array(TM, acc_t)
        regN = cuda.local.array(TN, acc_t)
        nextA = cuda.local.array(LA, acc_t)
        nextB = cuda.local.array(LB, acc_t)
        for i in range(NACC):
            acc[i] = 0
        fetch_a(M, row0, 0, tid, nextA)
        fetch_b(N, 0, col0, tid, nextB)
        stash_a(As, 0, nextA, tid)
        stash_b(Bs, 0, nextB, tid)
        cuda.syncthreads()
        phases = (K + BK - 1) // BK
        for ph in range(phases):
            cur = ph % 2
            if ph + 1 < phases:          # start the next phase's global loads now
                fetch_a(M, row0, (ph + 1) * BK, tid, nextA)
                fetch_b(N, (ph + 1) * BK, col0, tid, nextB)
            for kk in range(BK):
                for i in range(TM):
                    regM[i] = As[cur, kk, trow + i * TR]
                for j in range(TN):
                    regN[j] = Bs[cur, kk, tcol + j * TC]
                for i in range(TM):
                    for j in range(TN):
                        acc[i * TN + j] += regM[i] * regN[j]
            if ph + 1 < phases:          # the other buffer was last read before the previous barrier
                stash_a(As, 1 - cur, nextA, tid)
                stash_b(Bs, 1 - cur, nextB, tid)
            cuda.syncthreads()
        store_c(P, acc, row0 + trow, col0 + tcol)

    return double_buffer


SPEC = register_simt("double-buffer", "rung 6: rung 5 with two shared buffers, next tiles prefetched "
                     "into registers during compute", make, order=60, config=config, tiles=(64, 128),
                     default_tile=128, barriers_per_phase=1)
