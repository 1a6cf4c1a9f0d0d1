"""FP8 in Triton: the scaled product and the quantisation kernels (Hopper's 8-bit tensor cores).

The product, ``scaled_mm_kernel``: C = act((A * sa) @ (B * sb) + bias), A and B float8 (e4m3 or
e5m2, any pair), fp32 accumulation. Two ways to scale:

* outer (per tensor, rowwise): sa is one value per row of A (stride 0 for one per tensor), sb one
  per column of B; since they factor out of the K sum, they are applied once, in the epilogue.
* blockwise (1 x 128 blocks of A, 128 x 128 of B, the DeepSeek-V3 recipe): the scales change every
  128 elements of K, so each 128-wide K block's partial product is scaled and added into the
  fp32 total as soon as it is complete.

Promotion. On Hopper the tensor core's fp8 accumulator keeps about 14 bits (DeepSeek-V3's
measurement): a long K loses accuracy when every phase adds into it. With ``PROMOTE`` = P the
K loop accumulates P elements of K into a fresh tensor-core accumulator (``part``), then adds
that into a second fp32 accumulator held in registers (``acc``) -- DeepGEMM's promotion every
128 elements; blockwise scaling does this anyway, with the scales. ``PROMOTE`` = 0 is fast
accumulation (torch's ``use_fast_accum``): one accumulator the tensor core adds into all along.
Triton leaves ``acc + dot(a, b)`` alone for fp8 (its fold into ``dot(a, b, acc)`` requires
``max_num_imprecise_acc == 0``, which is not the sm_90 fp8 default), so the two accumulators stay
two. A promoted tile holds both in registers: 128 x 128 with 8 warps is its largest tile here. Each
promotion waits for the tensor core (wgmma.wait_group 0 in the K loop, where fast accumulation keeps
one group in flight); Triton's own promotion (``max_num_imprecise_acc``) compiles to the same wait
(ptxas inserts it: C7517, Triton 3.9), and neither a promotion lagged one step nor two accumulators
change that; the config's ``PROMOTE_K`` (256) halves the waits where the scales allow (not blockwise).

SWAP = 1 computes the transposed tile, C^T = B^T A^T, so that the tensor core's M dimension is
BLOCK_N (wgmma needs 64) and few rows of A (M <= 32: decoding) are its N dimension. fp8 wgmma reads
both operands K-major from shared memory; A's rows and the K-major B (the layout torch._scaled_mm
takes, and the only one the host passes here) are, either way round.

Loads stay inside the matrices without masks on M and N (rows and columns wrap modulo M and N;
the store is masked), with a mask on K only where K is not a multiple of the K step.

Quantisation (``quantize_*``): the amax of each group, the scale amax / fp8_max (the value that
multiplies the fp8 number back, torch's convention) and the saturating cast in one kernel per
group shape -- 1 x 128 row blocks (one pass), 128 x 128 tiles and whole rows (two sweeps of a
program's own data, the second from cache) -- and, per tensor, an amax kernel (atomic max) and a
cast kernel (the one reduction needs the whole tensor before the first value is cast).
"""
from __future__ import annotations

from ..._backend import mode

mode()  # decide GPU or emulation (TRITON_INTERPRET) before triton is imported
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ._vcommon import cdiv, cfg, fast, num_sms  # noqa: E402
from .kernels import _activation, _tile_id  # noqa: E402

BLOCK = 128                 # the blockwise recipe's block edge
EPS = 1e-12                 # amax floor: an all-zero group gets a tiny positive scale (torchao's)
FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
# fraction bits and smallest normal exponent (the grid's spacing below it: 2^(MIN_EXP - MANT))
FORMAT = {"float8_e4m3fn": (("MANT", 3), ("MIN_EXP", -6)), "float8_e5m2": (("MANT", 2), ("MIN_EXP", -14))}
MAX_GRID_YZ = 65535


# -- the scaled product ------------------------------------------------------------------------------

@triton.jit
def _k_steps(a_tile, b_tile, acc, k_left, stride_ak, stride_bk,
             BLOCK_K: tl.constexpr, STEPS: tl.constexpr, SWAP: tl.constexpr, EVEN_K: tl.constexpr):
    """acc += A[:, k : k + STEPS * BLOCK_K] @ B[k : ..., :] on the tensor core (``acc`` is its
    accumulator), ``a_tile``/``b_tile`` at k; ``k_left`` = K - k bounds the loads unless EVEN_K."""
    ks = tl.arange(0, BLOCK_K)
    for s in tl.static_range(STEPS):
        if EVEN_K:
            a = tl.load(a_tile + s * BLOCK_K * stride_ak)
            b = tl.load(b_tile + s * BLOCK_K * stride_bk)
        else:
            a = tl.load(a_tile + s * BLOCK_K * stride_ak, mask=ks[None, :] < k_left - s * BLOCK_K, other=0.0)
            b = tl.load(b_tile + s * BLOCK_K * stride_bk, mask=ks[:, None] < k_left - s * BLOCK_K, other=0.0)
        if SWAP:
            acc = tl.dot(tl.trans(b), tl.trans(a), acc)
        else:
            acc = tl.dot(a, b, acc)
    return acc


@triton.jit(do_not_specialize=["M"])
def scaled_mm_kernel(a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr, bias_ptr, M, N, K,
                     stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn,
                     stride_cb, stride_cm, stride_cn,
                     stride_sab, stride_sam, stride_sak, stride_sbb, stride_sbk, stride_sbn, stride_bias,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                     BLOCKWISE: tl.constexpr, PROMOTE: tl.constexpr, STEPS: tl.constexpr, SWAP: tl.constexpr,
                     EVEN_K: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr):
    """C[b] = act((A[b] * sa) @ (B[b] * sb) + bias) for batch b = program_id(1).

    Scales: ``sa_ptr[row * stride_sam + kblock * stride_sak]`` and ``sb_ptr[kblock * stride_sbk +
    col' * stride_sbn]`` where col' is the column (outer scaling) or its 128-block (BLOCKWISE);
    strides 0 broadcast one value (per tensor). PROMOTE: K elements per promotion (STEPS * BLOCK_K;
    128 when BLOCKWISE), 0 for fast accumulation. Bias: one value per column of C."""
    pid_m, pid_n = _tile_id(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    batch = tl.program_id(1).to(tl.int64)
    a_ptr += batch * stride_ab
    b_ptr += batch * stride_bb
    c_ptr += batch * stride_cb
    sa_ptr += batch * stride_sab
    sb_ptr += batch * stride_sbb

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows_in = rows % M               # loads wrap inside A and B; the store is masked
    cols_in = cols % N
    ks = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + rows_in[:, None].to(tl.int64) * stride_am + ks[None, :] * stride_ak
    b_tile = b_ptr + ks[:, None] * stride_bk + cols_in[None, :].to(tl.int64) * stride_bn
    sa_rows = sa_ptr + rows_in * stride_sam
    if BLOCKWISE:
        sb_cols = sb_ptr + (cols_in // 128) * stride_sbn
    else:
        sb_cols = sb_ptr + cols_in * stride_sbn
    if SWAP:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)     # C^T until the end
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)

    if PROMOTE == 0:                 # fast accumulation: the tensor core's accumulator all along
        for kb in range(0, tl.cdiv(K, BLOCK_K)):
            acc = _k_steps(a_tile, b_tile, acc, K - kb * BLOCK_K, stride_ak, stride_bk, BLOCK_K, 1, SWAP, EVEN_K)
            a_tile += BLOCK_K * stride_ak
            b_tile += BLOCK_K * stride_bk
    else:
        for kp in range(0, tl.cdiv(K, PROMOTE)):
            if SWAP:
                part = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
            else:
                part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            part = _k_steps(a_tile, b_tile, part, K - kp * PROMOTE, stride_ak, stride_bk, BLOCK_K, STEPS, SWAP,
                            EVEN_K)
            if BLOCKWISE:            # this K block's scales, then into the fp32 total
                sa = tl.load(sa_rows + kp * stride_sak)
                sb = tl.load(sb_cols + kp * stride_sbk)
                if SWAP:
                    acc += part * sb[:, None] * sa[None, :]
                else:
                    acc += part * sa[:, None] * sb[None, :]
            else:
                acc += part
            a_tile += PROMOTE * stride_ak
            b_tile += PROMOTE * stride_bk
    if SWAP:
        acc = tl.trans(acc)
    if not BLOCKWISE:                # outer scales factor out of the K sum: applied once
        acc = acc * tl.load(sa_rows)[:, None] * tl.load(sb_cols)[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols_in * stride_bias).to(tl.float32)[None, :]
    acc = _activation(acc, ACT)
    c_tile = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
    tl.store(c_tile, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit(do_not_specialize=["M", "N", "K"])       # descriptors do the bounds: sizes only count tiles
def scaled_mm_tma_kernel(a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr, bias_ptr, M, N, K, stride_am, stride_bn,
                         stride_cm, stride_cn, stride_sam, stride_sak, stride_sbk, stride_sbn, stride_bias,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                         BLOCKWISE: tl.constexpr, PROMOTE: tl.constexpr, STEPS: tl.constexpr,
                         HAS_BIAS: tl.constexpr, ACT: tl.constexpr, NUM_SMS: tl.constexpr, WS: tl.constexpr):
    """``scaled_mm_kernel``'s product (2-D) on Hopper's copy engine: one program per SM walks the tiles
    in the grouped order (persistent); A (M x K, K contiguous) and B as the N x K matrix B^T (K
    contiguous: B K-major) arrive through device-side TMA descriptors -- zero-filled outside the
    matrices, no pointer tensors in registers -- and wgmma reads them K-major from shared memory
    (``b.T``: a transposed view, no data moved). WS: ``warp_specialize`` on the tile loop."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1], block_shape=[BLOCK_N, BLOCK_K])
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, warp_specialize=WS):
        pid_m, pid_n = _tile_id(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        rows = off_m + tl.arange(0, BLOCK_M)
        cols = off_n + tl.arange(0, BLOCK_N)
        rows_in = rows % M
        cols_in = cols % N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if PROMOTE == 0:
            for kb in range(0, tl.cdiv(K, BLOCK_K)):
                acc = tl.dot(a_desc.load([off_m, kb * BLOCK_K]), b_desc.load([off_n, kb * BLOCK_K]).T, acc)
        else:
            for kp in range(0, tl.cdiv(K, PROMOTE)):
                part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for s in tl.static_range(STEPS):
                    k = kp * PROMOTE + s * BLOCK_K
                    part = tl.dot(a_desc.load([off_m, k]), b_desc.load([off_n, k]).T, part)
                if BLOCKWISE:
                    sa = tl.load(sa_ptr + rows_in * stride_sam + kp * stride_sak)
                    sb = tl.load(sb_ptr + kp * stride_sbk + (cols_in // 128) * stride_sbn)
                    acc += part * sa[:, None] * sb[None, :]
                else:
                    acc += part
        if not BLOCKWISE:
            sa = tl.load(sa_ptr + rows_in * stride_sam)
            acc = acc * sa[:, None] * tl.load(sb_ptr + cols_in * stride_sbn)[None, :]
        if HAS_BIAS:
            acc += tl.load(bias_ptr + cols_in * stride_bias).to(tl.float32)[None, :]
        acc = _activation(acc, ACT)
        c_tile = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
        tl.store(c_tile, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


# Configs by name (the bench prints each one's time per shape; ``choose`` picks among them).
# BLOCK_K 128: one fp8 row of a tile is 128 bytes (the widest swizzle); a promoted config's tile
# holds two fp32 accumulators in registers, so 128 x 256 is for fast accumulation only.
CONFIGS: dict[str, dict] = {
    # persistent, TMA descriptors (2-D, A K-contiguous, B K-major, 16-byte aligned rows: else the
    # pointer kernel with the same tile); PROMOTE_K 256: half the promotions (per tensor, rowwise)
    "tma128x256": cfg(128, 256, 128, 8, 3, GROUP_M=8, TMA=1),
    "tma128x128": cfg(128, 128, 128, 8, 4, GROUP_M=8, TMA=1),
    "tma128x128p256": cfg(128, 128, 128, 8, 3, GROUP_M=8, TMA=1, PROMOTE_K=256),   # 4 stages: 262 KB of shared memory (H100)
    "tma64x128": cfg(64, 128, 128, 4, 4, GROUP_M=8, TMA=1),
    # one program per tile, pointer loads
    "128x256": cfg(128, 256, 128, 8, 3, GROUP_M=8, SWAP=0),
    "128x128": cfg(128, 128, 128, 8, 4, GROUP_M=8, SWAP=0),
    "128x128w4": cfg(128, 128, 128, 4, 4, GROUP_M=8, SWAP=0),
    "128x128k64": cfg(128, 128, 64, 8, 6, GROUP_M=8, SWAP=0),
    "64x128": cfg(64, 128, 128, 4, 4, GROUP_M=8, SWAP=0),
    "64x64": cfg(64, 64, 128, 4, 5, GROUP_M=8, SWAP=0),
    "swap32x64": cfg(32, 64, 128, 4, 6, GROUP_M=1, SWAP=1),
    "swap16x64": cfg(16, 64, 128, 4, 6, GROUP_M=1, SWAP=1),
    "swap16x128": cfg(16, 128, 128, 4, 5, GROUP_M=1, SWAP=1),
}
FAST_ONLY = frozenset({"tma128x256", "128x256", "128x128w4"})   # two accumulators of these tiles spill registers
EMULATION_CONFIG = cfg(32, 32, 128, 1, 1, GROUP_M=2, SWAP=0)   # the interpreter: few programs


def choose(M: int, N: int, K: int, batch: int, promoted: bool, sms: int, blockwise: bool = False) -> str:
    """The config for a shape class, from the tile counts (no timing): the swapped tiles for few rows,
    the widest tile that still fills the SMs about once, else narrower ones. The pointer kernel's tiles,
    not the TMA kernel's: on the H100 (bench_fp8.py's sweep, Triton 3.6) they ran 1.3-1.8x faster on
    every shape of 128 rows or more -- fast accumulation 128x256 1267-1368 TFLOP/s against the TMA
    kernel's 753-966 at 2048-8192 rows, promoted 128x128 749-883 against 533-804, blockwise 64x128
    662-719 against 427-579."""
    if M <= 16:
        return "swap16x64"
    if M <= 32:
        return "swap32x64"

    def tiles(bm, bn):
        return cdiv(M, bm) * cdiv(N, bn) * batch
    if M <= 64:
        return "64x128" if tiles(64, 128) >= sms // 2 else "64x64"
    if blockwise:
        return "64x128"
    if not promoted and tiles(128, 256) >= sms:
        return "128x256"
    if tiles(128, 128) >= 0.75 * sms:
        return "128x128" if promoted else "128x128w4"
    return "64x128" if tiles(64, 128) >= 0.5 * sms else "64x64"


def config_for(name_or_cfg, M, N, K, batch, promote: int, blockwise: bool, index) -> dict:
    """The config dict a launch runs with: a name from CONFIGS, a dict of the same keys, or None
    (``choose``'s pick; the interpreter's small tile in emulation)."""
    from ..._arrays import TiledmmError
    from ..._backend import emulating
    if name_or_cfg is None:
        if emulating():
            c = dict(EMULATION_CONFIG)
        else:
            c = dict(CONFIGS[choose(M, N, K, batch, promote != 0, num_sms(index), blockwise)])
    elif isinstance(name_or_cfg, str):
        if name_or_cfg not in CONFIGS:
            raise TiledmmError(f"unknown fp8 config {name_or_cfg!r}; choose one of {list(CONFIGS)} or pass a dict")
        if promote and name_or_cfg in FAST_ONLY:
            raise TiledmmError(f"fp8 config {name_or_cfg!r} is for fast accumulation only (use_fast_accum=True, "
                               "per tensor or rowwise): two accumulators of its tile do not fit the registers")
        c = dict(CONFIGS[name_or_cfg])
    elif isinstance(name_or_cfg, dict):
        c = {"GROUP_M": 8, "num_warps": 4, "num_stages": 3, **name_or_cfg}
        if not {"BLOCK_M", "BLOCK_N", "BLOCK_K"} <= set(c):
            raise TiledmmError(f"an fp8 config dict needs BLOCK_M, BLOCK_N and BLOCK_K; got {name_or_cfg}")
    else:
        raise TiledmmError(f"config must be a name from {list(CONFIGS)}, a dict or None; got {name_or_cfg!r}")
    bk = c["BLOCK_K"]
    if blockwise and BLOCK % bk:
        raise TiledmmError(f"blockwise scaling needs BLOCK_K dividing {BLOCK}; config has BLOCK_K={bk}")
    if blockwise and c["BLOCK_N"] > BLOCK and c["BLOCK_N"] % BLOCK:
        raise TiledmmError(f"blockwise scaling needs BLOCK_N dividing or a multiple of {BLOCK}; "
                           f"config has BLOCK_N={c['BLOCK_N']}")
    return c


def promotion(config: dict, fast_accum: bool, blockwise: bool) -> int:
    """K elements per promotion: the 128-wide scaling block (blockwise), else the config's
    ``PROMOTE_K`` (default 128) rounded to a multiple of BLOCK_K, or 0 for fast accumulation."""
    if blockwise:
        return BLOCK
    if fast_accum:
        return 0
    bk = config["BLOCK_K"]
    return max(bk, (config.get("PROMOTE_K", BLOCK) // bk) * bk)


def _hopper(t) -> bool:
    from ._vcommon import hopper
    return hopper(t)


def tma_takes(a, b, c) -> bool:
    """The persistent TMA kernel's operands: a GPU with the copy engine, one matrix each (no batch),
    A K-contiguous and B K-major with 16-byte aligned bases and row strides."""
    if a.shape[0] != 1 or b.shape[0] != 1 or c.shape[0] != 1 or not _hopper(c):
        return False
    if a.stride(2) != 1 or b.stride(1) != 1:
        return False
    return (a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0 and a.stride(1) % 16 == 0
            and b.stride(2) % 16 == 0)


def launch(a, b, c, sa, sb, bias, *, blockwise: bool, fast_accum: bool, act: str, config=None,
           record: list | None = None) -> dict:
    """Enqueue c = act((a * sa) @ (b * sb) + bias) on torch's current stream.

    a (B, M, K), b (B, K, N), c (B, M, N): 3-D views (batch stride 0 broadcasts); sa (B, M, kcols),
    sb (B, krows, ncols): views whose strides index the scales (0 where one value serves many) --
    kcols = krows = 1 for outer scaling, ceil(K/128) when blockwise, ncols = N or ceil(N/128).
    bias: 1-D of N values (any float dtype) or None. Returns the config it ran (with ``TMA`` 0
    where a TMA config fell back to the pointer kernel). ``record``: a list that receives (FastKernel,
    grid, arguments) of each launch (``bind`` makes a repeat call's launch of it)."""
    B, M, N = c.shape
    K = a.shape[2]
    from ._vcommon import index_of
    index = index_of(c)
    conf = config_for(config, M, N, K, B, 0 if fast_accum and not blockwise else 1, blockwise, index)
    promote = promotion(conf, fast_accum, blockwise)
    steps = max(1, promote // conf["BLOCK_K"])
    meta = {k: v for k, v in conf.items() if k not in ("TMA", "WS", "PROMOTE_K")}
    bias_arg, bias_stride = (bias, bias.stride(0)) if bias is not None else (c, 0)
    if conf.get("TMA") and tma_takes(a, b, c):
        sms = num_sms(index)
        flags = (("BLOCKWISE", bool(blockwise)), ("PROMOTE", promote), ("STEPS", steps),
                 ("HAS_BIAS", bias is not None), ("ACT", act), ("NUM_SMS", sms), ("WS", bool(conf.get("WS"))))
        fk = fast(scaled_mm_tma_kernel, tuple(meta.items()), flags)
        tiles = cdiv(M, conf["BLOCK_M"]) * cdiv(N, conf["BLOCK_N"])
        args = (a[0], b[0], c[0], sa[0], sb[0], bias_arg, M, N, K, a.stride(1), b.stride(2), c.stride(1),
                c.stride(2), sa.stride(1), sa.stride(2), sb.stride(1), sb.stride(2), bias_stride)
        grid = (min(sms, tiles),)
        fk(grid, *args)
        if record is not None:
            record.append((fk, grid, args))
        return conf
    meta.setdefault("SWAP", 0)
    step = promote or conf["BLOCK_K"]
    flags = (("BLOCKWISE", bool(blockwise)), ("PROMOTE", promote), ("STEPS", steps), ("EVEN_K", K % step == 0),
             ("HAS_BIAS", bias is not None), ("ACT", act))
    fk = fast(scaled_mm_kernel, tuple(meta.items()), flags)
    tiles = cdiv(M, conf["BLOCK_M"]) * cdiv(N, conf["BLOCK_N"])
    for b0 in range(0, B, MAX_GRID_YZ):
        nb = min(B - b0, MAX_GRID_YZ)
        part = [t[b0:b0 + nb] if t.shape[0] > 1 else t for t in (a, b, c, sa, sb)]
        args = (*part, bias_arg, M, N, K, _bstride(a), a.stride(1), a.stride(2), _bstride(b), b.stride(1),
                b.stride(2), c.stride(0), c.stride(1), c.stride(2), _bstride(sa), sa.stride(1), sa.stride(2),
                _bstride(sb), sb.stride(1), sb.stride(2), bias_stride)
        fk((tiles, nb), *args)
        if record is not None:
            record.append((fk, (tiles, nb), args))
    return dict(conf, TMA=0) if conf.get("TMA") else conf


def bind(record: list):
    """A repeat call's launch of the one kernel launch in ``record`` (``launch``'s): ``go(stream, a, b,
    c, sa, sb, bias)`` with new tensors of the recorded call's shapes, strides, dtypes and pointer
    alignments (the caller keys on them) -- the compiled kernel called through Triton's launcher
    with the recorded sizes and strides, no specialisation key computed. None where it cannot be:
    several launches, direct launches off (``_adapter``), a kernel not compiled by that launch."""
    from ... import _adapter
    from .fastlaunch import current_device
    if len(record) != 1 or not _adapter.triton_direct():
        return None
    fk, grid, args = record[0]
    ck = fk.cache.get((current_device(), tuple(map(_adapter.arg_key, args))))     # (compiled kernels are per device)
    if ck is None or not fk.direct:
        return None
    g0 = grid[0]
    g1 = grid[1] if len(grid) > 1 else 1
    rest = args[6:]
    run, full = _adapter.run_compiled, fk._full
    from .fastlaunch import ensure_allocator

    def go(stream, a, b, c, sa, sb, bias):
        ensure_allocator()          # the TMA kernel's descriptors: global scratch from torch, per thread
        run(ck, g0, g1, 1, stream, full((a, b, c, sa, sb, c if bias is None else bias) + rest))
    return go


def _bstride(t) -> int:
    return t.stride(0) if t.shape[0] > 1 else 0


# -- quantisation -----------------------------------------------------------------------------------

@triton.jit
def _saturate(x, FP8_MAX: tl.constexpr, ROUND: tl.constexpr, MANT: tl.constexpr, MIN_EXP: tl.constexpr):
    """x clamped to the format's finite range (NaN stays NaN: the cast then gives the format's NaN);
    with ROUND (emulation) also rounded to the format's grid, to nearest even, in fp32 arithmetic:
    the interpreter's fp32 -> fp8 conversion does not carry a rounding into the exponent (7.77
    becomes 4, not 8, Triton 3.9), while it converts values already on the grid exactly. The GPU's
    conversion rounds to nearest even itself (cvt.rn.satfinite)."""
    x = tl.minimum(tl.maximum(x, -FP8_MAX, propagate_nan=tl.PropagateNan.ALL), FP8_MAX,
                   propagate_nan=tl.PropagateNan.ALL)
    if ROUND:       # MANT, MIN_EXP: the format's fraction bits and smallest normal exponent
        e = tl.maximum(((x.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, MIN_EXP)
        # 1.5 * 2^(e - MANT + 23): adding it rounds x to a multiple of 2^(e - MANT), the grid's spacing
        magic = (((e - MANT + 150) << 23) | 0x400000).to(tl.float32, bitcast=True)
        x = (x + magic) - magic
    return x


@triton.jit
def quantize_groups_kernel(x_ptr, q_ptr, s_ptr, R, C, stride_xb, stride_xr, stride_xc, stride_qb, stride_qr,
                           stride_sb, stride_sr, stride_sc, EPS: tl.constexpr, FP8_MAX: tl.constexpr,
                           ROUND: tl.constexpr, MANT: tl.constexpr, MIN_EXP: tl.constexpr,
                           BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, TILE_R: tl.constexpr):
    """Groups of TILE_R x BLOCK_C values of x (batch program_id(2)), each with its scale amax / FP8_MAX:
    TILE_R = 1 (1 x 128 blocks): a program loads BLOCK_R rows x BLOCK_C, takes each row's amax, writes
    the fp8 values (q, C-contiguous rows) and ``s[row, cblock]`` -- one pass; TILE_R = 128 (128 x 128
    blocks): a program walks its tile in BLOCK_R-row slices twice, for the amax and (from cache) for
    the cast, and writes ``s[rblock, cblock]``."""
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    batch = tl.program_id(2).to(tl.int64)
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    x_ptr += batch * stride_xb
    q_ptr += batch * stride_qb
    s_ptr += batch * stride_sb
    if TILE_R == 1:
        rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
        inside = (rows[:, None] < R) & (cols[None, :] < C)
        x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xr + cols[None, :] * stride_xc, mask=inside,
                    other=0.0).to(tl.float32)
        scale = tl.maximum(tl.max(tl.abs(x), axis=1), EPS) / FP8_MAX
        tl.store(s_ptr + rows * stride_sr + pid_c * stride_sc, scale, mask=rows < R)
        q = _saturate(x / scale[:, None], FP8_MAX, ROUND, MANT, MIN_EXP)
        tl.store(q_ptr + rows[:, None].to(tl.int64) * stride_qr + cols[None, :], q.to(q_ptr.dtype.element_ty),
                 mask=inside)
    else:
        amax = tl.zeros((BLOCK_R,), dtype=tl.float32)
        for r0 in range(0, TILE_R, BLOCK_R):
            rows = pid_r * TILE_R + r0 + tl.arange(0, BLOCK_R)
            x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xr + cols[None, :] * stride_xc,
                        mask=(rows[:, None] < R) & (cols[None, :] < C), other=0.0)
            amax = tl.maximum(amax, tl.max(tl.abs(x.to(tl.float32)), axis=1))
        scale = tl.maximum(tl.max(amax, axis=0), EPS) / FP8_MAX
        tl.store(s_ptr + pid_r * stride_sr + pid_c * stride_sc, scale)
        for r0 in range(0, TILE_R, BLOCK_R):
            rows = pid_r * TILE_R + r0 + tl.arange(0, BLOCK_R)
            inside = (rows[:, None] < R) & (cols[None, :] < C)
            x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xr + cols[None, :] * stride_xc, mask=inside,
                        other=0.0).to(tl.float32)
            q = _saturate(x / scale, FP8_MAX, ROUND, MANT, MIN_EXP)
            tl.store(q_ptr + rows[:, None].to(tl.int64) * stride_qr + cols[None, :], q.to(q_ptr.dtype.element_ty),
                     mask=inside)


@triton.jit
def quantize_rows_kernel(x_ptr, q_ptr, s_ptr, R, C, stride_xb, stride_xr, stride_xc, stride_qb, stride_qr,
                         stride_sb, stride_sr, EPS: tl.constexpr, FP8_MAX: tl.constexpr, ROUND: tl.constexpr,
                         MANT: tl.constexpr, MIN_EXP: tl.constexpr,
                         BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Rowwise: one scale per row of x. A sweep for the rows' amax, a second (from cache) to cast."""
    pid_r = tl.program_id(0)
    batch = tl.program_id(2).to(tl.int64)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    x_rows = x_ptr + batch * stride_xb + rows[:, None].to(tl.int64) * stride_xr
    amax = tl.zeros((BLOCK_R,), dtype=tl.float32)
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        x = tl.load(x_rows + cols[None, :] * stride_xc, mask=(rows[:, None] < R) & (cols[None, :] < C), other=0.0)
        amax = tl.maximum(amax, tl.max(tl.abs(x.to(tl.float32)), axis=1))
    scale = tl.maximum(amax, EPS) / FP8_MAX
    tl.store(s_ptr + batch * stride_sb + rows * stride_sr, scale, mask=rows < R)
    q_rows = q_ptr + batch * stride_qb + rows[:, None].to(tl.int64) * stride_qr
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        inside = (rows[:, None] < R) & (cols[None, :] < C)
        x = tl.load(x_rows + cols[None, :] * stride_xc, mask=inside, other=0.0).to(tl.float32)
        q = _saturate(x / scale[:, None], FP8_MAX, ROUND, MANT, MIN_EXP)
        tl.store(q_rows + cols[None, :], q.to(q_ptr.dtype.element_ty), mask=inside)


@triton.jit
def amax_kernel(x_ptr, amax_ptr, R, C, stride_xb, stride_xr, stride_xc, BLOCK_R: tl.constexpr,
                BLOCK_C: tl.constexpr):
    """Per tensor, pass 1: the tile's amax into ``amax_ptr[0]`` (atomic max; it starts at 0)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    x = tl.load(x_ptr + tl.program_id(2).to(tl.int64) * stride_xb + rows[:, None].to(tl.int64) * stride_xr
                + cols[None, :] * stride_xc, mask=(rows[:, None] < R) & (cols[None, :] < C), other=0.0)
    tl.atomic_max(amax_ptr, tl.max(tl.max(tl.abs(x.to(tl.float32)), axis=1), axis=0))


@triton.jit
def quantize_tensor_kernel(x_ptr, q_ptr, s_ptr, amax_ptr, R, C, stride_xb, stride_xr, stride_xc, stride_qb,
                           stride_qr, EPS: tl.constexpr, FP8_MAX: tl.constexpr, ROUND: tl.constexpr,
                           MANT: tl.constexpr, MIN_EXP: tl.constexpr,
                           BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Per tensor, pass 2: the cast with the scale from pass 1's amax (written by program 0)."""
    scale = tl.maximum(tl.load(amax_ptr), EPS) / FP8_MAX
    first = (tl.program_id(0) == 0) & (tl.program_id(1) == 0) & (tl.program_id(2) == 0)
    tl.store(s_ptr, scale, mask=first)
    batch = tl.program_id(2).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    inside = (rows[:, None] < R) & (cols[None, :] < C)
    x = tl.load(x_ptr + batch * stride_xb + rows[:, None].to(tl.int64) * stride_xr + cols[None, :] * stride_xc,
                mask=inside, other=0.0).to(tl.float32)
    q = _saturate(x / scale, FP8_MAX, ROUND, MANT, MIN_EXP)
    tl.store(q_ptr + batch * stride_qb + rows[:, None].to(tl.int64) * stride_qr + cols[None, :],
             q.to(q_ptr.dtype.element_ty), mask=inside)


_QUANT = {   # (BLOCK_R, BLOCK_C, num_warps) per kind; "tiles" walks 128-row tiles in BLOCK_R-row slices
    "row_blocks": (32, BLOCK, 4), "tiles": (32, BLOCK, 4), "rows": (8, 512, 4), "tensor": (32, 256, 4),
}
# x read down its columns (a transposed view: the gradient's and the backward's operands): taller
# tiles, so each column's run of BLOCK_R contiguous values fills 128-byte lines
_QUANT_T = {"row_blocks": (64, BLOCK, 8), "tiles": (64, BLOCK, 8), "rows": (64, 64, 4), "tensor": (64, 128, 4)}


def quantize(x, q, s, kind: str, fp8_name: str) -> None:
    """Write q (fp8, x's shape, C-contiguous rows) and its scales s (float32) for x (B, R, C) (any
    strides): ``kind`` "row_blocks" (1 x 128; s (B, R, ceil(C/128))), "tiles" (128 x 128;
    s (B, ceil(R/128), ceil(C/128))), "rows" (s (B, R, 1)) or "tensor" (s of one element)."""
    import torch
    from ..._backend import emulating
    B, R, C = x.shape
    consts = (("EPS", EPS), ("FP8_MAX", FP8_MAX[fp8_name]), ("ROUND", emulating())) + FORMAT[fp8_name]
    br, bc, warps = (_QUANT_T if x.stride(1) == 1 and x.stride(2) != 1 and R > 1 else _QUANT)[kind]
    for b0 in range(0, B, MAX_GRID_YZ):
        nb = min(B - b0, MAX_GRID_YZ)
        xs, qs = x[b0:b0 + nb], q[b0:b0 + nb]
        xargs = (R, C, xs.stride(0), xs.stride(1), xs.stride(2))
        if kind in ("row_blocks", "tiles"):
            ss = s[b0:b0 + nb]
            tile_r = BLOCK if kind == "tiles" else 1
            fk = fast(quantize_groups_kernel, (("num_warps", warps), ("num_stages", 1)),
                      consts + (("BLOCK_R", br), ("BLOCK_C", bc), ("TILE_R", tile_r)))
            fk((cdiv(R, tile_r if tile_r > 1 else br), cdiv(C, bc), nb), xs, qs, ss, *xargs, qs.stride(0),
               qs.stride(1), ss.stride(0), ss.stride(1), ss.stride(2))
        elif kind == "rows":
            ss = s[b0:b0 + nb]
            fk = fast(quantize_rows_kernel, (("num_warps", warps), ("num_stages", 1)),
                      consts + (("BLOCK_R", br), ("BLOCK_C", bc)))
            fk((cdiv(R, br), 1, nb), xs, qs, ss, *xargs, qs.stride(0), qs.stride(1), ss.stride(0), ss.stride(1))
    if kind != "tensor":
        return
    amax = torch.zeros(1, dtype=torch.float32, device=x.device)
    grid = lambda nb: (cdiv(R, br), cdiv(C, bc), nb)      # noqa: E731
    fa = fast(amax_kernel, (("num_warps", warps), ("num_stages", 1)), (("BLOCK_R", br), ("BLOCK_C", bc)))
    for b0 in range(0, B, MAX_GRID_YZ):
        xs = x[b0:b0 + MAX_GRID_YZ]
        fa(grid(xs.shape[0]), xs, amax, R, C, xs.stride(0), xs.stride(1), xs.stride(2))
    fq = fast(quantize_tensor_kernel, (("num_warps", warps), ("num_stages", 1)),
              consts + (("BLOCK_R", br), ("BLOCK_C", bc)))
    for b0 in range(0, B, MAX_GRID_YZ):
        xs, qs = x[b0:b0 + MAX_GRID_YZ], q[b0:b0 + MAX_GRID_YZ]
        fq(grid(xs.shape[0]), xs, qs, s, amax, R, C, xs.stride(0), xs.stride(1), xs.stride(2), qs.stride(0),
           qs.stride(1))
