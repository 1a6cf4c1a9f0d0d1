"""The device code of variant 'gluon-ws' (``gluon_gemm.py`` is its host side and says how it works).

Imported by ``gluon_gemm`` only to compile or launch through Gluon (a kernel found in tiledmm's kernel
index is launched without it): importing ``triton.experimental.gluon`` costs 0.1-0.15 s, which a first
call should not pay. The index keys this file by its bytes (``gluon_gemm._source_key``), so everything the
kernel calls but Triton stays in this file.

``gluon_ws_kernel``: a persistent, warp-specialised Hopper GEMM (a 1-warp TMA loader partition,
one or two consumer warpgroups issuing async wgmma), split-K in one kernel, a stream-K last wave
(TAIL), and the fused epilogue ``act(alpha * acc + beta * C + bias)`` in fp32 (``BIAS`` 0 none, 1 one value per
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

FIX_CHUNKS = gl.constexpr(8)      # split-K's fix-up adds up a tile's partials in this many chunks of rows


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
    as the shared-memory operand. No copy of either operand (issue 24, item 3)."""
    if dtype.primitive_bitwidth != 32:
        return 0
    if not B_T:
        return 2
    return 1 if A_T else 0


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
    """A [rows, BN] fp32 slice of a split tile: four columns a thread, a warp along N, warps along M."""
    tpw_n = min(32, BN // 4)
    return gl.BlockedLayout([1, 4], [32 // tpw_n, tpw_n], [num_warps, 1], [1, 0])


@gluon.jit
def _units(num_pid_m, num_pid_n, batch, tail_at, tail_progs, SPLIT_K: gl.constexpr, TAIL: gl.constexpr,
           NUM_SMS: gl.constexpr):
    """How many work units a launch has (see ``_unit``): ``batch`` products' tiles."""
    if TAIL:    # the whole waves' tiles, then two stream-K units a program (none where nothing is shared)
        return tail_at + 2 * NUM_SMS * min(tail_progs, 1)
    else:
        return batch * num_pid_m * num_pid_n * SPLIT_K


@gluon.jit
def _sk_range(p, tail_iters, tail_progs):
    """Program p's share [s, e) of the tail's ``tail_iters`` K-steps (stream-K, counted tile after tile):
    the first ``tail_progs`` programs take equal shares, the others none."""
    s = min(p, tail_progs) * tail_iters // tail_progs
    e = min(p + 1, tail_progs) * tail_iters // tail_progs
    return s, e


@gluon.jit
def _sk_owner(x, tail_iters, tail_progs):
    """The program whose share (``_sk_range``) holds the tail's K-step x: the last q with s_q <= x."""
    return ((x + 1) * tail_progs - 1) // tail_iters


@gluon.jit
def _unit(unit, num_pid_m, num_pid_n, k_tiles, batch, tail_at, tail_progs, GROUP_M: gl.constexpr,
          SPLIT_K: gl.constexpr, TAIL: gl.constexpr, NUM_SMS: gl.constexpr):
    """Work unit -> (tile, product, pid_m, pid_n, first K-step, end K-step). SPLIT_K > 1: SPLIT_K units per
    tile, adjacent. TAIL: tiles below ``tail_at`` are one unit each (the whole waves); the K-steps of the
    tiles from ``tail_at`` on (the last, partial wave) are shared out stream-K (``_sk_range``): program p's
    share runs over at most two tiles (the host keeps ``tail_progs`` above the tail's tiles), taken as two
    units -- first (unit tail_at + p) the start of its second tile, which it leaves as a partial, then
    (tail_at + NUM_SMS + p) the end of its first tile, which finishes that tile where it reaches the tile's
    last K-step (``_consumer``); an empty part has no K-steps. A batch's tiles are its products' tiles one
    product after another (``product`` = tile // tiles of one product)."""
    per = num_pid_m * num_pid_n
    if TAIL:
        tile = unit
        k_lo = unit * 0
        k_hi = k_tiles
        if unit >= tail_at:
            v = unit - tail_at
            n_tail = batch * per - tail_at
            s, e = _sk_range(v % NUM_SMS, n_tail * k_tiles, tail_progs)
            t = s // k_tiles
            if v < NUM_SMS:     # the start of the next tile, where the share reaches it
                k_hi = max(e - (t + 1) * k_tiles, 0)
                t = t + 1
            else:               # the share's part of its first tile
                k_lo = s - t * k_tiles
                k_hi = min(e - t * k_tiles, k_tiles)
            tile = tail_at + min(t, n_tail - 1)      # (an empty part past the last tile: any tile)
    else:
        tile = unit // SPLIT_K
        k_per = gl.cdiv(k_tiles, SPLIT_K)
        k_lo = (unit % SPLIT_K) * k_per
        k_hi = min(k_lo + k_per, k_tiles)
    product = tile // per
    pid_m, pid_n = _tile_coords(tile - product * per, num_pid_m, num_pid_n, GROUP_M)
    return tile, product, pid_m, pid_n, k_lo, k_hi


@gluon.jit
def _loader(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, batch, a_step, b_step, tail_at, tail_progs,
            BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
            A_T: gl.constexpr, B_T: gl.constexpr, GROUP_M: gl.constexpr, NUM_SMS: gl.constexpr,
            SPLIT_K: gl.constexpr, TAIL: gl.constexpr):
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    it = 0
    for unit in range(gl.program_id(0), _units(num_pid_m, num_pid_n, batch, tail_at, tail_progs, SPLIT_K, TAIL,
                                               NUM_SMS), NUM_SMS):
        tile, product, pid_m, pid_n, k_lo, k_hi = _unit(unit, num_pid_m, num_pid_n, k_tiles, batch, tail_at,
                                                        tail_progs, GROUP_M, SPLIT_K, TAIL, NUM_SMS)
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
            if B_T:
                _tma_load(b_desc, [row_b + off_n, k], bar, b_bufs.index(s))
            else:
                _tma_load(b_desc, [row_b + k, off_n], bar, b_bufs.index(s))
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
def _ws_offsets(rows, cols, BN: gl.constexpr):
    """Where element (rows[:, None], cols[None, :]) of a tile's fp32 partial lies in its workspace slot: in the
    order the wgmma accumulator's registers lie in (a warp's 16 rows, an 8-column group, the row half, the
    lane, the column pair), so that a warp's access to one register pair covers 256 contiguous bytes -- not
    32 bytes in each of 8 rows, as row-major order would (the partials' stores and loads were 3-4x slower so:
    session 17). A bijection on the tile whatever the layout, so correct in any; fast in the accumulator's."""
    # ((((r // 16) * (BN // 8) + c // 8) * 2 + (r % 16) // 8) * 32 + lane) * 2 + c % 2, lane = (r % 8) * 4 + (c % 8) // 2,
    # written as a part of the row and a part of the column (which Triton's alignment analysis follows: 8-byte accesses)
    r = (rows // 16) * (BN * 16) + ((rows % 16) // 8) * 64 + (rows % 8) * 8
    c = (cols // 8) * 128 + cols % 8
    return r[:, None] + c[None, :]


@gluon.jit
def _store_part(x, dm, dn, c_desc, c_smem, c_ptr, stride_cm, bias_ptr, stride_bias, off_m, off_n, M, N, alpha, beta,
                ws_ptr, first, parts, BM: gl.constexpr, BN: gl.constexpr, HAS_BETA: gl.constexpr,
                ALPHA_ONE: gl.constexpr, BIAS: gl.constexpr, ACT: gl.constexpr, PARTIALS: gl.constexpr):
    """The part ``x`` of a tile (its rows from ``dm``, columns from ``dn``) out through c_smem and a TMA
    store left in flight: first, with PARTIALS, the same part of the ``parts`` fp32 partials from workspace
    slot ``first`` on added in (a stream-K tile's finish), then the epilogue (``_finish``)."""
    xl: gl.constexpr = x.type.layout
    rows = dm + gl.arange(0, x.shape[0], layout=gl.SliceLayout(1, xl))
    cols = dn + gl.arange(0, x.shape[1], layout=gl.SliceLayout(0, xl))
    if PARTIALS:
        at = first.to(gl.int64) * (BM * BN) + _ws_offsets(rows, cols, BN)
        for j in range(parts):
            x += gl.load(ws_ptr + at + j * (BM * BN), cache_modifier=".cg")
    x = _finish(x, off_m + rows, off_n + cols, c_ptr, stride_cm, bias_ptr, stride_bias, M, N, alpha, beta,
                HAS_BETA, ALPHA_ONE, BIAS, ACT)
    tma.store_wait(pendings=0)      # the previous store has read c_smem
    c_smem.store(x.to(c_desc.dtype))
    fence_async_shared()
    _tma_store(c_desc, [off_m + dm, off_n + dn], c_smem)


@gluon.jit
def _epilogue(out, c_desc, c_smem, c_ptr, stride_cm, bias_ptr, stride_bias, off_m, off_n, M, N, alpha, beta,
              ws_ptr, first, parts, BM: gl.constexpr, BN: gl.constexpr, HAS_BETA: gl.constexpr,
              ALPHA_ONE: gl.constexpr, EPI_SPLIT: gl.constexpr, BIAS: gl.constexpr, ACT: gl.constexpr,
              SPLIT_ROWS: gl.constexpr, PARTIALS: gl.constexpr):
    """act(alpha * out (+ partials) (+ beta * C) (+ bias)) in fp32 through c_smem and TMA stores left in
    flight (``_store_part``). EPI_SPLIT = 2 stores the tile in two halves, along M where SPLIT_ROWS, else
    along N, each half through the epilogue on its own (half the registers for C's and the partials' loads)."""
    if EPI_SPLIT == 1:
        _store_part(out, 0, 0, c_desc, c_smem, c_ptr, stride_cm, bias_ptr, stride_bias, off_m, off_n, M, N, alpha,
                    beta, ws_ptr, first, parts, BM, BN, HAS_BETA, ALPHA_ONE, BIAS, ACT, PARTIALS)
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
            _store_part(halves[h], h * step_m, h * step_n, c_desc, c_smem, c_ptr, stride_cm, bias_ptr, stride_bias,
                        off_m, off_n, M, N, alpha, beta, ws_ptr, first, parts, BM, BN, HAS_BETA, ALPHA_ONE, BIAS,
                        ACT, PARTIALS)


@gluon.jit
def _leave_partial(acc, ws_ptr, slot, cnt_ptr, counter, layout: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
                   FRAG: gl.constexpr):
    """A split unit's fp32 partial ``acc`` into workspace slot ``slot``, then its arrival on ``counter``
    (acquire-release: the partials of the units counted before are visible). Returns the count before.
    FRAG: in the accumulator's order (``_ws_offsets``: read back in the accumulator's layout), else row-major
    (split-K's fix-up reads rows)."""
    rows = gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
    if FRAG:
        at = _ws_offsets(rows, cols, BN)
    else:
        at = rows[:, None] * BN + cols[None, :]
    gl.store(ws_ptr + slot.to(gl.int64) * (BM * BN) + at, acc)
    _cta_barrier()
    return gl.atomic_add(cnt_ptr + counter, 1, sem="acq_rel", scope="gpu")


@gluon.jit
def _sum_partials(ws_ptr, first, c_ptr, stride_cm, bias_ptr, stride_bias, off_m, off_n, M, N, alpha, beta,
                  BM: gl.constexpr, BN: gl.constexpr, HAS_BETA: gl.constexpr, ALPHA_ONE: gl.constexpr,
                  BIAS: gl.constexpr, ACT: gl.constexpr, NUM_WARPS: gl.constexpr, PARTS: gl.constexpr):
    """Split-K's fix-up of one tile: the sum of its PARTS fp32 partials from workspace slot ``first`` on,
    through the epilogue (``_finish``) into C with masked stores, in chunks of BM / FIX_CHUNKS rows. Four
    consecutive columns a thread (16-byte loads along the partial's rows); the partials are unrolled, so
    their loads of a chunk are all in flight at once (read in the accumulator's layout, one partial after
    another, the fix-up took ~20 us a unit on the H100: session 15)."""
    R: gl.constexpr = BM // FIX_CHUNKS
    sl: gl.constexpr = _slice_layout(BN, NUM_WARPS)
    r = gl.arange(0, R, layout=gl.SliceLayout(1, sl))
    cn = gl.arange(0, BN, layout=gl.SliceLayout(0, sl))
    base = first.to(gl.int64) * (BM * BN)
    for chunk in range(0, FIX_CHUNKS):
        at = base + ((chunk * R + r)[:, None] * BN + cn[None, :])
        out = gl.zeros((R, BN), dtype=gl.float32, layout=sl)
        for j in gl.static_range(PARTS):
            out += gl.load(ws_ptr + at + j * (BM * BN), cache_modifier=".cg")
        offs_m = off_m + chunk * R + r
        offs_n = off_n + cn
        out = _finish(out, offs_m, offs_n, c_ptr, stride_cm, bias_ptr, stride_bias, M, N, alpha, beta,
                      HAS_BETA, ALPHA_ONE, BIAS, ACT)
        gl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], out.to(c_ptr.dtype.element_ty),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@gluon.jit
def _sk_wait(cnt_ptr, t, parts):
    """A stream-K tile's finisher waits until the ``parts`` programs before it on tile ``t`` have left their
    partials (acquire: their stores are visible), then resets the tile's counter for the next launch (no
    one else counts on it any more). The wait is short: every program has an equal share, and each leaves
    its partial before it finishes a tile of its own (``_unit``); all programs are resident (one an SM)."""
    if parts > 0:
        seen = gl.atomic_add(cnt_ptr + t, 0, sem="acquire", scope="gpu")
        while seen < parts:
            seen = gl.atomic_add(cnt_ptr + t, 0, sem="acquire", scope="gpu")
        _cta_barrier()
        gl.atomic_xchg(cnt_ptr + t, 0, sem="relaxed", scope="gpu")


@gluon.jit
def _consumer(c_desc, a_bufs, b_bufs, c_smem, ready, empty, c_ptr, stride_cm, bias_ptr, stride_bias, ws_ptr, cnt_ptr,
              M, N, K, batch, c_step, tail_at, tail_progs, alpha, beta,
              BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
              A_T: gl.constexpr, B_T: gl.constexpr, GROUP_M: gl.constexpr, NUM_SMS: gl.constexpr,
              HAS_BETA: gl.constexpr, ALPHA_ONE: gl.constexpr, EPI_SPLIT: gl.constexpr, SPLIT_K: gl.constexpr,
              TAIL: gl.constexpr, BIAS: gl.constexpr, ACT: gl.constexpr, NUM_WARPS: gl.constexpr):
    MODE: gl.constexpr = _operand_mode(a_bufs.dtype, A_T, B_T)
    if MODE == 2:   # the accumulator holds the tile transposed, (BN, BM)
        mma_layout: gl.constexpr = _acc_layout(a_bufs.dtype, BM, NUM_WARPS)
    else:
        mma_layout: gl.constexpr = _acc_layout(a_bufs.dtype, BN, NUM_WARPS)
    reg_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=1)
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    it = 0
    for unit in range(gl.program_id(0), _units(num_pid_m, num_pid_n, batch, tail_at, tail_progs, SPLIT_K, TAIL,
                                               NUM_SMS), NUM_SMS):
        tile, product, pid_m, pid_n, k_lo, k_hi = _unit(unit, num_pid_m, num_pid_n, k_tiles, batch, tail_at,
                                                        tail_progs, GROUP_M, SPLIT_K, TAIL, NUM_SMS)
        # C's rows of this product in the stacked C, and the end of them (the epilogue's row bound)
        row_c = product * c_step
        m_end = row_c + M
        if MODE == 2:
            acc = gl.zeros((BN, BM), dtype=gl.float32, layout=mma_layout)
        else:
            acc = gl.zeros((BM, BN), dtype=gl.float32, layout=mma_layout)
        if MODE == 0:
            for ki in range(k_lo, k_hi):
                s = it % STAGES
                mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                a = a_bufs.index(s)
                if A_T:
                    a = a.permute((1, 0))
                b = b_bufs.index(s)
                if B_T:
                    b = b.permute((1, 0))
                acc = warpgroup_mma(a, b, acc, is_async=True)
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
            # waiting for each wgmma instead was correct but ~25% slower, docs/performance.md).
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
                          pid_n * BN, m_end, N, alpha, beta, ws_ptr, 0, 0, BM, BN, HAS_BETA, ALPHA_ONE, EPI_SPLIT,
                          BIAS, ACT, MODE == 2, False)
            elif k_hi > k_lo:
                # a stream-K part (``_unit``) of tail tile t: the part that reaches the tile's last K-step
                # finishes it -- adds the partials of the programs before it on the tile (workspace slots
                # first + t on: a program's part of tile t is in slot p + t, unique) and stores the tile;
                # any other part leaves its partial and counts itself in
                t = tile - tail_at
                p = (unit - tail_at) % NUM_SMS
                if k_hi == k_tiles:
                    first = _sk_owner(t * k_tiles, (batch * num_pid_m * num_pid_n - tail_at) * k_tiles, tail_progs)
                    _sk_wait(cnt_ptr, t, p - first)
                    _epilogue(acc, c_desc, c_smem, c_ptr, stride_cm, row_bias, stride_bias, row_c + pid_m * BM,
                              pid_n * BN, m_end, N, alpha, beta, ws_ptr, first + t, p - first, BM, BN, HAS_BETA,
                              ALPHA_ONE, EPI_SPLIT, BIAS, ACT, MODE == 2, True)
                else:
                    _leave_partial(acc, ws_ptr, p + t, cnt_ptr, t, layout, BM, BN, True)
        elif SPLIT_K == 1:
            _epilogue(acc, c_desc, c_smem, c_ptr, stride_cm, row_bias, stride_bias, row_c + pid_m * BM, pid_n * BN,
                      m_end, N, alpha, beta, ws_ptr, 0, 0, BM, BN, HAS_BETA, ALPHA_ONE, EPI_SPLIT, BIAS, ACT,
                      MODE == 2, False)
        else:
            # split-K in one kernel: every unit leaves its fp32 partial in the workspace and counts
            # itself in on the tile's counter; the last to arrive resets the counter for the next launch
            # and adds up all the tile's partials through the epilogue into C (``_sum_partials``)
            if _leave_partial(acc, ws_ptr, unit, cnt_ptr, tile, layout, BM, BN, False) == SPLIT_K - 1:
                gl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")
                _sum_partials(ws_ptr, tile * SPLIT_K, c_ptr, stride_cm, row_bias, stride_bias, row_c + pid_m * BM,
                              pid_n * BN, m_end, N, alpha, beta, BM, BN, HAS_BETA, ALPHA_ONE, BIAS, ACT, NUM_WARPS,
                              SPLIT_K)
    tma.store_wait(pendings=0)


# M, N, K and the batch's sizes are not specialised (== 1, % 16): they feed no vector access here (the
# copy engine reads the operands), so one compiled kernel serves every size of a config. A batch of
# ``batch`` products: each operand stacked along its rows in one descriptor (product p's rows from
# p * step; a step 0: the same operand for every product), C too (``gluon_gemm._stacked`` and
# ``batch_fits`` say when)
@gluon.jit(do_not_specialize=["M", "N", "K", "batch", "a_step", "b_step", "c_step"])
def gluon_ws_kernel(a_desc, b_desc, c_desc, c_ptr, stride_cm, bias_ptr, stride_bias, ws_ptr, cnt_ptr, M, N, K,
                    batch, a_step, b_step, c_step, tail_at, tail_progs, alpha, beta,
                    STAGES: gl.constexpr, A_T: gl.constexpr, B_T: gl.constexpr, GROUP_M: gl.constexpr,
                    NUM_SMS: gl.constexpr, HAS_BETA: gl.constexpr, ALPHA_ONE: gl.constexpr,
                    EPI_SPLIT: gl.constexpr, SPLIT_K: gl.constexpr, TAIL: gl.constexpr, LOADER_REGS: gl.constexpr,
                    BIAS: gl.constexpr, ACT: gl.constexpr, num_warps: gl.constexpr):
    # the output staging tile is half the tile where EPI_SPLIT = 2: along M in operand mode 2, else along N
    ROWS: gl.constexpr = _operand_mode(a_desc.dtype, A_T, B_T) == 2
    BM: gl.constexpr = c_desc.block_type.shape[0] * (EPI_SPLIT if ROWS else 1)
    BN: gl.constexpr = c_desc.block_type.shape[1] * (1 if ROWS else EPI_SPLIT)
    BK: gl.constexpr = b_desc.block_type.shape[1] if B_T else b_desc.block_type.shape[0]
    dtype: gl.constexpr = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)

    gl.warp_specialize([
        (_consumer, (c_desc, a_bufs, b_bufs, c_smem, ready, empty, c_ptr, stride_cm, bias_ptr, stride_bias,
                     ws_ptr, cnt_ptr, M, N, K, batch, c_step, tail_at, tail_progs, alpha, beta, BM, BN, BK, STAGES,
                     A_T, B_T, GROUP_M, NUM_SMS, HAS_BETA, ALPHA_ONE, EPI_SPLIT, SPLIT_K, TAIL, BIAS, ACT, num_warps)),
        (_loader, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, batch, a_step, b_step, tail_at, tail_progs,
                   BM, BN, BK, STAGES, A_T, B_T, GROUP_M, NUM_SMS, SPLIT_K, TAIL)),
    ], [1], [LOADER_REGS])

    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))
