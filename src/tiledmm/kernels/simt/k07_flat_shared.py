"""Rung 7, flat shared tiles (an experiment the SASS of rungs 4-6 asked for).

The ladder report shows rungs 4-6 spending most of their instructions on integer
address arithmetic (hundreds of IMAD/LEA per 64 FFMA) with scalar LDS: numba
indexes a 2-D array through its shape at run time and guards negative indices.
Here both shared tiles are 1-D arrays indexed by compile-time strides, so a
thread's TM (or TN) reads of one k differ by constant offsets from one base
address. Otherwise as rung 5 (strided micro-tile, k-major padded M tile, interior
fast path).
"""
from __future__ import annotations

from numba import int32

from ..._backend import numba_cuda
from ._launch import numba_type, register_simt
from ._tiles import store
from .k04_regtile2d import BK, NT, config, shape
from .k05_conflict_free import PAD

cuda = numba_cuda()


def make(tile: int, dtype: str):
    acc_t = numba_type(dtype)
    BM, BN, TM, TN = shape(tile)
    TR, TC = BM // TM, BN // TN
    LDA = BM + PAD                        # row length of the k-major M tile
    ASZ, BSZ, NACC = BK * LDA, BK * BN, TM * TN
    LA, LB = BM * BK // NT, BK * BN // NT
    store_c = store(TM, TN, TR, TC)

    @cuda.jit
    def flat_shared(M, N, P):
        As = cuda.shared.array(ASZ, acc_t)
        Bs = cuda.shared.array(BSZ, acc_t)
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
            fast = interior and k0 + BK <= K
            for l in range(LA):
                idx = tid + l * NT
                r = idx // BK
                c = idx % BK
                if fast or (row0 + r < J and k0 + c < K):
                    As[c * LDA + r] = M[row0 + r, k0 + c]
                else:
                    As[c * LDA + r] = 0
            for l in range(LB):
                idx = tid + l * NT
                r = idx // BN
                c = idx % BN
                if fast or (k0 + r < K and col0 + c < L):
                    Bs[idx] = N[k0 + r, col0 + c]
                else:
                    Bs[idx] = 0
            cuda.syncthreads()
            a_base = trow
            b_base = tcol
            for kk in range(BK):
                for i in range(TM):
                    regM[i] = As[a_base + i * TR]
                for j in range(TN):
                    regN[j] = Bs[b_base + j * TC]
                for i in range(TM):
                    for j in range(TN):
                        acc[i * TN + j] += regM[i] * regN[j]
                a_base += LDA
                b_base += BN
            cuda.syncthreads()
        store_c(P, acc, row0 + trow, col0 + tcol)

    return flat_shared


SPEC = register_simt("flat-shared", "rung 7: rung 5 with 1-D shared tiles at compile-time strides "
                     "(less address arithmetic)", make, order=70, config=config, tiles=(64, 128), default_tile=128)
