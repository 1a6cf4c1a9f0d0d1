"""Rung 8, warp tiling.

A block tile of 128 x 128 is split among its 8 warps as 4 x 2 warp tiles of 32 x 64;
inside a warp the 32 lanes form a 4 x 8 grid, and each lane computes 2 x 2 sub-tiles
of 4 x 4 (8 x 8 in all), the sub-tiles 16 rows / 32 columns apart. Two things follow:
* a lane's 4 values of one sub-tile are *contiguous* and 16-byte aligned in shared
  memory (the M tile is k-major with rows padded to 132 words), so the compiler may
  read them with one LDS.128 instead of four scalar LDS -- rung 5's stride-16
  micro-tile ruled that out, and its SASS showed only scalar LDS;
* within a warp, the 8 lane columns read 32 consecutive words of the N tile (no bank
  conflicts) and the 4 lane rows 16 consecutive words of the M tile (broadcast across
  lane columns), and the stores to P are 4-word runs from consecutive lanes.
Loads, zero-fill and the interior fast path are rung 5's.
"""
from __future__ import annotations

from numba import int32

from ..._backend import numba_cuda
from ._launch import numba_type, register_simt
from ._tiles import block_config, phase_loader, store
from .k05_conflict_free import PAD

cuda = numba_cuda()
BM = BN = 128
BK = 8
NT = 256
WM, WN = 32, 64               # warp tile; 8 warps as 4 x 2
LR, LC = 4, 8                 # lanes as 4 rows x 8 columns
SM, SN = 2, 2                 # sub-tiles per lane
V = 4                         # a sub-tile is 4 x 4


def make(tile: int, dtype: str):
    acc_t = numba_type(dtype)
    load_phase = phase_loader(BM, BN, BK, NT, dtype, True)
    AS_SHAPE, NACC, NM, NN = (BK, BM + PAD), SM * V * SN * V, SM * V, SN * V
    SUB_R, SUB_C = LR * V, LC * V          # 16 rows, 32 columns between a lane's sub-tiles
    store_c = store(NM, NN, SUB_R, SUB_C, V)   # 4-word runs, SUB_R rows / SUB_C columns apart

    @cuda.jit
    def warp_tile(M, N, P):
        As = cuda.shared.array(AS_SHAPE, acc_t)
        Bs = cuda.shared.array((BK, BN), acc_t)
        J = int32(M.shape[0])
        K = int32(M.shape[1])
        L = int32(N.shape[1])
        tid = int32(cuda.threadIdx.x)
        warp = tid // 32
        lane = tid % 32
        r0 = (warp // (BN // WN)) * WM + (lane // LC) * V     # first row of the lane's first sub-tile
        c0 = (warp % (BN // WN)) * WN + (lane % LC) * V
        row0 = int32(cuda.blockIdx.y) * BM
        col0 = int32(cuda.blockIdx.x) * BN
        interior = row0 + BM <= J and col0 + BN <= L
        acc = cuda.local.array(NACC, acc_t)
        regM = cuda.local.array(NM, acc_t)
        regN = cuda.local.array(NN, acc_t)
        for i in range(NACC):
            acc[i] = 0
        for k0 in range(int32(0), K, BK):
            load_phase(M, N, As, Bs, row0, k0, col0, tid, interior, K)
            cuda.syncthreads()
            for kk in range(BK):
                for s in range(SM):
                    for v in range(V):
                        regM[s * V + v] = As[kk, r0 + s * SUB_R + v]
                for s in range(SN):
                    for v in range(V):
                        regN[s * V + v] = Bs[kk, c0 + s * SUB_C + v]
                for i in range(NM):
                    for j in range(NN):
                        acc[i * NN + j] += regM[i] * regN[j]
            cuda.syncthreads()
        store_c(P, acc, row0 + r0, col0 + c0)

    return warp_tile


SPEC = register_simt("warp-tile", "rung 8: warp tiling, 4 x 4 contiguous sub-tiles per lane (vector LDS possible)",
                     make, order=80, config=block_config(BM, BN, NT), tiles=(128,), default_tile=128)
