"""Rung 4, 2-D register tiling: each of 256 threads computes a TM x TN micro-tile
of P as a sum of outer products. Per k it loads TM values of the M tile and TN
of the N tile into registers and does TM*TN FMAs with them: shared-memory loads
per FMA fall to (TM + TN) / (TM * TN) (1/4 for 8 x 8), and global loads per FMA
to (1/BN + 1/BM) -- the lectures' TILE_WIDTH argument applied at two levels.
Tile 128: BM = BN = 128, BK = 8, TM = TN = 8. Tile 64: 64 x 64, TM = TN = 4.
"""
from __future__ import annotations

from ..._backend import numba_cuda
from ._launch import numba_type, register_simt
from ._tiles import block_config, loaders, store

cuda = numba_cuda()
NT = 256
BK = 8


def shape(tile: int):
    """(BM, BN, TM, TN) for a block tile: 16 x 16 threads, each a (tile/16)^2 micro-tile."""
    return tile, tile, tile // 16, tile // 16


def make(tile: int, dtype: str):
    acc_t = numba_type(dtype)
    BM, BN, TM, TN = shape(tile)
    load_a, _, load_b, _ = loaders(BM, BN, BK, NT, dtype, False)
    NACC, TR, TC = TM * TN, BM // TM, BN // TN   # numba needs literal sizes: compute them here
    store_c = store(TM, TN, 1, 1)

    @cuda.jit
    def regtile(M, N, P):
        As = cuda.shared.array((BM, BK), acc_t)
        Bs = cuda.shared.array((BK, BN), acc_t)
        tid = cuda.threadIdx.x
        trow = tid // TC
        tcol = tid % TC
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BN
        acc = cuda.local.array(NACC, acc_t)
        regM = cuda.local.array(TM, acc_t)
        regN = cuda.local.array(TN, acc_t)
        for i in range(NACC):
            acc[i] = 0
        for k0 in range(0, M.shape[1], BK):
            load_a(M, As, row0, k0, tid)
            load_b(N, Bs, k0, col0, tid)
            cuda.syncthreads()
            for kk in range(BK):
                for i in range(TM):
                    regM[i] = As[trow * TM + i, kk]
                for j in range(TN):
                    regN[j] = Bs[kk, tcol * TN + j]
                for i in range(TM):
                    for j in range(TN):
                        acc[i * TN + j] += regM[i] * regN[j]
            cuda.syncthreads()
        store_c(P, acc, row0 + trow * TM, col0 + tcol * TN)

    return regtile


def config(tile, J, K, L):
    BM, BN, _, _ = shape(tile)
    return block_config(BM, BN, NT)(tile, J, K, L)


SPEC = register_simt("regtile2d", "rung 4: 2-D register tiling, a TM x TN outer-product micro-tile per thread",
                     make, order=40, config=config, tiles=(64, 128), default_tile=128)
