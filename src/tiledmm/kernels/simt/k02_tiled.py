"""Rung 2, the lectures' tiled kernel with boundary conditions, for any J x K x L.

Each block computes a TILE_WIDTH x TILE_WIDTH patch of P in (K-1)//TILE_WIDTH + 1
phases. In each phase every thread loads one M element and one N element into
shared memory, writing 0 where the element lies outside its matrix -- the test
for M (Row, column m*T+tx) and the test for N (row m*T+ty, Col) are not the same
-- then the block multiplies the two shared tiles. Barriers before use (all
loaded) and after use (all consumed). Threads outside P compute 0 and store
nothing.

``guarded=False`` builds the slides' original kernel (no tests at all): it exists
only so the tests can show that the boundary tests are what make it correct.
"""
from __future__ import annotations

from ..._backend import numba_cuda
from ._launch import numba_type, register_simt

# a module global: the CUDA simulator swaps globals bound to numba.cuda for its fake module
cuda = numba_cuda()


def make(tile: int, dtype: str, guarded: bool = True):
    acc_t = numba_type(dtype)
    TILE_WIDTH = tile  # compile-time constant: a closure variable is frozen into the kernel

    @cuda.jit
    def tiled(M, N, P):
        subTileM = cuda.shared.array((TILE_WIDTH, TILE_WIDTH), acc_t)
        subTileN = cuda.shared.array((TILE_WIDTH, TILE_WIDTH), acc_t)
        bx = cuda.blockIdx.x
        by = cuda.blockIdx.y
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        Row = by * TILE_WIDTH + ty
        Col = bx * TILE_WIDTH + tx
        J = M.shape[0]
        K = M.shape[1]
        L = N.shape[1]
        Pvalue = acc_t(0)
        for m in range((K - 1) // TILE_WIDTH + 1):
            if Row < J and m * TILE_WIDTH + tx < K:
                subTileM[ty, tx] = M[Row, m * TILE_WIDTH + tx]
            else:
                subTileM[ty, tx] = 0
            if m * TILE_WIDTH + ty < K and Col < L:
                subTileN[ty, tx] = N[m * TILE_WIDTH + ty, Col]
            else:
                subTileN[ty, tx] = 0
            cuda.syncthreads()
            for k in range(TILE_WIDTH):
                Pvalue += subTileM[ty, k] * subTileN[k, tx]
            cuda.syncthreads()
        if Row < J and Col < L:
            P[Row, Col] = Pvalue

    @cuda.jit
    def tiled_unguarded(M, N, P):
        subTileM = cuda.shared.array((TILE_WIDTH, TILE_WIDTH), acc_t)
        subTileN = cuda.shared.array((TILE_WIDTH, TILE_WIDTH), acc_t)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        Row = cuda.blockIdx.y * TILE_WIDTH + ty
        Col = cuda.blockIdx.x * TILE_WIDTH + tx
        Pvalue = acc_t(0)
        for m in range((M.shape[1] - 1) // TILE_WIDTH + 1):
            subTileM[ty, tx] = M[Row, m * TILE_WIDTH + tx]
            subTileN[ty, tx] = N[m * TILE_WIDTH + ty, Col]
            cuda.syncthreads()
            for k in range(TILE_WIDTH):
                Pvalue += subTileM[ty, k] * subTileN[k, tx]
            cuda.syncthreads()
        P[Row, Col] = Pvalue

    return tiled if guarded else tiled_unguarded


SPEC = register_simt(
    "tiled", "lectures' shared-memory tiled kernel: TILE_WIDTH^2 threads, zero-filled tiles, guarded store",
    make, order=20)
