"""Variant 'gluon-ws': a warp-specialised Hopper GEMM written in Gluon (issue 24, step 1).

Gluon is Triton's lower-level language (``triton.experimental.gluon``): the kernel says
itself what Triton's ``tl`` compiler decides, following Triton's Gluon tutorials
(05-wgmma, 07-persistence, 08-warp-specialization):

* persistent: one program per SM walks the output tiles in grouped (L2-swizzled) order;
* warp specialisation: a 1-warp *loader* partition issues TMA loads into a STAGES-deep
  shared-memory ring; the default partition (4 or 8 warps = 1 or 2 consumer warpgroups)
  waits on each stage's ``ready`` mbarrier, issues ``warpgroup_mma`` asynchronously, keeps
  one wgmma in flight and hands the stage back on its ``empty`` mbarrier. The loader runs
  ahead into the next tile while the consumers run the epilogue. The loader asks for
  LOADER_REGS registers (``setmaxnreg``), leaving the rest to the consumers;
* epilogue: ``alpha * acc (+ beta * C)``, written through shared memory and a TMA store
  whose completion is awaited only before the next tile's store (overlapped with its main
  loop); EPI_SPLIT=2 stores the tile in two halves through a half-size staging buffer, which
  frees room for a 4th stage. With beta != 0, C is read with ordinary loads in the epilogue
  (exposed, not ahead; the 128x256 tile spills registers there);
* split-K in one kernel (config SPLIT_K): SPLIT_K adjacent work units per tile; each leaves an
  fp32 partial in a workspace and counts itself in on the tile's counter; the last to arrive adds
  the others, runs the epilogue and resets the counter (so the counters stay zero between
  launches: launches sharing them must not run concurrently, i.e. one stream);
* operands in the layout they have: a transposed A or B (unit stride along M or N) is
  described by a TMA descriptor of its transpose and fed to wgmma through a permuted
  shared-memory view -- no copy. Ragged edges are the copy engine's: out-of-bounds loads
  read zeros, out-of-bounds stores are dropped.

tf32 (float32 operands) needs both operands K-major (a wgmma rule): A row-major, B
column-major; other float32 layouts are not applicable here (no per-call copy).
2-D only. Not done here (issue 24's later steps): stream-K, swap-AB, C read ahead, ping-pong
consumers. Host cost: ``launch`` goes through Gluon's JIT launcher and builds three descriptors
per call (about 95-150 us of host time a call on the GPU image, against torch's 12 us):
eager calls need a cached fast path before small products can win. In the dispatcher it is
``variants.GLUON`` (unbound: that host time is its floor in the no-timing model, whose view of its
speed is ``heuristics.gluon_speed``; its candidate config is ``heuristic``'s).

The module imports only torch and triton, so it runs standalone (scripts/bench_gluon.py).
"""
from __future__ import annotations

import functools
import os

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

NAME = "gluon-ws"
LOADER_REGS = 40          # registers per thread of the loader warp (setmaxnreg)
SMEM_LIMIT = 232448 - 2048  # the H100's opt-in shared memory per block, less barriers/slack
# the TMA copies' names: async_load/async_store from Triton 3.7 on, the older names in 3.6 (the GPU image)
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
_cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier     # 3.6's name, later gl.barrier
_DTYPES = {"torch.bfloat16": "16bit", "torch.float16": "16bit", "torch.float32": "tf32"}


def cdiv(x: int, y: int) -> int:
    return -(-x // y)


# -- device code ---------------------------------------------------------------------------------

@gluon.constexpr_function
def _acc_layout(dtype, BN, num_warps):
    """wgmma accumulator layout: warpgroups stacked along M (64 rows each for 8 warps),
    one instruction per warpgroup and K-step (n = BN <= 256, k = 32 bytes of operand)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                     instr_shape=[16, BN, 256 // dtype.primitive_bitwidth])


@gluon.jit
def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    per_group = GROUP_M * num_pid_n
    group = tile // per_group
    first_m = group * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % per_group) % rows
    pid_n = (tile % per_group) // rows
    return pid_m, pid_n


@gluon.jit
def _unit(unit, num_pid_m, num_pid_n, k_tiles, GROUP_M: gl.constexpr, SPLIT_K: gl.constexpr):
    """Work unit -> (tile, pid_m, pid_n, first K-step, end K-step): SPLIT_K units per tile, adjacent."""
    tile = unit // SPLIT_K
    k_per = gl.cdiv(k_tiles, SPLIT_K)
    k_lo = (unit % SPLIT_K) * k_per
    k_hi = min(k_lo + k_per, k_tiles)
    pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
    return tile, pid_m, pid_n, k_lo, k_hi


@gluon.jit
def _loader(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K,
            BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
            A_T: gl.constexpr, B_T: gl.constexpr, GROUP_M: gl.constexpr, NUM_SMS: gl.constexpr,
            SPLIT_K: gl.constexpr):
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    it = 0
    for unit in range(gl.program_id(0), num_pid_m * num_pid_n * SPLIT_K, NUM_SMS):
        tile, pid_m, pid_n, k_lo, k_hi = _unit(unit, num_pid_m, num_pid_n, k_tiles, GROUP_M, SPLIT_K)
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
                _tma_load(a_desc, [k, off_m], bar, a_bufs.index(s))
            else:
                _tma_load(a_desc, [off_m, k], bar, a_bufs.index(s))
            if B_T:
                _tma_load(b_desc, [off_n, k], bar, b_bufs.index(s))
            else:
                _tma_load(b_desc, [k, off_n], bar, b_bufs.index(s))
            it += 1


@gluon.jit
def _epilogue(out, c_desc, c_smem, c_ptr, stride_cm, off_m, off_n, M, N, alpha, beta, layout: gl.constexpr,
              BM: gl.constexpr, BN: gl.constexpr, HAS_BETA: gl.constexpr, ALPHA_ONE: gl.constexpr,
              EPI_SPLIT: gl.constexpr):
    """alpha * out (+ beta * C), through c_smem and a TMA store left in flight."""
    if not ALPHA_ONE:
        out = out * alpha
    if HAS_BETA:
        offs_m = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
        offs_n = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        old = gl.load(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], mask=mask, other=0.0)
        out = out + beta * old.to(gl.float32)
    if EPI_SPLIT == 1:
        tma.store_wait(pendings=0)      # the previous tile's store has read c_smem
        c_smem.store(out.to(c_desc.dtype))
        fence_async_shared()
        _tma_store(c_desc, [off_m, off_n], c_smem)
    else:   # two halves along N through a half-size staging tile
        halves = out.reshape([BM, 2, BN // 2]).permute(0, 2, 1).split()
        for h in gl.static_range(2):
            tma.store_wait(pendings=0)
            c_smem.store(halves[h].to(c_desc.dtype))
            fence_async_shared()
            _tma_store(c_desc, [off_m, off_n + h * (BN // 2)], c_smem)


@gluon.jit
def _consumer(c_desc, a_bufs, b_bufs, c_smem, ready, empty, c_ptr, stride_cm, ws_ptr, cnt_ptr, M, N, K, alpha, beta,
              BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
              A_T: gl.constexpr, B_T: gl.constexpr, GROUP_M: gl.constexpr, NUM_SMS: gl.constexpr,
              HAS_BETA: gl.constexpr, ALPHA_ONE: gl.constexpr, EPI_SPLIT: gl.constexpr, SPLIT_K: gl.constexpr,
              NUM_WARPS: gl.constexpr):
    layout: gl.constexpr = _acc_layout(a_bufs.dtype, BN, NUM_WARPS)
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    it = 0
    for unit in range(gl.program_id(0), num_pid_m * num_pid_n * SPLIT_K, NUM_SMS):
        tile, pid_m, pid_n, k_lo, k_hi = _unit(unit, num_pid_m, num_pid_n, k_tiles, GROUP_M, SPLIT_K)
        acc = gl.zeros((BM, BN), dtype=gl.float32, layout=layout)
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

        if SPLIT_K == 1:
            _epilogue(acc, c_desc, c_smem, c_ptr, stride_cm, pid_m * BM, pid_n * BN, M, N, alpha, beta, layout,
                      BM, BN, HAS_BETA, ALPHA_ONE, EPI_SPLIT)
        else:
            # split-K in one kernel: every unit leaves its fp32 partial in the workspace and counts
            # itself in on the tile's counter; the last to arrive adds the others' partials, resets
            # the counter for the next launch and runs the epilogue
            rows = gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
            cols = gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
            offs = rows[:, None] * BN + cols[None, :]
            gl.store(ws_ptr + unit.to(gl.int64) * (BM * BN) + offs, acc)
            _cta_barrier()
            arrived = gl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
            if arrived == SPLIT_K - 1:
                for j in gl.static_range(SPLIT_K):
                    other = tile * SPLIT_K + j
                    if other != unit:
                        acc += gl.load(ws_ptr + other.to(gl.int64) * (BM * BN) + offs, cache_modifier=".cg")
                gl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")
                _epilogue(acc, c_desc, c_smem, c_ptr, stride_cm, pid_m * BM, pid_n * BN, M, N, alpha, beta,
                          layout, BM, BN, HAS_BETA, ALPHA_ONE, EPI_SPLIT)
    tma.store_wait(pendings=0)


@gluon.jit
def gluon_ws_kernel(a_desc, b_desc, c_desc, c_ptr, stride_cm, ws_ptr, cnt_ptr, M, N, K, alpha, beta,
                    STAGES: gl.constexpr, A_T: gl.constexpr, B_T: gl.constexpr, GROUP_M: gl.constexpr,
                    NUM_SMS: gl.constexpr, HAS_BETA: gl.constexpr, ALPHA_ONE: gl.constexpr,
                    EPI_SPLIT: gl.constexpr, SPLIT_K: gl.constexpr, LOADER_REGS: gl.constexpr,
                    num_warps: gl.constexpr):
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1] * EPI_SPLIT
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
        (_consumer, (c_desc, a_bufs, b_bufs, c_smem, ready, empty, c_ptr, stride_cm, ws_ptr, cnt_ptr,
                     M, N, K, alpha, beta, BM, BN, BK, STAGES, A_T, B_T, GROUP_M, NUM_SMS,
                     HAS_BETA, ALPHA_ONE, EPI_SPLIT, SPLIT_K, num_warps)),
        (_loader, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K,
                   BM, BN, BK, STAGES, A_T, B_T, GROUP_M, NUM_SMS, SPLIT_K)),
    ], [1], [LOADER_REGS])

    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))


# -- host side -----------------------------------------------------------------------------------

def _c(bm, bn, bk, warps, stages, group=8, epi=1, split=1) -> dict:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group, "EPI_SPLIT": epi, "SPLIT_K": split,
            "num_warps": warps, "num_stages": stages}


# 16-bit: 128x256 with two consumer warpgroups (the tutorials' best Hopper tile; EPI_SPLIT=2 halves
# the output staging so a 4th stage fits), 64-row tiles with one warpgroup for few rows, smaller
# tiles for products with few tiles. tf32: 4-byte operands, half the K per stage; split-K (SPLIT_K
# units per tile, fixed up in the kernel) only where it won on the H100 (tf32, one row of tiles):
# in 16-bit it lost to the best unsplit tile on every shape measured (docs/measurements/session7_gluon_kernel_h100.log).
CONFIGS = {
    "16bit": [_c(128, 256, 64, 8, 4, group=16, epi=2), _c(128, 256, 64, 8, 3), _c(128, 128, 64, 8, 4),
              _c(64, 256, 64, 4, 4), _c(64, 128, 64, 4, 6), _c(64, 64, 64, 4, 8)],
    "tf32": [_c(128, 128, 32, 8, 4), _c(64, 128, 32, 4, 6), _c(128, 256, 32, 8, 3, epi=2),
             _c(64, 128, 32, 4, 6, split=2)],
}
# TFLOP/s of each tile on large square products (H100, scripts/bench_gluon.py): the no-timing
# pick's model of a full wave; SPLIT_COST: a split unit's extra time (partial out, fix-up in),
# split only where the units fit in one wave
RATE = {(128, 256, 2): 720, (128, 256, 1): 704, (128, 128, 1): 652, (64, 256, 1): 638,
        (64, 128, 1): 543, (64, 64, 1): 400}
RATE_TF32 = {(128, 128, 1): 315, (64, 128, 1): 266, (128, 256, 2): 355}
SPLIT_COST = 1.6


def smem_bytes(config: dict, esize: int, out_esize: int) -> int:
    """Shared memory of one program: the operand ring and the output staging tile."""
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    return config["num_stages"] * (bm + bn) * bk * esize + bm * bn * out_esize // config.get("EPI_SPLIT", 1)


def heuristic(M: int, N: int, K: int, kind: str, sms: int = 132, out_esize: int = 2) -> dict:
    """The config a no-timing pick takes. Model: waves of tiles over the SMs, each wave as long as
    one tile at its measured rate (RATE); among configs within 10% of the best modelled time the
    largest tile wins (it moves fewer bytes per flop, which the model leaves out). Configs over
    SMEM_LIMIT are skipped, split-K ones unless all their units fit in one wave with >= 4 K-steps each."""
    esize = 2 if kind == "16bit" else 4
    rates = RATE if kind == "16bit" else RATE_TF32
    timed = []
    for cfg in CONFIGS[kind]:
        split = cfg["SPLIT_K"]
        bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
        units = cdiv(M, bm) * cdiv(N, bn) * split
        if smem_bytes(cfg, esize, out_esize) > SMEM_LIMIT or \
                (split > 1 and (cdiv(K, cfg["BLOCK_K"]) < 4 * split or units > sms)):
            continue
        waves = cdiv(units, sms)
        cost = SPLIT_COST if split > 1 else 1.0
        timed.append((waves * bm * bn / split * cost / rates[(bm, bn, cfg["EPI_SPLIT"])], cfg))
    fastest = min(t for t, _ in timed)
    near = [(cfg["BLOCK_M"] * cfg["BLOCK_N"], -cfg["SPLIT_K"], -t, cfg) for t, cfg in timed if t <= 1.1 * fastest]
    return dict(max(near, key=lambda x: x[:3])[3])


def _order(t):
    """'n' (unit stride along the last dim), 't' (along the first) or None (neither)."""
    if t.stride(1) == 1 and (t.shape[0] == 1 or t.stride(0) >= t.shape[1]):
        return "n"
    if t.stride(0) == 1 and (t.shape[1] == 1 or t.stride(1) >= t.shape[0]):
        return "t"
    return None


def why_not(a, b, c, precision, alpha=1.0, beta=0.0) -> str | None:
    """None if the kernel can run this product, else the reason (one line)."""
    if a.dim() != 2 or b.dim() != 2 or c.dim() != 2:
        return f"2-D only (a {tuple(a.shape)}, b {tuple(b.shape)})"
    kind = _DTYPES.get(str(a.dtype))
    if kind is None or a.dtype != b.dtype:
        return f"dtypes {a.dtype}, {b.dtype}: bf16, fp16 or float32 (tf32) operands only"
    if kind == "tf32" and precision != "tf32":
        return f"float32 operands with precision {precision!r}: only tf32 runs on wgmma"
    if str(c.dtype) not in ("torch.bfloat16", "torch.float16", "torch.float32"):
        return f"output dtype {c.dtype}"
    if min(a.shape[0], a.shape[1], b.shape[1]) == 0:
        return "empty product"
    oa, ob = _order(a), _order(b)
    if oa is None or ob is None or c.stride(1) != 1:
        return f"strides a {a.stride()}, b {b.stride()}, c {c.stride()}: one unit stride per operand, c row-major"
    if kind == "tf32" and (oa != "n" or ob != "t"):
        return "tf32 wgmma reads both operands K-major: A row-major and B column-major only"
    for t, o in ((a, oa), (b, ob), (c, "n")):
        lead = t.stride(0) if o == "n" else t.stride(1)
        if t.data_ptr() % 16 or (lead * t.element_size()) % 16:
            return f"TMA needs 16-byte aligned bases and row strides (shape {tuple(t.shape)}, strides {t.stride()})"
    if os.environ.get("TRITON_INTERPRET", "") == "1":
        return "Gluon kernels do not run in Triton's interpreter"
    if not _is_hopper():
        return "needs a Hopper GPU (sm_90)"
    return None


def applicable(a, b, c, precision, alpha=1.0, beta=0.0) -> bool:
    return why_not(a, b, c, precision, alpha, beta) is None


@functools.lru_cache(maxsize=None)
def _is_hopper() -> bool:
    import torch
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@functools.lru_cache(maxsize=None)
def _num_sms() -> int:
    import torch
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


_GL = {"torch.bfloat16": gl.bfloat16, "torch.float16": gl.float16, "torch.float32": gl.float32}


def descriptor_plan(a, b, c, config: dict, num_sms: int = 132) -> dict:
    """What the launch builds (no GPU needed): the tensors the descriptors cover, their block
    shapes, the transposition flags, the grid and the split-K scratch sizes (elements). A
    transposed operand is described by its transpose (a contiguous view: no copy)."""
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    a_t, b_t = _order(a) == "t", _order(b) == "t"
    M, N = a.shape[0], b.shape[1]
    tiles = cdiv(M, bm) * cdiv(N, bn)
    split = config.get("SPLIT_K", 1)
    return {
        "a": (a.t() if a_t else a, [bk, bm] if a_t else [bm, bk]),
        "b": (b.t() if b_t else b, [bn, bk] if b_t else [bk, bn]),
        "c": (c, [bm, bn // config.get("EPI_SPLIT", 1)]),
        "A_T": a_t, "B_T": b_t, "tiles": tiles, "split": split,
        "grid": min(num_sms, tiles * split),
        # split-K: one fp32 partial tile per unit, one arrival counter per tile
        "workspace": tiles * split * bm * bn if split > 1 else 0, "counters": tiles if split > 1 else 0,
    }


def _descriptor(t, block):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    layout = gl.NVMMASharedLayout.get_default_for(block, _GL[str(t.dtype)])
    return TensorDescriptor.from_tensor(t, block, layout)


_COUNTERS: dict = {}    # device -> int32 arrival counters (zero between launches: the last arrival resets)


def _scratch(plan, device):
    """(fp32 workspace, int32 counters) of a split-K launch; 1-element stand-ins otherwise."""
    import torch
    n = max(plan["counters"], 1)
    cnt = _COUNTERS.get(device)
    if cnt is None or cnt.numel() < n:
        cnt = _COUNTERS[device] = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
    return torch.empty(max(plan["workspace"], 1), dtype=torch.float32, device=device), cnt


def launch(a, b, c, *, precision, alpha=1.0, beta=0.0, config=None) -> None:
    """Enqueue c = alpha * a @ b + beta * c on torch's current stream (no host sync). A partial
    ``config`` is completed from ``heuristic``'s."""
    M, K = a.shape
    N = b.shape[1]
    sms = _num_sms()
    if not config or not set(_c(0, 0, 0, 0, 0)) <= set(config):
        config = {**heuristic(M, N, K, _DTYPES[str(a.dtype)], sms, c.element_size()), **(config or {})}
    plan = descriptor_plan(a, b, c, config, sms)
    ws, cnt = _scratch(plan, c.device)
    gluon_ws_kernel[(plan["grid"],)](
        _descriptor(*plan["a"]), _descriptor(*plan["b"]), _descriptor(*plan["c"]), c, c.stride(0), ws, cnt,
        M, N, K, float(alpha), float(beta),
        STAGES=config["num_stages"], A_T=plan["A_T"], B_T=plan["B_T"], GROUP_M=config["GROUP_M"],
        NUM_SMS=sms, HAS_BETA=beta != 0.0, ALPHA_ONE=alpha == 1.0, EPI_SPLIT=config.get("EPI_SPLIT", 1),
        SPLIT_K=plan["split"], LOADER_REGS=LOADER_REGS, num_warps=config["num_warps"])
