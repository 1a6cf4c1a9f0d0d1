"""Rung 3, thread coarsening (1-D register tiling).

The tiled kernel reads two shared-memory values per multiply-add. Here each thread
computes TM = 8 elements of one column of P: per k it reads one N value from
shared memory into a register and reuses it for TM products, so shared-memory
traffic per FMA drops from 2 loads to (1 + 1/TM). Block tile 64 x 64, BK = 8,
512 threads; the tile loads are the lectures' zero-filling collaborative loads.
"""
from __future__ import annotations

from ..._backend import numba_cuda
from ._launch import numba_type, register_simt
from ._tiles import block_config, loaders, store

cuda = numba_cuda()
BM, BN, BK, TM = 64, 64, 8, 8
NT = BM * BN // TM


def make(tile: int, dtype: str):
    acc_t = numba_type(dtype)
    load_a, _, load_b, _ = loaders(BM, BN, BK, NT, dtype, False)
    store_c = store(TM, 1, 1, 1)

    @cuda.jit
    def coarsen(M, N, P):
        As = cuda.shared.array((BM, BK), acc_t)
        Bs = cuda.shared.array((BK, BN), acc_t)
        tid = cuda.threadIdx.x
        tcol = tid % BN          # consecutive threads: consecutive columns
        trow = tid // BN         # which run of TM rows
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BN
        acc = cuda.local.array(TM, acc_t)
        for i in range(TM):
            acc[i] = 0
        for k0 in range(0, M.shape[1], BK):
            load_a(M, As, row0, k0, tid)
            load_b(N, Bs, k0, col0, tid)
            cuda.syncthreads()
            for kk in range(BK):
                b = Bs[kk, tcol]
                for i in range(TM):
                    acc[i] += As[trow * TM + i, kk] * b
            cuda.syncthreads()
        store_c(P, acc, row0 + trow * TM, col0 + tcol)

    return coarsen


SPEC = register_simt("coarsen", "rung 3: each thread computes 8 P elements of a column (1-D register tiling)",
                     make, order=30, config=block_config(BM, BN, NT), tiles=(64,), default_tile=64)
