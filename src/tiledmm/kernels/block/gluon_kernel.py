"""The device code of variant 'gluon-ws' (``gluon_gemm.py`` is its host side and says how it works).

Imported by ``gluon_gemm`` only to compile or launch through Gluon (a kernel found in tiledmm's kernel
index is launched without it): importing ``triton.experimental.gluon`` costs 0.1-0.15 s, which a first
call should not pay. The index keys this file by its bytes (``gluon_gemm._source_key``), so everything the
kernel calls but Triton stays in this file.

``gluon_ws_kernel``: a persistent, warp-specialised Hopper GEMM (a 1-warp TMA loader partition,
one or two consumer warpgroups issuing async wgmma), split-K in one kernel, and the fused
epilogue ``act(alpha * acc + beta * C + bias)`` in fp32 (``BIAS`` 0 none, 1 one value per
column, 2 one per row; ``ACT`` as ``kernels._activation``), stored through shared memory by TMA.
tf32 takes any layout but A column-major with B row-major: wgmma reads 32-bit shared-memory operands
only K-major, so an M-major A is fed from registers (operand mode 1), and with a row-major B the tile
is computed transposed, C^T = B^T A^T, B^T from registers (mode 2; ``_operand_mode``).
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# the TMA copies' names: async_load/async_store from Triton 3.7 on, the older names in 3.6 (the GPU image)
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
_cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier     # 3.6's name, later gl.barrier
_GL = {"torch.bfloat16": gl.bfloat16, "torch.float16": gl.float16, "torch.float32": gl.float32}

TAIL_CHUNKS = gl.constexpr(8)     # a tail tile's rows fall in this many chunks, shared out among its split units


def descriptor(t, block):
    """Gluon's host TMA descriptor of the 2-D row-major tensor ``t`` (its default NVMMA layout)."""
    layout = gl.NVMMASharedLayout.get_default_for(block, _GL[str(t.dtype)])
    return TensorDescriptor.from_tensor(t, block, layout)


@gluon.constexpr_function
def _acc_layout(dtype, BN, num_warps):
    """wgmma accumulator layout: warpgroups stacked along M (64 rows each for 8 warps),
    one instruction per warpgroup and K-step (n = BN <= 256, k = 32 bytes of operand)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                     instr_shape=[16, BN, 256 // dtype.primitive_bitwidth])


@gluon.constexpr_function
def _operand_mode(dtype, A_T, B_T):
    """How the consumer feeds wgmma. 0: both operands from shared memory. wgmma reads 32-bit (tf32)
    operands from shared memory only K-major, but its first operand may sit in registers in any
    layout: 1 -- an M-major A (A_T) is loaded into registers; 2 -- a row-major (N-major) B: the
    tile is computed transposed, C^T = B^T A^T, with B^T loaded into registers and A (K-major)
    as the shared-memory operand. No copy of either operand."""
    if dtype.primitive_bitwidth != 32:
        return 0
    if not B_T:
        return 2
    return 1 if A_T else 0


@gluon.jit
def _smem_operand(bufs, i, T: gl.constexpr):
    """Ring buffer i as wgmma reads it from shared memory: an operand held transposed (``T``: the TMA
    descriptor is its transpose's) as a permuted view."""
    x = bufs.index(i)
    if T:
        x = x.permute((1, 0))
    return x


@gluon.jit
def _reg_mma(a_bufs, b_bufs, ready, s, phase, acc, reg_layout: gl.constexpr, MODE: gl.constexpr, A_T: gl.constexpr):
    """Operand modes 1 and 2: wait for stage s, load its register operand and issue the async wgmma.
    Returns (the register operand, the accumulator)."""
    mbarrier.wait(ready.index(s), phase)
    a = a_bufs.index(s)
    if A_T:
        a = a.permute((1, 0))
    b = b_bufs.index(s)
    if MODE == 2:   # B row-major: (BK, BN) in shared memory; C^T = B^T A^T with B^T in registers
        x = b.permute((1, 0)).load(reg_layout)
        acc = warpgroup_mma(x, a.permute((1, 0)), acc, is_async=True)
    else:           # A M-major in registers, B K-major: (BN, BK) in shared memory
        x = a.load(reg_layout)
        acc = warpgroup_mma(x, b.permute((1, 0)), acc, is_async=True)
    return x, acc


@gluon.jit
def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    per_group = GROUP_M * num_pid_n
    group = tile // per_group
    first_m = group * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % per_group) % rows
    pid_n = (tile % per_group) // rows
    return pid_m, pid_n


@gluon.constexpr_function
def _slice_layout(BN, num_warps):
    """A [rows, BN] fp32 slice of a tail tile: four columns a thread, a warp along N, warps along M."""
    tpw_n = min(32, BN // 4)
    return gl.BlockedLayout([1, 4], [32 // tpw_n, tpw_n], [num_warps, 1], [1, 0])


@gluon.jit
def _units(num_pid_m, num_pid_n, batch, tail_at, tail_split, SPLIT_K: gl.constexpr, TAIL: gl.constexpr):
    """How many work units a launch has (see ``_unit``): ``batch`` products' tiles."""
    if TAIL:
        return tail_at + (batch * num_pid_m * num_pid_n - tail_at) * tail_split
    else:
        return batch * num_pid_m * num_pid_n * SPLIT_K


@gluon.jit
def _unit(unit, num_pid_m, num_pid_n, k_tiles, tail_at, tail_split, GROUP_M: gl.constexpr, SPLIT_K: gl.constexpr,
          TAIL: gl.constexpr):
    """Work unit -> (tile, product, pid_m, pid_n, first K-step, end K-step). SPLIT_K > 1: SPLIT_K units per
    tile, adjacent. TAIL: tiles below ``tail_at`` are one unit each (the whole waves); each tile from
    ``tail_at`` on (the last, partial wave) is ``tail_split`` adjacent units, one share of K each. A batch's
    tiles are its products' tiles one product after another (``product`` = tile // tiles of one product)."""
    if TAIL:
        tile = unit
        k_lo = unit * 0
        k_hi = k_tiles
        if unit >= tail_at:
            v = unit - tail_at
            tile = tail_at + v // tail_split
            k_per = gl.cdiv(k_tiles, tail_split)
            k_lo = (v % tail_split) * k_per
            k_hi = min(k_lo + k_per, k_tiles)
    else:
        tile = unit // SPLIT_K
        k_per = gl.cdiv(k_tiles, SPLIT_K)
        k_lo = (unit % SPLIT_K) * k_per
        k_hi = min(k_lo + k_per, k_tiles)
    per = num_pid_m * num_pid_n
    product = tile // per
    pid_m, pid_n = _tile_coords(tile - product * per, num_pid_m, num_pid_n, GROUP_M)
    return tile, product, pid_m, pid_n, k_lo, k_hi


@gluon.jit
def _loader(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, batch, a_step, b_step, tail_at, tail_split,
            BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
            A_T: gl.constexpr, B_T: gl.constexpr, GROUP_M: gl.constexpr, NUM_SMS: gl.constexpr,
            SPLIT_K: gl.constexpr, TAIL: gl.constexpr, PARTS: gl.constexpr):
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    BNP: gl.constexpr = BN // PARTS
    nbytes: gl.constexpr = a_desc.block_type.nbytes + PARTS * b_desc.block_type.nbytes
    it = 0
    for unit in range(gl.program_id(0), _units(num_pid_m, num_pid_n, batch, tail_at, tail_split, SPLIT_K, TAIL),
                      NUM_SMS):
        tile, product, pid_m, pid_n, k_lo, k_hi = _unit(unit, num_pid_m, num_pid_n, k_tiles, tail_at, tail_split,
                                                        GROUP_M, SPLIT_K, TAIL)
        # a batch's operands are stacked along their rows: product p's rows start at p * step (0: broadcast)
        row_a = product * a_step
        row_b = product * b_step
        off_m = pid_m * BM
        off_n = pid_n * BN
        for ki in range(k_lo, k_hi):
            s = it % STAGES
            # a fresh barrier passes a wait on parity 1: the first lap needs no consumer
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            k = ki * BK
            if A_T:
                _tma_load(a_desc, [row_a + k, off_m], bar, a_bufs.index(s))
            else:
                _tma_load(a_desc, [row_a + off_m, k], bar, a_bufs.index(s))
            for j in gl.static_range(PARTS):       # B's columns of the tile in PARTS slices (``_consumer``)
                if B_T:
                    _tma_load(b_desc, [row_b + off_n + j * BNP, k], bar, b_bufs.index(s * PARTS + j))
                else:
                    _tma_load(b_desc, [row_b + k, off_n + j * BNP], bar, b_bufs.index(s * PARTS + j))
            it += 1


@gluon.jit
def _sigmoid(x):
    return 1.0 / (1.0 + gl.exp(-x))      # tl.sigmoid's formula


@gluon.jit
def _activation(x, ACT: gl.constexpr):
    """kernels._activation's formulas, in fp32: relu, gelu (erf), gelu_tanh (as x * sigmoid(2u),
    u = sqrt(2/pi) (x + 0.044715 x^3)), silu."""
    if ACT == "relu":
        x = gl.maximum(x, 0.0)
    elif ACT == "gelu":
        x = 0.5 * x * (1.0 + gl.erf(x * 0.7071067811865476))
    elif ACT == "gelu_tanh":
        x = x * _sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))
    elif ACT == "silu":
        x = x * _sigmoid(x)
    return x


@gluon.jit
def _finish(out, offs_m, offs_n, c_ptr, stride_cm, bias_ptr, stride_bias, M, N, alpha, beta,
            HAS_BETA: gl.constexpr, ALPHA_ONE: gl.constexpr, BIAS: gl.constexpr, ACT: gl.constexpr):
    """act(alpha * out (+ beta * C) (+ bias)) in fp32 for the rows ``offs_m`` and columns ``offs_n``
    of C. C and the bias are read with masked loads (beta == 0: C is never read)."""
    if not ALPHA_ONE:
        out = out * alpha
    if HAS_BETA:
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        old = gl.load(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], mask=mask, other=0.0)
        out = out + beta * old.to(gl.float32)
    if BIAS == 1:     # one value per column
        col = gl.load(bias_ptr + offs_n * stride_bias, mask=offs_n < N, other=0.0)
        out = out + col.to(gl.float32)[None, :]
    elif BIAS == 2:   # one value per row
        row = gl.load(bias_ptr + offs_m * stride_bias, mask=offs_m < M, other=0.0)
        out = out + row.to(gl.float32)[:, None]
    return _activation(out, ACT)


@gluon.jit
def _epilogue(out, c_desc, c_smem, c_ptr, stride_cm, bias_ptr, stride_bias, off_m, off_n, M, N, alpha, beta,
              layout: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, HAS_BETA: gl.constexpr,
              ALPHA_ONE: gl.constexpr, EPI_SPLIT: gl.constexpr, BIAS: gl.constexpr, ACT: gl.constexpr,
              SPLIT_ROWS: gl.constexpr):
    """act(alpha * out (+ beta * C) (+ bias)) in fp32 (``_finish``), through c_smem and a TMA store left
    in flight. EPI_SPLIT = 2 stores the tile in two halves, along M where SPLIT_ROWS, else along N."""
    offs_m = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    offs_n = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
    out = _finish(out, offs_m, offs_n, c_ptr, stride_cm, bias_ptr, stride_bias, M, N, alpha, beta,
                  HAS_BETA, ALPHA_ONE, BIAS, ACT)
    if EPI_SPLIT == 1:
        tma.store_wait(pendings=0)      # the previous tile's store has read c_smem
        c_smem.store(out.to(c_desc.dtype))
        fence_async_shared()
        _tma_store(c_desc, [off_m, off_n], c_smem)
    else:   # two halves through a half-size staging tile
        if SPLIT_ROWS:   # along M (the tile was computed transposed: M is held within each thread)
            halves = out.reshape([2, BM // 2, BN]).permute(1, 2, 0).split()
            step_m: gl.constexpr = BM // 2
            step_n: gl.constexpr = 0
        else:            # along N
            halves = out.reshape([BM, 2, BN // 2]).permute(0, 2, 1).split()
            step_m: gl.constexpr = 0
            step_n: gl.constexpr = BN // 2
        for h in gl.static_range(2):
            tma.store_wait(pendings=0)
            c_smem.store(halves[h].to(c_desc.dtype))
            fence_async_shared()
            _tma_store(c_desc, [off_m + h * step_m, off_n + h * step_n], c_smem)


@gluon.jit
def _leave_partial(acc, ws_ptr, slot, cnt_ptr, counter, layout: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr):
    """A split unit's fp32 partial ``acc`` into workspace slot ``slot``, then its arrival on ``counter``
    (acquire-release: the partials of the units counted before are visible). Returns the count before."""
    rows = gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
    gl.store(ws_ptr + slot.to(gl.int64) * (BM * BN) + rows[:, None] * BN + cols[None, :], acc)
    _cta_barrier()
    return gl.atomic_add(cnt_ptr + counter, 1, sem="acq_rel", scope="gpu")


@gluon.jit
def _sum_partials(ws_ptr, first, parts, chunk_lo, chunk_hi, c_ptr, stride_cm, bias_ptr, stride_bias, off_m, off_n,
                  M, N, alpha, beta, BM: gl.constexpr, BN: gl.constexpr, HAS_BETA: gl.constexpr,
                  ALPHA_ONE: gl.constexpr, BIAS: gl.constexpr, ACT: gl.constexpr, NUM_WARPS: gl.constexpr,
                  PARTS: gl.constexpr):
    """Rows ``chunk_lo``..``chunk_hi`` (in chunks of BM / TAIL_CHUNKS rows) of one tile: the sum of its
    ``parts`` fp32 partials from workspace slot ``first`` on, through the epilogue (``_finish``) into C
    with masked stores. Four consecutive columns a thread (16-byte loads along the partial's rows);
    PARTS > 0 (a constexpr count) unrolls the partials, so their loads of a chunk are all in flight at
    once (read in the accumulator's layout, one partial after another, split-K's fix-up took ~20 us a
    unit on the H100)."""
    R: gl.constexpr = BM // TAIL_CHUNKS
    sl: gl.constexpr = _slice_layout(BN, NUM_WARPS)
    r = gl.arange(0, R, layout=gl.SliceLayout(1, sl))
    cn = gl.arange(0, BN, layout=gl.SliceLayout(0, sl))
    base = first.to(gl.int64) * (BM * BN)
    for chunk in range(chunk_lo, chunk_hi):
        at = base + ((chunk * R + r)[:, None] * BN + cn[None, :])
        out = gl.zeros((R, BN), dtype=gl.float32, layout=sl)
        if PARTS > 0:
            for j in gl.static_range(PARTS):
                out += gl.load(ws_ptr + at + j * (BM * BN), cache_modifier=".cg")
        else:
            for j in range(parts):
                out += gl.load(ws_ptr + at + j * (BM * BN), cache_modifier=".cg")
        offs_m = off_m + chunk * R + r
        offs_n = off_n + cn
        out = _finish(out, offs_m, offs_n, c_ptr, stride_cm, bias_ptr, stride_bias, M, N, alpha, beta,
                      HAS_BETA, ALPHA_ONE, BIAS, ACT)
        gl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], out.to(c_ptr.dtype.element_ty),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@gluon.jit
def _tail_unit(acc, v, tail_split, ws_ptr, cnt_ptr, c_ptr, stride_cm, bias_ptr, stride_bias, off_m, off_n, M, N,
               alpha, beta, layout: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, HAS_BETA: gl.constexpr,
               ALPHA_ONE: gl.constexpr, BIAS: gl.constexpr, ACT: gl.constexpr, NUM_WARPS: gl.constexpr):
    """Split unit ``v`` of the last wave's tiles (``_unit``, TAIL): its fp32 partial goes to workspace slot
    v; once all ``tail_split`` units of the tile have counted themselves in (they run in the same,
    last, round of the persistent grid, so the wait is short), each adds up its own share of the
    tile's rows from every partial and stores it -- the fix-up shared out, not left to one unit. The
    second count resets the tile's counter for the next launch."""
    t = v // tail_split
    s = v % tail_split
    seen = _leave_partial(acc, ws_ptr, v, cnt_ptr, t, layout, BM, BN) + 1
    while seen < tail_split:
        seen = gl.atomic_add(cnt_ptr + t, 0, sem="acquire", scope="gpu")
    _cta_barrier()
    per = TAIL_CHUNKS // tail_split
    _sum_partials(ws_ptr, t * tail_split, tail_split, s * per, s * per + per, c_ptr, stride_cm, bias_ptr,
                  stride_bias, off_m, off_n, M, N, alpha, beta, BM, BN, HAS_BETA, ALPHA_ONE, BIAS, ACT, NUM_WARPS, 0)
    _cta_barrier()
    if gl.atomic_add(cnt_ptr + t, 1, sem="relaxed", scope="gpu") == 2 * tail_split - 1:
        gl.atomic_xchg(cnt_ptr + t, 0, sem="relaxed", scope="gpu")


@gluon.jit
def _consumer(c_desc, a_bufs, b_bufs, c_smem, ready, empty, c_ptr, stride_cm, bias_ptr, stride_bias, ws_ptr, cnt_ptr,
              M, N, K, batch, c_step, tail_at, tail_split, alpha, beta,
              BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
              A_T: gl.constexpr, B_T: gl.constexpr, GROUP_M: gl.constexpr, NUM_SMS: gl.constexpr,
              HAS_BETA: gl.constexpr, ALPHA_ONE: gl.constexpr, EPI_SPLIT: gl.constexpr, SPLIT_K: gl.constexpr,
              TAIL: gl.constexpr, BIAS: gl.constexpr, ACT: gl.constexpr, NUM_WARPS: gl.constexpr,
              PARTS: gl.constexpr):
    MODE: gl.constexpr = _operand_mode(a_bufs.dtype, A_T, B_T)
    # PARTS = 3: the tile's BN columns in three accumulators of BN / 3 (a 128x192 tile: register tensors
    # have power-of-two shapes), one wgmma each per K-step on B's three slices; operand mode 0, no split
    BNP: gl.constexpr = BN // PARTS
    if MODE == 2:   # the accumulator holds the tile transposed, (BN, BM)
        mma_layout: gl.constexpr = _acc_layout(a_bufs.dtype, BM, NUM_WARPS)
    else:
        mma_layout: gl.constexpr = _acc_layout(a_bufs.dtype, BNP, NUM_WARPS)
    reg_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=1)
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    it = 0
    for unit in range(gl.program_id(0), _units(num_pid_m, num_pid_n, batch, tail_at, tail_split, SPLIT_K, TAIL),
                      NUM_SMS):
        tile, product, pid_m, pid_n, k_lo, k_hi = _unit(unit, num_pid_m, num_pid_n, k_tiles, tail_at, tail_split,
                                                        GROUP_M, SPLIT_K, TAIL)
        # C's rows of this product in the stacked C, and the end of them (the epilogue's row bound)
        row_c = product * c_step
        m_end = row_c + M
        if MODE == 2:
            acc = gl.zeros((BN, BM), dtype=gl.float32, layout=mma_layout)
        else:
            acc = gl.zeros((BM, BNP), dtype=gl.float32, layout=mma_layout)
        if PARTS == 3:
            acc1 = gl.zeros((BM, BNP), dtype=gl.float32, layout=mma_layout)
            acc2 = gl.zeros((BM, BNP), dtype=gl.float32, layout=mma_layout)
            for ki in range(k_lo, k_hi):
                s = it % STAGES
                mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                a = _smem_operand(a_bufs, s, A_T)
                acc = warpgroup_mma(a, _smem_operand(b_bufs, 3 * s, B_T), acc, is_async=True)
                acc1 = warpgroup_mma(a, _smem_operand(b_bufs, 3 * s + 1, B_T), acc1, is_async=True)
                acc2 = warpgroup_mma(a, _smem_operand(b_bufs, 3 * s + 2, B_T), acc2, is_async=True)
                # this K-step's three wgmmas stay in flight: the step before is done, its stage goes back
                acc, acc1, acc2 = warpgroup_mma_wait(3, deps=(acc, acc1, acc2))
                mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=ki > k_lo)
                it += 1
            acc, acc1, acc2 = warpgroup_mma_wait(0, deps=(acc, acc1, acc2))
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=k_hi > k_lo)
        elif MODE == 0:
            for ki in range(k_lo, k_hi):
                s = it % STAGES
                mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                acc = warpgroup_mma(_smem_operand(a_bufs, s, A_T), _smem_operand(b_bufs, s, B_T), acc, is_async=True)
                # one wgmma stays in flight: the one before it is done, so its stage goes back
                acc = warpgroup_mma_wait(1, deps=(acc,))
                mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=ki > k_lo)
                it += 1
            acc = warpgroup_mma_wait(0, deps=(acc,))
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=k_hi > k_lo)
        else:
            # wgmma reads its register operand until a wait retires it, and a value that is written
            # again before then is overwritten under it (measured: a single register operand reloaded
            # each step with one wgmma in flight gave wrong results that differed between launches;
            # waiting for each wgmma instead was correct but ~25% slower, docs/history.md).
            # Two operands in turn, x0 and x1, each kept alive (a dependency of the wait) until the
            # wait that retires the wgmma reading it, so one wgmma stays in flight as in mode 0.
            if MODE == 2:
                x1 = gl.zeros((BN, BK), dtype=gl.float32, layout=reg_layout)
            else:
                x1 = gl.zeros((BM, BK), dtype=gl.float32, layout=reg_layout)
            for ki in range(k_lo, k_hi - 1, 2):
                s = it % STAGES
                x0, acc = _reg_mma(a_bufs, b_bufs, ready, s, (it // STAGES) & 1, acc, reg_layout, MODE, A_T)
                acc, x1 = warpgroup_mma_wait(1, deps=(acc, x1))          # the wgmma that read x1 is done
                mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=ki > k_lo)
                s = (it + 1) % STAGES
                x1, acc = _reg_mma(a_bufs, b_bufs, ready, s, ((it + 1) // STAGES) & 1, acc, reg_layout, MODE, A_T)
                acc, x0 = warpgroup_mma_wait(1, deps=(acc, x0))          # the wgmma that read x0 is done
                mbarrier.arrive(empty.index(it % STAGES))
                it += 2
            if (k_hi - k_lo) % 2 == 1:
                s = it % STAGES
                x0, acc = _reg_mma(a_bufs, b_bufs, ready, s, (it // STAGES) & 1, acc, reg_layout, MODE, A_T)
                acc, x1 = warpgroup_mma_wait(1, deps=(acc, x1))
                mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=k_hi - k_lo > 1)
                it += 1
                acc, x0 = warpgroup_mma_wait(0, deps=(acc, x0))
            else:
                acc, x1 = warpgroup_mma_wait(0, deps=(acc, x1))
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=k_hi > k_lo)
        if MODE == 2:
            acc = acc.permute((1, 0))      # back to (BM, BN): a transposed view of the registers
        layout: gl.constexpr = acc.type.layout
        # a bias per row is every product's: indexed by the row within the product, not the stacked row
        row_bias = bias_ptr - row_c * stride_bias if BIAS == 2 else bias_ptr
        if TAIL:
            if unit < tail_at:
                _epilogue(acc, c_desc, c_smem, c_ptr, stride_cm, row_bias, stride_bias, row_c + pid_m * BM,
                          pid_n * BN, m_end, N, alpha, beta, layout, BM, BN, HAS_BETA, ALPHA_ONE, EPI_SPLIT, BIAS,
                          ACT, MODE == 2)
            else:
                _tail_unit(acc, unit - tail_at, tail_split, ws_ptr, cnt_ptr, c_ptr, stride_cm, row_bias, stride_bias,
                           row_c + pid_m * BM, pid_n * BN, m_end, N, alpha, beta, layout, BM, BN, HAS_BETA, ALPHA_ONE,
                           BIAS, ACT, NUM_WARPS)
        elif PARTS == 3:      # the three column slices in turn through c_smem (one slice wide); none past N
            _epilogue(acc, c_desc, c_smem, c_ptr, stride_cm, row_bias, stride_bias, row_c + pid_m * BM, pid_n * BN,
                      m_end, N, alpha, beta, layout, BM, BNP, HAS_BETA, ALPHA_ONE, 1, BIAS, ACT, False)
            if pid_n * BN + BNP < N:
                _epilogue(acc1, c_desc, c_smem, c_ptr, stride_cm, row_bias, stride_bias, row_c + pid_m * BM,
                          pid_n * BN + BNP, m_end, N, alpha, beta, layout, BM, BNP, HAS_BETA, ALPHA_ONE, 1, BIAS, ACT,
                          False)
            if pid_n * BN + 2 * BNP < N:
                _epilogue(acc2, c_desc, c_smem, c_ptr, stride_cm, row_bias, stride_bias, row_c + pid_m * BM,
                          pid_n * BN + 2 * BNP, m_end, N, alpha, beta, layout, BM, BNP, HAS_BETA, ALPHA_ONE, 1, BIAS,
                          ACT, False)
        elif SPLIT_K == 1:
            _epilogue(acc, c_desc, c_smem, c_ptr, stride_cm, row_bias, stride_bias, row_c + pid_m * BM, pid_n * BN,
                      m_end, N, alpha, beta, layout, BM, BN, HAS_BETA, ALPHA_ONE, EPI_SPLIT, BIAS, ACT, MODE == 2)
        else:
            # split-K in one kernel: every unit leaves its fp32 partial in the workspace and counts
            # itself in on the tile's counter; the last to arrive resets the counter for the next launch
            # and adds up all the tile's partials through the epilogue into C (``_sum_partials``)
            if _leave_partial(acc, ws_ptr, unit, cnt_ptr, tile, layout, BM, BN) == SPLIT_K - 1:
                gl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")
                _sum_partials(ws_ptr, tile * SPLIT_K, SPLIT_K, 0, TAIL_CHUNKS, c_ptr, stride_cm, row_bias,
                              stride_bias, row_c + pid_m * BM, pid_n * BN, m_end, N, alpha, beta, BM, BN, HAS_BETA,
                              ALPHA_ONE, BIAS, ACT, NUM_WARPS, SPLIT_K)
    tma.store_wait(pendings=0)


# M, N, K and the batch's sizes are not specialised (== 1, % 16): they feed no vector access here (the
# copy engine reads the operands), so one compiled kernel serves every size of a config. A batch of
# ``batch`` products: each operand stacked along its rows in one descriptor (product p's rows from
# p * step; a step 0: the same operand for every product), C too (``gluon_gemm._stacked`` and
# ``batch_fits`` say when)
@gluon.jit(do_not_specialize=["M", "N", "K", "batch", "a_step", "b_step", "c_step"])
def gluon_ws_kernel(a_desc, b_desc, c_desc, c_ptr, stride_cm, bias_ptr, stride_bias, ws_ptr, cnt_ptr, M, N, K,
                    batch, a_step, b_step, c_step, tail_at, tail_split, alpha, beta,
                    STAGES: gl.constexpr, A_T: gl.constexpr, B_T: gl.constexpr, GROUP_M: gl.constexpr,
                    NUM_SMS: gl.constexpr, HAS_BETA: gl.constexpr, ALPHA_ONE: gl.constexpr,
                    EPI_SPLIT: gl.constexpr, SPLIT_K: gl.constexpr, TAIL: gl.constexpr, PARTS: gl.constexpr,
                    LOADER_REGS: gl.constexpr, BIAS: gl.constexpr, ACT: gl.constexpr, num_warps: gl.constexpr):
    # the output staging tile is half the tile where EPI_SPLIT = 2: along M in operand mode 2, else along N;
    # one of its PARTS column slices (B's block too) where PARTS > 1
    ROWS: gl.constexpr = _operand_mode(a_desc.dtype, A_T, B_T) == 2
    BM: gl.constexpr = c_desc.block_type.shape[0] * (EPI_SPLIT if ROWS else 1)
    BN: gl.constexpr = c_desc.block_type.shape[1] * (1 if ROWS else EPI_SPLIT) * PARTS
    BK: gl.constexpr = b_desc.block_type.shape[1] if B_T else b_desc.block_type.shape[0]
    dtype: gl.constexpr = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES * PARTS] + b_desc.block_type.shape, b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)

    gl.warp_specialize([
        (_consumer, (c_desc, a_bufs, b_bufs, c_smem, ready, empty, c_ptr, stride_cm, bias_ptr, stride_bias,
                     ws_ptr, cnt_ptr, M, N, K, batch, c_step, tail_at, tail_split, alpha, beta, BM, BN, BK, STAGES,
                     A_T, B_T, GROUP_M, NUM_SMS, HAS_BETA, ALPHA_ONE, EPI_SPLIT, SPLIT_K, TAIL, BIAS, ACT, num_warps,
                     PARTS)),
        (_loader, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, batch, a_step, b_step, tail_at, tail_split,
                   BM, BN, BK, STAGES, A_T, B_T, GROUP_M, NUM_SMS, SPLIT_K, TAIL, PARTS)),
    ], [1], [LOADER_REGS])

    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))
