"""Rung 11, asynchronous copies: global -> shared without registers, a ring of stages.

Rung 10 loads each phase's tiles through registers (LDG, then STS) between two
barriers, so its FMAs stop while a phase's tiles arrive, and staging the *next*
tiles in registers spilled under its 128-register cap. Ampere and later GPUs copy
global memory into shared memory asynchronously (PTX ``cp.async``, SASS ``LDGSTS``):
the copy bypasses the registers, the thread goes on computing, and
``cp.async.commit_group`` / ``cp.async.wait_group n`` wait for all but the last n
groups of copies. With a ring of S shared-memory stages the copies for phase
p + S - 1 are issued before the FMAs of phase p, and one barrier per phase suffices:

    prologue: issue phases 0 .. S-2, one commit group each
    for p:    wait until phase p's group has landed; barrier
              issue phase p + S - 1 into the stage phase p - 1 used (every thread is past it); commit
              FMAs of phase p (rung 10's unrolled step, LDS.128 from both tiles)

numba-cuda has no intrinsic for ``cp.async``; ``numba.cuda.extending.intrinsic`` lets
a Python function emit LLVM IR, here one line of inline PTX each (inlined, no call,
the shared address 32-bit). The lectures' zero-fill moves into the copy: ``cp.async``
with a source size below the copy size writes zeros for the missing bytes (source
size 0 for a chunk outside the matrix: nothing is read). The M tile is stored
k-major as in rungs 5-10 (As[k, m], so a lane's four rows are one LDS.128); a copy
cannot transpose 16 bytes, so M moves element by element (``cp.async.ca``, 4 or 8
bytes: BM*BK/NT copies a thread a phase, against BM*BN*BK/NT FMAs). The N tile keeps
N's row layout and moves 16 bytes a copy (``cp.async.cg``) when N's rows allow it
(unit column stride, leading dimension a multiple of 16 bytes, 16-byte aligned base);
otherwise element by element. The ring needs more than the 48 KB of static shared
memory a kernel may declare, so it lives in dynamic shared memory (one flat array) and
the launch raises the kernel's dynamic limit.

In the CUDA simulator (emulation) the copies are plain synchronous Python
assignments with the same zero-fill, and commit / wait do nothing: same indices,
same ring, same barriers.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import uint64

from ... import tuning
from ..._arrays import TiledmmError
from ..._backend import emulating, numba_cuda
from .. import simt_cache as _diskcache
from ._launch import Choice, dtype_name, numba_type, register_simt, tuned
from ._tiles import block_config, index_type, store
from .k09_unsigned import Shape

cuda = numba_cuda()
U = index_type(True)
V = 4                      # a lane's sub-tile is 4 x 4: one LDS.128 per operand row
PAD_A = 4                  # k-major M tile rows are BM + 4 words (2-way, not 8-way, conflicts on its copies)
UNROLL = 4


# --------------------------------------------------------------------------- the copy

def _ptx_intrinsics():
    """cp.async as numba intrinsics (GPU only): copy(dst, di, src, si, nbytes) copies
    ``SIZE`` bytes from src's flat element si to dst's flat element di, reading only
    ``nbytes`` (0 .. SIZE) of them and zero-filling the rest."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    def elem_ptr(context, builder, aryty, ary, idx):
        data = context.make_array(aryty)(context, builder, value=ary).data
        return builder.gep(data, [idx])

    def copy_op(size: int, cache: str):
        asm = f"cp.async.{cache}.shared.global [$0], [$1], {size}, $2;"

        @intrinsic
        def cp_async(typingctx, dst, di, src, si, nbytes):
            sig = types.void(dst, di, src, si, nbytes)

            def codegen(context, builder, sig, args):
                dty, _, sty, _, nty = sig.args
                d, dix, s, six, n = args
                dptr = elem_ptr(context, builder, dty, d, dix)
                sptr = elem_ptr(context, builder, sty, s, six)
                # generic -> shared -> 32-bit offset: the folded cast gives the shared symbol's address
                daddr = builder.ptrtoint(builder.addrspacecast(dptr, ir.PointerType(dptr.type.pointee, 3)),
                                         ir.IntType(32))
                nb = context.cast(builder, n, nty, types.uint32)
                fty = ir.FunctionType(ir.VoidType(), [ir.IntType(32), sptr.type, ir.IntType(32)])
                builder.call(ir.InlineAsm(fty, asm, "r,l,r,~{memory}", side_effect=True), [daddr, sptr, nb])
                return context.get_dummy_value()
            return sig, codegen
        return cp_async

    def fixed_asm(text: str):
        @intrinsic
        def op(typingctx):
            def codegen(context, builder, sig, args):
                fty = ir.FunctionType(ir.VoidType(), [])
                builder.call(ir.InlineAsm(fty, text, "~{memory}", side_effect=True), [])
                return context.get_dummy_value()
            return types.void(), codegen
        return op

    return copy_op, fixed_asm


@lru_cache(maxsize=None)
def copies(dtype: str, stages: int):
    """(copy_elem, copy_vec16, commit, wait): wait() lets the newest ``stages - 2`` groups
    stay in flight. In emulation: synchronous assignments, commit/wait no-ops."""
    E = np.dtype(dtype).itemsize
    VB = 16 // E
    acc_t = numba_type(dtype)
    if emulating():
        @cuda.jit(device=True)
        def cell(src, si):
            """(row, column) of the element at offset si (in elements) of a strided 2-D view."""
            s0, s1 = U(src.strides[0] // E), U(src.strides[1] // E)
            if s1 * U(src.shape[1]) <= s0 or src.shape[0] == 1:
                return si // s0 if s0 else U(0), (si % s0 if s0 else si) // s1
            return (si % s1) // s0, si // s1

        @cuda.jit(device=True)
        def copy_elem(dst, di, src, si, nbytes):
            if nbytes > 0:
                r, c = cell(src, si)
                dst[di] = src[r, c]
            else:
                dst[di] = acc_t(0)

        @cuda.jit(device=True)
        def copy_vec(dst, di, src, si, nbytes):
            r, c = cell(src, si)
            for v in range(VB):
                dst[di + U(v)] = src[r, c + U(v)] if U(v * E) < nbytes else acc_t(0)

        @cuda.jit(device=True)
        def commit():
            pass

        @cuda.jit(device=True)
        def wait():
            pass
        return copy_elem, copy_vec, commit, wait
    copy_op, fixed_asm = _ptx_intrinsics()
    return (copy_op(E, "ca"), copy_op(16, "cg"), fixed_asm("cp.async.commit_group;"),
            fixed_asm(f"cp.async.wait_group {max(stages - 2, 0)};"))


# --------------------------------------------------------------------------- configurations

@dataclass(frozen=True)
class Config:
    """Rung 9's block / warp / lane shape, ``stages`` shared buffers in the ring, and
    ``blocks`` = the blocks per SM the register cap is set for (512 threads' worth: 2
    blocks of 256 = at most 128 registers; 1 block of 256 = up to 255)."""
    shape: Shape
    stages: int = 3
    blocks: int = 2

    @property
    def name(self) -> str:
        return f"{self.shape.name}-s{self.stages}-m{self.blocks}"

    def smem_bytes(self, dtype: str) -> int:
        sh = self.shape
        return self.stages * sh.BK * (sh.BM + PAD_A + sh.BN) * np.dtype(dtype).itemsize

    def check(self, dtype: str = "float32") -> "Config":
        sh = self.shape.check()
        E = np.dtype(dtype).itemsize
        VB = 16 // E
        NT = sh.threads
        QB = sh.BN // VB
        ok = (2 <= self.stages <= 8 and self.blocks in (1, 2, 3, 4) and sh.BK % UNROLL == 0
              and NT % sh.BK == 0 and (sh.BM * sh.BK) % NT == 0 and sh.BN % VB == 0
              and NT % QB == 0 and (sh.BK * QB) % NT == 0 and NT % sh.BN == 0)
        if not ok:
            raise ValueError(f"inconsistent rung-11 configuration {self.name}")
        if self.smem_bytes(dtype) * self.blocks > 227 * 1024:
            raise ValueError(f"rung-11 configuration {self.name} needs {self.smem_bytes(dtype)} B of shared "
                             f"memory a block ({self.blocks} a SM; 227 KB per SM)")
        return self

    @classmethod
    def parse(cls, text: str, dtype: str = "float32") -> "Config":
        """'128x128x16-w32x64-t8x8-s3-m2' (s: stages, m: blocks per SM; both optional)."""
        parts = text.split("-")
        stages, blocks = 3, 2
        try:
            while parts and parts[-1][:1] in ("s", "m") and parts[-1][1:].isdigit():
                p = parts.pop()
                stages, blocks = (int(p[1:]), blocks) if p[0] == "s" else (stages, int(p[1:]))
        except ValueError:
            pass
        sh = Shape.parse("-".join(parts))
        return cls(sh, stages, blocks).check(dtype)


# --------------------------------------------------------------------------- the kernel

@lru_cache(maxsize=None)
def make_async(cfg: Config, dtype: str, vec_b: bool = True, unroll_phase: bool = True):
    """Rung 11's kernel for one configuration. ``vec_b``: N's tile moves in 16-byte copies
    (the launcher checks N's rows allow it), else element by element."""
    cfg.check(dtype)
    sh, S = cfg.shape, cfg.stages
    acc_t = numba_type(dtype)
    E = np.dtype(dtype).itemsize
    VB = 16 // E
    LR, LC = sh.lanes
    NT = sh.threads
    copy_elem, copy_vec, commit, wait = copies(dtype, S)
    store_c = store(sh.TM, sh.TN, LR * V, LC * V, V, True)
    NACC, TM, TN = sh.TM * sh.TN, sh.TM, sh.TN
    ASTR, BSTR = sh.BM + PAD_A, sh.BN
    A_SIZE = sh.BK * ASTR
    STAGE = A_SIZE + sh.BK * BSTR
    BM, BN, BK, WM, WN, WC = U(sh.BM), U(sh.BN), U(sh.BK), U(sh.WM), U(sh.WN), U(sh.BN // sh.WN)
    SUB_R, SUB_C, LCu, Vu, W = U(LR * V), U(LC * V), U(LC), U(V), U(32)
    ASTRu, BSTRu, A_SIZEu, STAGEu, Su = U(ASTR), U(BSTR), U(A_SIZE), U(STAGE), U(S)
    EB = U(E)
    # M tile: thread tid copies column tid % BK of rows tid // BK + l * (NT / BK)
    LA, ARS = U(sh.BM * sh.BK // NT), U(NT // sh.BK)
    # N tile, 16-byte chunks: chunk column tid % (BN / VB) of rows tid // (BN / VB) + l * ...
    QB = sh.BN // VB
    LBV, BRSV, QBu, VBu, VBYTES = U(sh.BK * sh.BN // VB // NT), U(NT // QB), U(QB), U(VB), U(16)
    # N tile, element copies: column tid % BN, rows tid // BN + l * (NT / BN)
    LBS, BRSS, BNc = U(sh.BK * sh.BN // NT), U(NT // sh.BN), BN
    gpu = not emulating()
    bounds = {"launch_bounds": (NT, cfg.blocks)} if gpu else {}

    @cuda.jit(device=True)
    def issue(M, N, sm, buf, k0, row0, col0, ar, ac, bq, br, J, K, L, a_off, b_off, a_lstep, b_lstep, fast):
        """The copies of one phase (k0 .. k0 + BK) into stage ``buf``, zero-filled outside the
        matrices. a_off / b_off: the element offsets of the thread's first copy of M / N in
        this phase; a_lstep / b_lstep: between its successive copies (NT / BK rows of M,
        NT / (BN / VB) or NT / BN rows of N). Shared offsets are compile-time past ``base``."""
        base = buf * STAGEu
        sa = base + ac * ASTRu + ar
        sb = base + A_SIZEu + br * BSTRu + (bq * VBu if vec_b else bq)
        if fast:
            for l in range(LA):
                copy_elem(sm, sa + U(l) * ARS, M, a_off + U(l) * a_lstep, EB)
            if vec_b:
                for l in range(LBV):
                    copy_vec(sm, sb + U(l) * BRSV * BSTRu, N, b_off + U(l) * b_lstep, VBYTES)
            else:
                for l in range(LBS):
                    copy_elem(sm, sb + U(l) * BRSS * BSTRu, N, b_off + U(l) * b_lstep, EB)
        else:
            kin = k0 + ac < K
            for l in range(LA):
                ok = kin and row0 + ar + U(l) * ARS < J
                copy_elem(sm, sa + U(l) * ARS, M, a_off + U(l) * a_lstep if ok else U(0), EB if ok else U(0))
            if vec_b:
                c = col0 + bq * VBu
                for l in range(LBV):
                    ok = k0 + br + U(l) * BRSV < K and c < L
                    nb = min(VBu, L - c) * EB if ok else U(0)
                    copy_vec(sm, sb + U(l) * BRSV * BSTRu, N, b_off + U(l) * b_lstep if ok else U(0), nb)
            else:
                cin = col0 + bq < L
                for l in range(LBS):
                    ok = cin and k0 + br + U(l) * BRSS < K
                    copy_elem(sm, sb + U(l) * BRSS * BSTRu, N, b_off + U(l) * b_lstep if ok else U(0),
                              EB if ok else U(0))

    @cuda.jit(device=True)
    def step(sm, abase, bbase, kk, r0, c0, acc, regM, regN):
        """One k of a phase: the lane's TM + TN operands, then TM x TN FMAs from registers."""
        for i in range(TM):
            regM[i] = sm[abase + kk * ASTRu + r0 + U(i // V) * SUB_R + U(i % V)]
        for j in range(TN):
            regN[j] = sm[bbase + kk * BSTRu + c0 + U(j // V) * SUB_C + U(j % V)]
        for i in range(TM):
            for j in range(TN):
                acc[i * TN + j] += regM[i] * regN[j]

    # a whole phase unrolled by hand (LLVM will not unroll the k loop, numba has no pragma):
    # every shared address is then a compile-time offset from the stage's base
    @cuda.jit(device=True)
    def step4(sm, abase, bbase, kk, r0, c0, acc, regM, regN):
        step(sm, abase, bbase, kk, r0, c0, acc, regM, regN)
        step(sm, abase, bbase, kk + U(1), r0, c0, acc, regM, regN)
        step(sm, abase, bbase, kk + U(2), r0, c0, acc, regM, regN)
        step(sm, abase, bbase, kk + U(3), r0, c0, acc, regM, regN)

    @cuda.jit(device=True)
    def step8(sm, abase, bbase, kk, r0, c0, acc, regM, regN):
        step4(sm, abase, bbase, kk, r0, c0, acc, regM, regN)
        step4(sm, abase, bbase, kk + U(4), r0, c0, acc, regM, regN)

    @cuda.jit(device=True)
    def step16(sm, abase, bbase, kk, r0, c0, acc, regM, regN):
        step8(sm, abase, bbase, kk, r0, c0, acc, regM, regN)
        step8(sm, abase, bbase, kk + U(8), r0, c0, acc, regM, regN)

    CHUNK = min(sh.BK, 16) if unroll_phase else UNROLL
    chunk_step = {4: step4, 8: step8, 16: step16}[CHUNK]
    CHUNKu = U(CHUNK)

    @cuda.jit(**bounds)
    def async_ring(M, N, P):
        if gpu:
            sm = cuda.shared.array(0, acc_t, alignment=16)
        else:                             # the simulator takes no alignment
            sm = cuda.shared.array(0, acc_t)
        J = uint64(M.shape[0])
        K = uint64(M.shape[1])
        L = uint64(N.shape[1])
        sa0 = uint64(M.strides[0]) // EB
        sa1 = uint64(M.strides[1]) // EB
        sb0 = uint64(N.strides[0]) // EB
        sb1 = uint64(N.strides[1]) // EB
        tid = uint64(cuda.threadIdx.x)
        warp = tid // W
        lane = tid % W
        r0 = (warp // WC) * WM + (lane // LCu) * Vu
        c0 = (warp % WC) * WN + (lane % LCu) * Vu
        row0 = uint64(cuda.blockIdx.y) * BM
        col0 = uint64(cuda.blockIdx.x) * BN
        interior = row0 + BM <= J and col0 + BN <= L
        # the thread's copies: M column ac of rows ar + l * ARS; N chunk (or column) bq of rows br + l * ...
        ac = tid % BK
        ar = tid // BK
        if vec_b:
            bq = tid % QBu
            br = tid // QBu
            b_off = br * sb0 + col0 + bq * VBu
            b_lstep = BRSV * sb0
        else:
            bq = tid % BNc
            br = tid // BNc
            b_off = br * sb0 + (col0 + bq) * sb1
            b_lstep = BRSS * sb0
        a_off = (row0 + ar) * sa0 + ac * sa1
        a_lstep = ARS * sa0
        a_kstep = BK * sa1
        b_kstep = BK * sb0
        acc = cuda.local.array(NACC, acc_t)
        regM = cuda.local.array(TM, acc_t)
        regN = cuda.local.array(TN, acc_t)
        for i in range(NACC):
            acc[i] = 0
        nph = (K + BK - U(1)) // BK
        for s in range(U(0), Su - U(1)):
            if s < nph:
                k0 = s * BK
                issue(M, N, sm, s, k0, row0, col0, ar, ac, bq, br, J, K, L, a_off, b_off, a_lstep, b_lstep,
                      interior and k0 + BK <= K)
                a_off += a_kstep
                b_off += b_kstep
            commit()
        buf = U(0)                       # stage of phase p
        nxt = Su - U(1)                  # stage of phase p + S - 1
        for p in range(U(0), nph):
            wait()
            cuda.syncthreads()
            q = p + Su - U(1)
            if q < nph:
                k0 = q * BK
                issue(M, N, sm, nxt, k0, row0, col0, ar, ac, bq, br, J, K, L, a_off, b_off, a_lstep, b_lstep,
                      interior and k0 + BK <= K)
                a_off += a_kstep
                b_off += b_kstep
            commit()
            abase = buf * STAGEu
            bbase = abase + A_SIZEu
            for kk in range(U(0), BK, CHUNKu):
                chunk_step(sm, abase, bbase, kk, r0, c0, acc, regM, regN)
            buf = buf + U(1) if buf + U(1) < Su else U(0)
            nxt = nxt + U(1) if nxt + U(1) < Su else U(0)
        store_c(P, acc, row0 + r0, col0 + c0)

    return _diskcache.cached(async_ring, _diskcache.ASYNC, cfg.name, dtype, vec_b, unroll_phase)


# --------------------------------------------------------------------------- the launch

def vector_rows_ok(arr, dtype: str) -> bool:
    """16-byte copies of N's rows: unit column stride, rows 16 bytes apart, 16-byte aligned base."""
    E = np.dtype(dtype).itemsize
    s0, s1 = arr.strides
    if hasattr(arr, "__cuda_array_interface__"):
        addr = int(arr.__cuda_array_interface__["data"][0])
    else:                                   # the simulator's numpy arguments
        addr = int(np.asarray(arr).ctypes.data)
    return s1 == E and s0 % 16 == 0 and addr % 16 == 0


class AsyncKernel:
    """Rung 11 for one configuration and dtype, launched like any numba kernel
    (``k[grid, block]`` or ``k[grid, block, stream]``). At each launch it picks the
    16-byte or the element-wise copies of N from N's actual rows, and launches with the
    ring's bytes of dynamic shared memory; over 48 KB a kernel must first be allowed that
    much (``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``), once per compiled function."""

    def __init__(self, cfg: Config, dtype: str):
        self.cfg, self.dtype, self.nbytes = cfg.check(dtype), dtype, cfg.smem_bytes(dtype)
        self._raised: set = set()

    def variant(self, vec_b: bool):
        return make_async(self.cfg, self.dtype, vec_b)

    def __getitem__(self, launch_cfg):
        grid, block, *rest = launch_cfg
        stream = rest[0] if rest else 0

        def launch(M, N, P):
            if any(s < 0 for s in (*M.strides, *N.strides)):
                raise TiledmmError("kernel 'async' takes operands with non-negative strides only")
            kernel = self.variant(vector_rows_ok(N, self.dtype))
            if not emulating() and self.nbytes > 48 * 1024:
                self._raise_limit(kernel, (M, N, P))
            kernel[grid, block, stream, self.nbytes](M, N, P)
        return launch

    def _raise_limit(self, kernel, args) -> None:
        from ... import _adapter
        _adapter.numba_opt_in_shared(kernel, args, self.nbytes, self._raised)


def config_fn(cfg: Config):
    return block_config(cfg.shape.BM, cfg.shape.BN, cfg.shape.threads)


def choice_for(cfg: Config, a, b, out) -> Choice:
    dtype = dtype_name(out)
    return Choice(AsyncKernel(cfg, dtype), config_fn(cfg), None)


# --------------------------------------------------------------------------- autotuning

def parse(text: str, dtype: str = "float32") -> Config:
    return Config.parse(text, dtype)


CANDIDATES = {
    "float32": tuple(Config.parse(s) for s in (
        "128x128x16-w32x64-t8x8-s3-m2",   # rung 10's best shape, BK 16, 3 stages: 49.9 KB a block, 2 blocks/SM
        "128x128x32-w32x64-t8x8-s3-m2",   # rung 10's BK: 99.8 KB a block
        "128x128x16-w32x64-t8x8-s4-m2",
        "128x128x8-w32x64-t8x8-s4-m2",
        "64x128x16-w32x64-t8x8-s3-m4",    # 128 threads, 4 blocks per SM (128 registers)
        "64x64x32-w32x32-t8x4-s3-m2",     # small problems
        "256x128x16-w64x32-t8x8-s3-m1",   # 512 threads, 1 block per SM (fewer tiles: wave quantisation)
    )),
    "float64": tuple(Config.parse(s, "float64") for s in (
        "64x64x8-w32x32-t8x4-s3-m2",
        "128x64x8-w32x32-t8x4-s3-m2",
        "64x64x16-w32x32-t8x4-s3-m2",
    )),
}
ANALYSED = CANDIDATES["float32"][0]   # what the analysis tools compile for this rung
_chosen: dict[str, Config] = {}
tuning.on_mode_change(_chosen.clear)   # a model pick made with tuning off is chosen again


def choose(a, b, out, opts) -> Config:
    """``config=`` if given, else the tuned candidate for this dtype and shape class (``_launch.tuned``)."""
    return tuned("async", a, b, out, opts, CANDIDATES, parse, choice_for, _chosen)


def prepare(a, b, out, tile, opts):
    return choice_for(choose(a, b, out, opts), a, b, out)


SPEC = register_simt("async", "rung 11: rung 10 with cp.async global->shared copies (zero-fill in the copy) "
                     "into a ring of 2-4 shared stages, one barrier a phase; autotuned like rung 10",
                     lambda tile, dtype: make_async(ANALYSED, dtype), order=110,
                     config=config_fn(ANALYSED), tiles=(), default_tile=None, prepare=prepare,
                     options=("config",), block_tile=lambda tile: (ANALYSED.shape.BM, ANALYSED.shape.BN),
                     barriers_per_phase=1)
