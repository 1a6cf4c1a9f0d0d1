"""Variant 'splitk': small-M and skinny shapes, where output tiles are too few to fill the GPU.

C = alpha * A @ B + beta * C with few output tiles (M in 1..256 against N, K in the
thousands) leaves most of the 132 SMs idle in a tile-per-program kernel. Here each output
tile's K range is cut into S slices, S chosen so that tiles x S is about WAVES programs per SM;
each program sums its slice in fp32 into a workspace (S, batch, M, N), and a second small
kernel adds the S partials in a fixed order (deterministic), applies alpha and beta and casts.
With S = 1 the first kernel writes C directly (alpha/beta fused): a plain small-tile kernel.

M <= 16 (GEMV-like, memory-bound: the whole B is read once, ~K*N*esize bytes against HBM's
~3 TB/s) uses BLOCK_M = 16 tiles: tl.dot then runs on mma.sync with most rows masked, which
costs nothing next to the B stream.

Plain pointer loads (masked, zero-filled), so any strides, 3-D batches (B may be broadcast)
and Triton's CPU interpreter all work.

Batch-invariant mode (``invariant``; kernels/block/invariant.py picks among these configs by N and
K): a config with SPLIT_K fixes the split by K alone -- ``splits_for`` cuts K into
cdiv(K, k_per) slices of k_per = BLOCK_K * cdiv(cdiv(K, SPLIT_K), BLOCK_K), never reading M, the
batch or the SMs -- so every row of C is the same sum whatever M: the same K slices, each summed by
the same BLOCK_K steps of the same tile (a row's products depend on that row of A only; rows past M
load as zeros), stored exactly in fp32, then added in split order. The mode's configs also carry
ORDERED: the reduce is ``splitk_ordered_reduce_kernel``, which adds the S partials of an element
one at a time in split order, acc = ((0 + p0) + p1) + ..., elementwise -- not tl.sum over a chunk
of them (``splitk_reduce_kernel``), whose order of adds follows the compiled layout of the chunk,
and that follows the reduce's BLOCK (chosen from M * N) and Triton's specialisation of its integer
arguments (M * N's divisibility by 16 among them). ORDERED launches also pass 0 for the batch
strides of a single product (else A's and C's would be M * K and M * N) and pad the workspace's
split stride to a multiple of 16 elements, so that the main kernel compiles alike for every M.
Nothing is added atomically or in arrival order.
"""
from __future__ import annotations

from . import _vcommon as V
from ._vcommon import cdiv, cfg, index_of, kind_of, num_sms, tl_precision
from .fastlaunch import WORKSPACE
from .heuristics import Traits

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .kernels import NO_SPECIALISE, _epilogue, _tile_id, _tile_product  # noqa: E402  (the blocked kernel's pieces)

NAME = "splitk"
REPLAYABLE = WORKSPACE   # FastKernel launches and a private workspace only (fastlaunch.replay binds it)


@triton.jit(do_not_specialize=NO_SPECIALISE)   # one compile for every M (kernels.py says why)
def splitk_kernel(a_ptr, b_ptr, o_ptr, M, N, K, K_PER_SPLIT,
                  s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_os, s_ob, s_om, s_on,
                  alpha, beta,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, PRECISION: tl.constexpr, PARTIAL: tl.constexpr,
                  HAS_BETA: tl.constexpr, ALPHA_ONE: tl.constexpr, UPCAST: tl.constexpr,
                  SWAP: tl.constexpr = 0):
    """Program (tile, batch, split): sums A[rows, ks] @ B[ks, cols] over its K slice.
    PARTIAL: store the fp32 sum into the workspace slice ``split``; else finish C here."""
    pid_m, pid_n = _tile_id(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    batch = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    k0 = split * K_PER_SPLIT
    k_len = tl.minimum(K - k0, K_PER_SPLIT)   # a new name: Triton may have made K the constant 1

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + batch * s_ab + k0.to(tl.int64) * s_ak + rows[:, None].to(tl.int64) * s_am + ks[None, :] * s_ak
    b_tile = b_ptr + batch * s_bb + k0.to(tl.int64) * s_bk + ks[:, None].to(tl.int64) * s_bk + cols[None, :] * s_bn
    acc = _tile_product(a_tile, b_tile, rows, cols, M, N, k_len, s_ak, s_bk,
                        BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, UPCAST, SWAP)

    o_tile = o_ptr + batch * s_ob + split.to(tl.int64) * s_os + rows[:, None].to(tl.int64) * s_om + cols[None, :] * s_on
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    if PARTIAL:
        tl.store(o_tile, acc, mask=inside)
    else:
        _epilogue(o_tile, acc, inside, alpha, beta, ALPHA_ONE, HAS_BETA)


@triton.jit
def splitk_reduce_kernel(ws_ptr, c_ptr, MN, N, S, s_ws, s_wb, s_cb, s_cm, s_cn, alpha, beta,
                         BLOCK: tl.constexpr, HAS_BETA: tl.constexpr, ALPHA_ONE: tl.constexpr,
                         CHUNK: tl.constexpr):
    """C[b] = alpha * sum_s ws[s, b] + beta * C[b]: the S partials read CHUNK at a time (their loads in
    flight together, not one after another), each chunk summed and added in order -- a fixed order
    (deterministic)."""
    batch = tl.program_id(1).to(tl.int64)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    src = ws_ptr + batch * s_wb + offs
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    chunk = tl.arange(0, CHUNK)
    for s0 in range(0, S, CHUNK):
        part = tl.load(src[None, :] + (s0 + chunk)[:, None].to(tl.int64) * s_ws,
                       mask=((s0 + chunk)[:, None] < S) & mask[None, :], other=0.0)
        acc += tl.sum(part, axis=0)
    m = offs // N
    n = offs % N
    _epilogue(c_ptr + batch * s_cb + m * s_cm + n * s_cn, acc, mask, alpha, beta, ALPHA_ONE, HAS_BETA)


@triton.jit
def splitk_ordered_reduce_kernel(ws_ptr, c_ptr, MN, N, S, s_ws, s_wb, s_cb, s_cm, s_cn, alpha, beta,
                                 BLOCK: tl.constexpr, HAS_BETA: tl.constexpr, ALPHA_ONE: tl.constexpr,
                                 CHUNK: tl.constexpr):
    """``splitk_reduce_kernel`` with the partials added to the sum one by one, elementwise, in split order,
    acc = ((0 + ws[0]) + ws[1]) + ... (the batch-invariant mode: an order that no layout of the block
    changes); CHUNK of them loaded at a time (an unrolled step: the loads do not wait on the adds)."""
    batch = tl.program_id(1).to(tl.int64)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    src = ws_ptr + batch * s_wb + offs
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s0 in range(0, S, CHUNK):
        for j in tl.static_range(CHUNK):
            # (the split's test as a vector: the interpreter takes no scalar in a mask)
            acc += tl.load(src, mask=mask & (offs * 0 + (s0 + j) < S), other=0.0)
            src += s_ws                    # (a pointer step: no int32 product of split and stride)
    m = offs // N
    n = offs % N
    _epilogue(c_ptr + batch * s_cb + m * s_cm + n * s_cn, acc, mask, alpha, beta, ALPHA_ONE, HAS_BETA)


def _c(bm, bn, bk, warps, stages, waves=2, group=8, **extra):
    return cfg(bm, bn, bk, warps, stages, GROUP_M=group, WAVES=waves, **extra)


# ODD_ROWS: offered only where some operand's rows are not 16-byte aligned (dispatch.model_candidates). Such
# 16-bit rows load element by element, without cp.async: each program waits on its loads, so many small
# programs beat a few large ones -- 127x8191x127 bf16 on the H100, GPU time a call: 64x64 tiles (4 tiles x 32
# splits, 128 programs) 13.7 us, 128x128 (32 programs) 16.6, 64x128 (64 programs of 4 warps) 38.9-48.7,
# torch 14.2-14.5 (docs/history.md)
CONFIGS = {
    "16bit": [_c(16, 128, 128, 4, 4), _c(16, 256, 64, 4, 4), _c(32, 128, 128, 4, 4), _c(64, 128, 64, 4, 4),
              _c(128, 128, 64, 8, 3), _c(64, 256, 64, 8, 3), _c(128, 256, 64, 8, 3), _c(16, 64, 256, 4, 3, waves=4),
              _c(64, 64, 64, 4, 3, ODD_ROWS=1)],
    "tf32": [_c(16, 128, 64, 4, 4), _c(16, 256, 32, 4, 4), _c(32, 128, 64, 4, 4), _c(64, 128, 32, 4, 4),
             _c(128, 128, 32, 8, 3), _c(64, 256, 32, 8, 3), _c(128, 256, 32, 8, 3), _c(16, 64, 128, 4, 3, waves=4)],
    "ieee": [_c(16, 128, 32, 4, 3), _c(32, 128, 32, 4, 3), _c(64, 64, 32, 4, 3), _c(128, 128, 16, 8, 3),
             _c(64, 128, 32, 4, 3)],
}


def heuristic(M: int, N: int, K: int, kind: str) -> dict:
    """BLOCK_M just above M (16, 32, 64, 128); two waves of programs through the split."""
    table = CONFIGS[kind]
    if kind == "ieee":
        return dict(table[0] if M <= 16 else table[1] if M <= 32 else table[2] if M <= 64 else table[3])
    if M <= 16:
        return dict(table[0])
    if M <= 32:
        return dict(table[2])
    if M <= 64:
        return dict(table[3])
    return dict(table[4])


def splits_for(M: int, N: int, K: int, batch: int, meta: dict, sms: int) -> tuple[int, int]:
    """(S, K per split) on ``sms`` SMs: tiles x S ~ WAVES programs per SM, each slice at least
    4 K-blocks, K per split a multiple of BLOCK_K. Forced with meta['SPLIT_K'] when given."""
    bk = meta["BLOCK_K"]
    tiles = batch * cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"])
    want = meta.get("SPLIT_K") or cdiv(meta.get("WAVES", 2) * sms, tiles)
    s = max(1, min(want, cdiv(K, 4 * bk) if not meta.get("SPLIT_K") else cdiv(K, bk)))
    k_per = cdiv(cdiv(max(K, 1), s), bk) * bk
    return cdiv(max(K, 1), k_per), k_per


def prune(configs: list[dict], M: int, N: int, K: int, sms: int, batch: int = 1, keep: int = 3) -> list[dict]:
    """The configs worth timing: ranked by the wave model *with* the split -- waves of
    tiles x S programs, each BLOCK_M x BLOCK_N x (K / S) -- at most one per BLOCK_M (the
    tile height decides how often B is read and which MMA runs: on the H100 a 16-row
    bf16 split-K took 355 us on 127 x 8191 x 127 where 64 rows took 20)."""
    def cost(c):
        s, k_per = splits_for(M, N, K, batch, c, sms)
        programs = batch * cdiv(M, c["BLOCK_M"]) * cdiv(N, c["BLOCK_N"]) * s
        return cdiv(programs, sms) * c["BLOCK_M"] * c["BLOCK_N"] * k_per, -c["BLOCK_M"] * c["BLOCK_N"]
    out, heights = [], set()
    for c in sorted(configs, key=cost):
        if c["BLOCK_M"] not in heights:
            heights.add(c["BLOCK_M"])
            out.append(c)
    return out[:keep]


def _speed(p, config: dict) -> float:
    """Throughput of the blocked kernel's pieces (this one and variants.BLOCKED) against the
    TMA kernel's (H100, a probe of forced configs): about 0.8 on the tensor cores; tf32 with a row-major B
    feeds wgmma through registers (SWAP=2: B^T from registers, about half; else about a
    third); fewer than 64 unswapped rows run mma.sync (wgmma takes 64), about 0.6; exact fp32
    is FMA-bound alike. Rows that are not 16-byte aligned load element by element: 32-bit
    operands at about half; 16-bit ones also lose cp.async (it moves 4 bytes or more), so the
    loads stop overlapping the products: about a tenth (127 x 127 x 8191 bf16 on the H100:
    16-row split-K 355 us, tma-copy on aligned copies 120 us; tf32, split-K 20 us)."""
    unaligned = 1.0 if p.aligned else (0.5 if p.esize >= 4 else 0.1)
    if p.kind == "ieee":
        return unaligned
    if config["BLOCK_M"] < 64 and not config.get("SWAP"):
        return 0.6 * unaligned
    if p.kind == "tf32" and not p.b_kmajor:
        return (0.5 if config.get("SWAP") == 2 else 0.33) * unaligned
    return 0.8 * unaligned


# The batch-invariant mode's split counts: each config of the table with each count fixed (SPLIT_K), K cut
# alike for every M. Which one serves an (N, K) is the mode's choice (kernels/block/invariant.py: the model
# over a ladder of M; a count that leaves one slice, or slices of few K steps, is not offered there).
INVARIANT_SPLITS = (2, 4, 8, 16, 32, 64)
# the interpreter's tile (the dispatcher offers this variant no configs there): what the mode's tests split
EMULATION = _c(16, 32, 16, 4, 1)


def invariant(configs: list[dict]) -> list[dict]:
    """The configs the batch-invariant mode may take (``Variant.invariant``): each unswapped config of
    ``configs`` with each split count of INVARIANT_SPLITS fixed (SPLIT_K: ``splits_for`` then reads K and
    BLOCK_K only) and ORDERED (the reduce in split order, elementwise: the module's docstring). In the
    interpreter, where ``configs`` is empty, EMULATION's."""
    base = [c for c in configs if not c.get("SWAP")] or ([dict(EMULATION)] if V.emulating() else [])
    return [dict(c, SPLIT_K=s, ORDERED=1) for c in base for s in INVARIANT_SPLITS]


TRAITS = Traits(split=splits_for, speed=_speed)
_last: dict = {}   # the last CompiledKernel of the main kernel, for reports
_main = V.Launcher(splitk_kernel)
_reduce = V.Launcher(splitk_reduce_kernel)
_ordered_reduce = V.Launcher(splitk_ordered_reduce_kernel)


def _rest(flags: dict) -> dict:
    return {k: flags[k] for k in ("HAS_BETA", "ALPHA_ONE", "UPCAST")}


def applicable(a, b, c, precision, alpha=1.0, beta=0.0) -> bool:
    """Any strides, 2-D or 3-D (B 2-D is broadcast over the batch), float inputs of one dtype.
    Worth it for few output tiles; the dispatcher decides that by timing or heuristics."""
    if a.dim() not in (2, 3) or b.dim() not in (2, 3) or c.dim() != a.dim():
        return False
    if 0 in a.shape or 0 in b.shape:
        return False
    if b.dim() == 3 and a.dim() == 2:
        return False
    if a.dtype != b.dtype or c.dtype != a.dtype:
        return False
    if str(a.dtype) not in ("torch.float16", "torch.bfloat16", "torch.float32"):
        return False
    if (str(a.dtype) == "torch.float32") == (kind_of(precision) == "16bit"):
        return False
    return V.emulating() or (a.is_cuda and b.is_cuda and c.is_cuda)


def launch(a, b, c, *, precision, alpha=1.0, beta=0.0, config=None) -> None:
    import torch
    a3 = a if a.dim() == 3 else a.unsqueeze(0)
    c3 = c if c.dim() == 3 else c.unsqueeze(0)
    b3 = b if b.dim() == 3 else b.unsqueeze(0)
    B, M, K = a3.shape
    N = b3.shape[-1]
    kind = kind_of(precision)
    meta, warps, stages = V.split_meta(config or heuristic(M, N, K, kind))
    ordered = bool(meta.get("ORDERED"))
    sms = num_sms(index_of(c))
    S, k_per = splits_for(M, N, K, B, meta, sms)
    kmeta = {k: meta[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")}
    kmeta["SWAP"] = meta.get("SWAP", 0)
    s_bb = b3.stride(0) if b3.shape[0] > 1 else 0
    single = ordered and B == 1          # (the module's docstring: batch strides 0, the kernels alike for every M)
    s_ab = 0 if single else a3.stride(0)
    s_cb = 0 if single else c3.stride(0)
    flags = dict(PRECISION=tl_precision(precision), HAS_BETA=beta != 0.0, ALPHA_ONE=alpha == 1.0,
                 UPCAST=V.emulating() and a.dtype == torch.bfloat16)
    grid = (cdiv(M, kmeta["BLOCK_M"]) * cdiv(N, kmeta["BLOCK_N"]), B, S)
    if S == 1:
        _last["kernel"] = _main(grid, (a3, b3, c3, M, N, K, k_per, s_ab, a3.stride(1), a3.stride(2),
                                       s_bb, b3.stride(1), b3.stride(2), 0, s_cb, c3.stride(1), c3.stride(2),
                                       float(alpha), float(beta)), {**kmeta, "PRECISION": flags["PRECISION"],
                                       "PARTIAL": False, **_rest(flags)}, warps, stages)
    else:
        if ordered:      # the split stride a multiple of 16 elements, whatever M
            span = cdiv(B * M * N, 16) * 16
            ws = torch.empty(S * span, device=c.device, dtype=torch.float32).as_strided(
                (S, B, M, N), (span, M * N, N, 1))
        else:
            ws = torch.empty((S, B, M, N), device=c.device, dtype=torch.float32)
        s_wb = 0 if single else ws.stride(1)
        _last["kernel"] = _main(grid, (a3, b3, ws, M, N, K, k_per, s_ab, a3.stride(1), a3.stride(2),
                                       s_bb, b3.stride(1), b3.stride(2), ws.stride(0), s_wb, ws.stride(2),
                                       ws.stride(3), 1.0, 0.0), {**kmeta, "PRECISION": flags["PRECISION"],
                                       "PARTIAL": True, **_rest(dict(flags, HAS_BETA=False, ALPHA_ONE=True))},
                                warps, stages)
        # elements a program: enough programs to fill the SMs (a reduce of 127 x 127 had 16 programs of 1024,
        # each waiting on its S loads: 7.3 us of a 33 us call on the H100), 128 to 1024
        block = 64 if V.emulating() else min(1024, max(128, triton.next_power_of_2(cdiv(M * N * B, sms))))
        rgrid = (cdiv(M * N, block), B)
        (_ordered_reduce if ordered else _reduce)(
            rgrid, (ws, c3, M * N, N, S, ws.stride(0), s_wb, s_cb, c3.stride(1), c3.stride(2), float(alpha),
                    float(beta)), {"BLOCK": block, "HAS_BETA": beta != 0.0, "ALPHA_ONE": alpha == 1.0, "CHUNK": 4},
            4, 1)
    V.mark_written(c)
