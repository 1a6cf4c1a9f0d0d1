"""Rung 9, unsigned index arithmetic: the wide shared loads rung 8 was built for.

Rung 8's SASS had 16 scalar LDS and about 1,000 integer instructions per 64 FFMA.
Compiling a stripped-down copy for sm_90 and reading its PTX (``scripts/sass_local.py``
does this without a GPU) showed the cause: numba indexes arrays the Python way, where
``a[-1]`` is the last element, so *every* signed index i becomes
``select(i < 0, i + n, i)`` in 64-bit arithmetic (the ISETP.*.EX / SEL pairs in the
SASS). After that select the compiler can no longer see that a lane's four reads
``As[kk, r0 + 0..3]`` are adjacent, so it cannot merge them into one ``ld.shared.v4``.
An unsigned index cannot be negative and numba emits no select for it. Because numba
does all integer arithmetic in 64 bits and one signed operand makes a result signed,
every index here, including constants and loop bounds, is uint64 (``_tiles.index_type``).
The kernel is otherwise rung 8 (warp tiles, lanes reading 4 x 4 sub-tiles, the
lectures' zero-fill in boundary blocks, the guarded store), generalised to any
block / warp / lane tile so that rung 10 can search that space.

Compiled for sm_90 (local ptxas, 128 x 128 x 8, 8 x 8 per lane): 4 ``LDS.128`` per
64 FFMA, 124 registers instead of 158 (two 256-thread blocks per SM instead of one).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from numba import uint64

from ..._backend import emulating, numba_cuda
from .. import simt_cache as _diskcache
from ._launch import numba_type, register_simt
from ._tiles import block_config, index_type, phase_loader, store
from .k05_conflict_free import PAD

cuda = numba_cuda()
U = index_type(True)
V = 4                                 # a lane's sub-tile is V x V: 4 adjacent words, one 16-byte load


@dataclass(frozen=True)
class Shape:
    """A block computes BM x BN of P in phases of BK; its warps own WM x WN warp tiles;
    a lane owns TM x TN elements as (TM/4) x (TN/4) sub-tiles of 4 x 4."""
    BM: int
    BN: int
    BK: int
    WM: int
    WN: int
    TM: int = 8
    TN: int = 8

    @property
    def lanes(self) -> tuple[int, int]:          # lanes of a warp as rows x columns
        return self.WM // self.TM, self.WN // self.TN

    @property
    def threads(self) -> int:
        return 32 * (self.BM // self.WM) * (self.BN // self.WN)

    @property
    def name(self) -> str:
        return f"{self.BM}x{self.BN}x{self.BK}-w{self.WM}x{self.WN}-t{self.TM}x{self.TN}"

    def check(self) -> "Shape":
        LR, LC = self.lanes
        NT = self.threads
        ok = (self.BM % self.WM == 0 and self.BN % self.WN == 0 and self.WM % self.TM == 0
              and self.WN % self.TN == 0 and self.TM % V == 0 and self.TN % V == 0 and LR * LC == 32
              and NT <= 1024 and (self.BM * self.BK) % NT == 0 and (self.BK * self.BN) % NT == 0)
        if not ok:
            raise ValueError(f"inconsistent SIMT tile shape {self.name}")
        return self

    @classmethod
    def parse(cls, text: str) -> "Shape":
        """The inverse of ``name``: '128x128x8-w32x64-t8x8'."""
        try:
            b, w, t = text.split("-")
            BM, BN, BK = (int(x) for x in b.split("x"))
            WM, WN = (int(x) for x in w[1:].split("x"))
            TM, TN = (int(x) for x in t[1:].split("x"))
        except ValueError:
            raise ValueError(f"tile shape {text!r} is not like '128x128x8-w32x64-t8x8'") from None
        return cls(BM, BN, BK, WM, WN, TM, TN).check()


# ``tile`` (the registry's one number) picks a block tile; rung 10 searches more shapes.
PRESETS = {64: Shape(64, 64, 8, 32, 32, 8, 4), 128: Shape(128, 128, 8, 32, 64, 8, 8)}


@lru_cache(maxsize=None)
def make_shape(sh: Shape, dtype: str, unroll: int = 1, cap: bool = False):
    """Rung 9's kernel for one tile shape. Rung 10's knobs: ``unroll`` = 4 calls the
    per-k step four times by hand; ``cap`` bounds the registers at 128 a thread."""
    sh.check()
    if unroll not in (1, 4) or sh.BK % unroll:
        raise ValueError(f"unroll {unroll} with BK {sh.BK}: unroll is 1 or 4 and divides BK")
    acc_t = numba_type(dtype)
    LR, LC = sh.lanes
    NT = sh.threads
    load_phase = phase_loader(sh.BM, sh.BN, sh.BK, NT, dtype, True, True)
    store_c = store(sh.TM, sh.TN, LR * V, LC * V, V, True)
    AS_SHAPE, BS_SHAPE, NACC, TM, TN = (sh.BK, sh.BM + PAD), (sh.BK, sh.BN), sh.TM * sh.TN, sh.TM, sh.TN
    BM, BN, BK, WM, WN, WC = U(sh.BM), U(sh.BN), U(sh.BK), U(sh.WM), U(sh.WN), U(sh.BN // sh.WN)
    SUB_R, SUB_C, LCu, Vu, W, UNROLL = U(LR * V), U(LC * V), U(LC), U(V), U(32), U(unroll)
    # 512 threads' worth of blocks an SM = at most 128 registers a thread (the simulator takes no bounds)
    bounds = {"launch_bounds": (NT, max(1, 512 // NT))} if cap and not emulating() else {}

    @cuda.jit(device=True)
    def step(As, Bs, kk, r0, c0, acc, regM, regN):
        """One k of a phase: the lane's TM + TN operands, then TM x TN FMAs from registers."""
        for i in range(TM):          # sub-tile i // 4, element i % 4: 4 adjacent words
            regM[i] = As[kk, r0 + U(i // V) * SUB_R + U(i % V)]
        for j in range(TN):
            regN[j] = Bs[kk, c0 + U(j // V) * SUB_C + U(j % V)]
        for i in range(TM):
            for j in range(TN):
                acc[i * TN + j] += regM[i] * regN[j]

    @cuda.jit(**bounds)
    def unsigned(M, N, P):
        As = cuda.shared.array(AS_SHAPE, acc_t)
        Bs = cuda.shared.array(BS_SHAPE, acc_t)
        J = uint64(M.shape[0])
        K = uint64(M.shape[1])
        L = uint64(N.shape[1])
        tid = uint64(cuda.threadIdx.x)
        warp = tid // W
        lane = tid % W
        r0 = (warp // WC) * WM + (lane // LCu) * Vu     # first row of the lane's first sub-tile
        c0 = (warp % WC) * WN + (lane % LCu) * Vu
        row0 = uint64(cuda.blockIdx.y) * BM
        col0 = uint64(cuda.blockIdx.x) * BN
        interior = row0 + BM <= J and col0 + BN <= L
        acc = cuda.local.array(NACC, acc_t)
        regM = cuda.local.array(TM, acc_t)
        regN = cuda.local.array(TN, acc_t)
        for i in range(NACC):
            acc[i] = 0
        for k0 in range(U(0), K, BK):
            load_phase(M, N, As, Bs, row0, k0, col0, tid, interior, K)
            cuda.syncthreads()
            for kk in range(U(0), BK, UNROLL):
                step(As, Bs, kk, r0, c0, acc, regM, regN)
                if unroll == 4:      # LLVM will not unroll this loop itself, and numba has no pragma
                    step(As, Bs, kk + U(1), r0, c0, acc, regM, regN)
                    step(As, Bs, kk + U(2), r0, c0, acc, regM, regN)
                    step(As, Bs, kk + U(3), r0, c0, acc, regM, regN)
            cuda.syncthreads()
        store_c(P, acc, row0 + r0, col0 + c0)

    return _diskcache.cached(unsigned, "k09_unsigned.make_shape", sh, dtype, unroll, cap)


def shape_config(sh: Shape):
    return block_config(sh.BM, sh.BN, sh.threads)


SPEC = register_simt("unsigned", "rung 9: rung 8 with uint64 indices (no wrap-around selects): "
                     "LDS.128 shared loads, fewer registers", lambda tile, dtype: make_shape(PRESETS[tile], dtype),
                     order=90, config=lambda tile, J, K, L: shape_config(PRESETS[tile])(tile, J, K, L),
                     tiles=tuple(PRESETS), default_tile=128)
