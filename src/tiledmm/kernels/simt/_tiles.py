"""Device helpers shared by the register-tiled rungs (3 onward): the lectures'
collaborative, zero-filling tile loads generalised to NT threads loading a
BM x BK tile of M and a BK x BN tile of N, and the guarded store of a
per-thread micro-tile. One factory per compile-time shape."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..._backend import numba_cuda
from ._launch import numba_type

cuda = numba_cuda()  # module global: the simulator swaps it for its fake module


def index_type(unsigned: bool):
    """How constants are typed in index arithmetic. numba does all integer arithmetic in
    64 bits and a signed operand makes the result signed; a signed index is wrapped
    like Python's (``i < 0 -> i + n``) at every access. Unsigned kernels (rung 9 on)
    keep every index, constant and loop bound uint64, so no wrap-around is emitted."""
    return np.uint64 if unsigned else int


@lru_cache(maxsize=None)
def loaders(BM: int, BN: int, BK: int, NT: int, dtype: str, a_transposed: bool, unsigned: bool = False):
    """load_a / load_b: every thread loads BM*BK/NT elements of M and BK*BN/NT of N into
    shared memory, 0 outside the matrices. Consecutive threads take consecutive
    addresses along each matrix row (coalesced). With ``a_transposed`` the M tile is
    stored k-major (As[k, m]) so that a thread's TM values of one k are contiguous.
    ``*_fast`` skip the bounds tests (interior blocks and phases). ``unsigned``: the
    caller passes uint64 row0/k0/col0/tid and every index stays uint64."""
    acc_t = numba_type(dtype)
    ix = index_type(unsigned)
    # unsigned kernels, when NT is a multiple of both tile widths: a thread's column is the
    # same for all its elements and its rows are NT/width apart, so nothing is divided per
    # element (with 64-bit unsigned arithmetic the compiler cannot prove that itself)
    split = unsigned and NT % BK == 0 and NT % BN == 0
    LA, LB = ix(BM * BK // NT), ix(BK * BN // NT)
    BK, BN, NT = ix(BK), ix(BN), ix(NT)

    @cuda.jit(device=True)
    def cell(tid, l, width):
        """(row, column) of element l of a thread's share of a tile ``width`` wide."""
        if split:
            return tid // width + l * (NT // width), tid % width
        idx = tid + l * NT
        return idx // width, idx % width

    @cuda.jit(device=True)
    def load_a(A, As, row0, k0, tid):
        for l in range(LA):
            r, c = cell(tid, l, BK)
            v = A[row0 + r, k0 + c] if row0 + r < ix(A.shape[0]) and k0 + c < ix(A.shape[1]) else acc_t(0)
            if a_transposed:
                As[c, r] = v
            else:
                As[r, c] = v

    @cuda.jit(device=True)
    def load_a_fast(A, As, row0, k0, tid):
        for l in range(LA):
            r, c = cell(tid, l, BK)
            if a_transposed:
                As[c, r] = A[row0 + r, k0 + c]
            else:
                As[r, c] = A[row0 + r, k0 + c]

    @cuda.jit(device=True)
    def load_b(B, Bs, k0, col0, tid):
        for l in range(LB):
            r, c = cell(tid, l, BN)
            Bs[r, c] = B[k0 + r, col0 + c] if k0 + r < ix(B.shape[0]) and col0 + c < ix(B.shape[1]) else acc_t(0)

    @cuda.jit(device=True)
    def load_b_fast(B, Bs, k0, col0, tid):
        for l in range(LB):
            r, c = cell(tid, l, BN)
            Bs[r, c] = B[k0 + r, col0 + c]

    return load_a, load_a_fast, load_b, load_b_fast


@lru_cache(maxsize=None)
def phase_loader(BM: int, BN: int, BK: int, NT: int, dtype: str, a_transposed: bool, unsigned: bool = False):
    """load_phase: one phase's tiles of M and N, without bounds tests when the block lies inside
    P and the phase inside K (``interior`` and k0 + BK <= K), else with the lectures' zero-fill."""
    load_a, load_a_fast, load_b, load_b_fast = loaders(BM, BN, BK, NT, dtype, a_transposed, unsigned)
    BKi = index_type(unsigned)(BK)

    @cuda.jit(device=True)
    def load_phase(M, N, As, Bs, row0, k0, col0, tid, interior, K):
        if interior and k0 + BKi <= K:
            load_a_fast(M, As, row0, k0, tid)
            load_b_fast(N, Bs, k0, col0, tid)
        else:
            load_a(M, As, row0, k0, tid)
            load_b(N, Bs, k0, col0, tid)

    return load_phase


@lru_cache(maxsize=None)
def store(TM: int, TN: int, stride_m: int, stride_n: int, vec: int = 1, unsigned: bool = False):
    """Write a thread's TM x TN accumulators: element (i, j) goes to
    P[rbase + off(i, stride_m), cbase + off(j, stride_n)] with off(i, s) = (i // vec) * s + i % vec:
    vec = 1 is a plain stride, vec = 4 runs of 4 adjacent elements ``s`` apart (rungs 8-9).
    Threads outside P store nothing."""
    ix = index_type(unsigned)

    @cuda.jit(device=True)
    def store_c(P, acc, rbase, cbase):
        for i in range(TM):
            r = rbase + ix((i // vec) * stride_m + i % vec)
            if r < ix(P.shape[0]):
                for j in range(TN):
                    c = cbase + ix((j // vec) * stride_n + j % vec)
                    if c < ix(P.shape[1]):
                        P[r, c] = acc[i * TN + j]

    return store_c


def block_config(BM: int, BN: int, NT: int):
    """1-D blocks of NT threads, one block per BM x BN tile of P (x along P's columns)."""
    import math

    def config(tile, J, K, L):
        return (math.ceil(L / BN), math.ceil(J / BM)), (NT,)
    return config


@lru_cache(maxsize=None)
def prefetchers(BM: int, BN: int, BK: int, NT: int, dtype: str):
    """For double buffering: fetch_* bring a thread's share of the next tiles from global
    memory into registers (0 outside the matrices); stash_* put them into shared buffer
    ``buf`` (M tile stored k-major, As[buf, k, m])."""
    acc_t = numba_type(dtype)
    LA, LB = BM * BK // NT, BK * BN // NT

    @cuda.jit(device=True)
    def fetch_a(A, row0, k0, tid, reg):
        for l in range(LA):
            idx = tid + l * NT
            r = row0 + idx // BK
            c = k0 + idx % BK
            reg[l] = A[r, c] if r < A.shape[0] and c < A.shape[1] else acc_t(0)

    @cuda.jit(device=True)
    def stash_a(As, buf, reg, tid):
        for l in range(LA):
            idx = tid + l * NT
            As[buf, idx % BK, idx // BK] = reg[l]

    @cuda.jit(device=True)
    def fetch_b(B, k0, col0, tid, reg):
        for l in range(LB):
            idx = tid + l * NT
            r = k0 + idx // BN
            c = col0 + idx % BN
            reg[l] = B[r, c] if r < B.shape[0] and c < B.shape[1] else acc_t(0)

    @cuda.jit(device=True)
    def stash_b(Bs, buf, reg, tid):
        for l in range(LB):
            idx = tid + l * NT
            Bs[buf, idx // BN, idx % BN] = reg[l]

    return fetch_a, stash_a, fetch_b, stash_b
