"""Device helpers shared by the register-tiled rungs (3 onward): the lectures'
collaborative, zero-filling tile loads generalised to NT threads loading a
BM x BK tile of M and a BK x BN tile of N, and the guarded store of a
per-thread micro-tile. One factory per compile-time shape."""
from __future__ import annotations

from functools import lru_cache

from ..._backend import numba_cuda
from ._launch import numba_type

cuda = numba_cuda()  # module global: the simulator swaps it for its fake module


@lru_cache(maxsize=None)
def loaders(BM: int, BN: int, BK: int, NT: int, dtype: str, a_transposed: bool):
    """load_a / load_b: every thread loads BM*BK/NT elements of M and BK*BN/NT of N into
    shared memory, 0 outside the matrices. Consecutive threads take consecutive
    addresses along each matrix row (coalesced). With ``a_transposed`` the M tile is
    stored k-major (As[k, m]) so that a thread's TM values of one k are contiguous.
    ``*_fast`` skip the bounds tests (interior blocks and phases)."""
    acc_t = numba_type(dtype)
    LA, LB = BM * BK // NT, BK * BN // NT

    @cuda.jit(device=True)
    def load_a(A, As, row0, k0, tid):
        for l in range(LA):
            idx = tid + l * NT
            r = idx // BK
            c = idx % BK
            v = A[row0 + r, k0 + c] if row0 + r < A.shape[0] and k0 + c < A.shape[1] else acc_t(0)
            if a_transposed:
                As[c, r] = v
            else:
                As[r, c] = v

    @cuda.jit(device=True)
    def load_a_fast(A, As, row0, k0, tid):
        for l in range(LA):
            idx = tid + l * NT
            r = idx // BK
            c = idx % BK
            if a_transposed:
                As[c, r] = A[row0 + r, k0 + c]
            else:
                As[r, c] = A[row0 + r, k0 + c]

    @cuda.jit(device=True)
    def load_b(B, Bs, k0, col0, tid):
        for l in range(LB):
            idx = tid + l * NT
            r = idx // BN
            c = idx % BN
            Bs[r, c] = B[k0 + r, col0 + c] if k0 + r < B.shape[0] and col0 + c < B.shape[1] else acc_t(0)

    @cuda.jit(device=True)
    def load_b_fast(B, Bs, k0, col0, tid):
        for l in range(LB):
            idx = tid + l * NT
            Bs[idx // BN, idx % BN] = B[k0 + idx // BN, col0 + idx % BN]

    return load_a, load_a_fast, load_b, load_b_fast


@lru_cache(maxsize=None)
def store(TM: int, TN: int, stride_m: int, stride_n: int):
    """Write a thread's TM x TN accumulators: element (i, j) goes to
    P[row0 + first_m + i*stride_m, col0 + first_n + j*stride_n]; threads outside P store nothing."""
    @cuda.jit(device=True)
    def store_c(P, acc, rbase, cbase):
        for i in range(TM):
            r = rbase + i * stride_m
            if r < P.shape[0]:
                for j in range(TN):
                    c = cbase + j * stride_n
                    if c < P.shape[1]:
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
