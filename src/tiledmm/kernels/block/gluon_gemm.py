"""Variant 'gluon-ws': a warp-specialised Hopper GEMM written in Gluon, host side.

Gluon is Triton's lower-level language (``triton.experimental.gluon``): the kernel says
itself what Triton's ``tl`` compiler decides, following Triton's Gluon tutorials
(05-wgmma, 07-persistence, 08-warp-specialization). The device code is in ``gluon_kernel.py``,
imported on the first launch (importing Gluon costs ~0.12 s); everything the dispatcher needs
without launching -- NAME, CONFIGS, RATE, heuristic, why_not, applicable, smem_bytes,
descriptor_plan -- is here and imports no Gluon.

* persistent: one program per SM walks the output tiles in grouped (L2-swizzled) order;
* warp specialisation: a 1-warp *loader* partition issues TMA loads into a STAGES-deep
  shared-memory ring; the default partition (4 or 8 warps = 1 or 2 consumer warpgroups)
  waits on each stage's ``ready`` mbarrier, issues ``warpgroup_mma`` asynchronously, keeps
  one wgmma in flight and hands the stage back on its ``empty`` mbarrier. The loader runs
  ahead into the next tile while the consumers run the epilogue. The loader asks for
  LOADER_REGS registers (``setmaxnreg``), leaving the rest to the consumers;
* fused epilogue: ``act(alpha * acc + beta * C + bias)`` in fp32 (``bias_mode`` 1: one value per
  column, 2: one per row, a 1-D tensor of C's dtype or float32 read with masked loads; ``act``
  "none", "relu", "gelu", "gelu_tanh", "silu" with ``kernels._activation``'s formulas), written
  through shared memory and a TMA store whose completion is awaited only before the next tile's
  store (overlapped with its main loop); EPI_SPLIT=2 stores the tile in two halves through a
  half-size staging buffer, which frees room for a 4th stage. With beta != 0, C is read with
  ordinary loads in the epilogue (exposed, not ahead; the 128x256 tile spills registers there);
* split-K in one kernel (config SPLIT_K): SPLIT_K adjacent work units per tile; each leaves an
  fp32 partial in a workspace and counts itself in on the tile's counter; the last to arrive adds
  the others, runs the epilogue and resets the counter (so the counters stay zero between
  launches; they are kept per device and stream, so launches on two streams never share them, and so
  is the workspace: ``_workspace``, no allocation a call);
* the tail split (config TAIL): the tiles of whole waves run whole; each tile of the last, partial
  wave is split along K (``tail_plan``), and once its units have all arrived each adds up and
  stores its own share of the tile's rows; a launch with nothing to split runs the plain build;
* operands in the layout they have: a transposed A or B (unit stride along M or N) is
  described by a TMA descriptor of its transpose and fed to wgmma through a permuted
  shared-memory view -- no copy. Ragged edges are the copy engine's: out-of-bounds loads
  read zeros, out-of-bounds stores are dropped;
* tiles whose width is not a power of two (config PARTS): register tensors must have
  power-of-two shapes, so a 128x192 tile is three accumulators of 128x64, one wgmma each per
  K-step on B's three 64-column slices (three TMA loads into three buffers of a stage), stored
  one slice after another (64x192 likewise, one consumer warpgroup). They fill waves that the
  power-of-two tiles leave part empty (256 x 11008: 116 tiles of 128x192 where 128x256 has 86, on
  132 SMs) -- cuBLAS's own choice there is a 192-wide tile. 16-bit only, never split.

tf32 (float32 operands): wgmma reads 32-bit operands from shared memory only K-major, but its
first operand may come from registers in any layout. A row-major and B column-major: both from
shared memory; A column-major: A loaded into registers; B row-major (``x @ W`` with W as stored):
the tile is computed transposed, C^T = B^T A^T, B^T loaded into registers. No per-call copy.
A column-major with B row-major is not applicable (both would have to come from registers).

Batched products (a, b, c of 3-D, batch 1 broadcasting): one launch over all products' tiles. Each
operand's matrices are stacked along its rows in one 2-D descriptor (product p's rows start at p x
its rows; a 2-D or broadcast operand: at 0), which needs each operand's batch stride to be one
matrix (``_stacked``) and every tile to stay inside its product: M a multiple of BLOCK_M and K of
BLOCK_K (a stacked tile past the end would read the next product's rows, not zeros); a bias (per
column or per row) is every product's. Not done here: stream-K, swap-AB,
C read ahead, ping-pong consumers.

Host cost of a call: the first call of each specialisation (config, dtypes, epilogue flags,
layout) goes through Gluon's launcher (``kernel[grid](...)``: ~100-150 us, it compiles on first
use) and remembers the CompiledKernel; later calls call its C launch directly
(``_adapter.tensordesc_launch``) with the descriptors' tensor maps kept per (pointer, shape,
strides) in a bounded cache: 12-24 us of host time a call on the H100 (torch.matmul: 13-21 us;
docs/history.md). M, N and K are not specialised, so one compiled kernel serves
every size. Where the adapter declines (another Triton, a failed self-test), every call takes
Gluon's launcher (one warning).
"""
from __future__ import annotations

import functools
import os
import threading
import warnings

from ... import _adapter, _device
from ..._arrays import TiledmmError
from .fastlaunch import current_stream, keep

NAME = "gluon-ws"
LOADER_REGS = 40          # registers per thread of the loader warp (setmaxnreg)
SMEM_LIMIT = 232448 - 2048  # every Hopper GPU's opt-in shared memory per block, less barriers/slack (the model's
                            # default; launches pass their device's, ``_smem``)
_DTYPES = {"torch.bfloat16": "16bit", "torch.float16": "16bit", "torch.float32": "tf32"}
ACTS = ("none", "relu", "gelu", "gelu_tanh", "silu")


def cdiv(x: int, y: int) -> int:
    return -(-x // y)


def _c(bm, bn, bk, warps, stages, group=8, epi=1, split=1, tail=0, parts=1) -> dict:
    """A config; ``parts`` > 1 (the tile's columns in that many accumulators) is named only where it is not 1,
    so configs written before it (the shipped table's, the store's) read as they were."""
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group, "EPI_SPLIT": epi, "SPLIT_K": split,
            "TAIL": tail, "num_warps": warps, "num_stages": stages, **({"PARTS": parts} if parts != 1 else {})}


def parts(config: dict) -> int:
    return config.get("PARTS", 1)


def check_parts(config: dict, kind: str) -> None:
    """A PARTS config the kernel can build: 16-bit, unsplit, BLOCK_N in PARTS (= 3) power-of-two slices."""
    p = parts(config)
    if p == 1:
        return
    bnp = config["BLOCK_N"] // p
    if p != 3 or bnp * p != config["BLOCK_N"] or bnp & (bnp - 1) or bnp < 16 or kind != "16bit" or \
            config.get("SPLIT_K", 1) != 1 or config.get("TAIL", 0) or config.get("EPI_SPLIT", 1) != 1:
        raise TiledmmError(f"gluon-ws: config {config} cannot be built: PARTS=3 takes a BLOCK_N of three "
                           "power-of-two slices, 16-bit operands, SPLIT_K=1, TAIL=0 and EPI_SPLIT=1")


MAX_TAIL_SPLIT = 8      # gluon_kernel.TAIL_CHUNKS: a tail tile's rows are shared out in 8 chunks


def tail_plan(tiles: int, k_steps: int, sms: int) -> tuple[int, int]:
    """(tail_at, tail_split) of a TAIL config's launch: the tiles of whole waves (the first ``tail_at``)
    run whole; those of the last, partial wave are split ``tail_split`` ways along K, as many as keep
    all their units in one round of the persistent grid (a power of two <= MAX_TAIL_SPLIT, each unit
    >= 2 K-steps). (tiles, 1) -- nothing split -- where the waves are whole or no split fits."""
    rem = tiles % sms
    if rem == 0:
        return tiles, 1
    split = MAX_TAIL_SPLIT
    while split > 1 and (rem * split > sms or k_steps < 2 * split):
        split //= 2
    return (tiles - rem, split) if split > 1 else (tiles, 1)


def _units(tiles: int, k_steps: int, sms: int, split: int, tail: int) -> tuple[int, int, int]:
    """(tail_at, tail_split, work units) of a launch: SPLIT_K units a tile, or TAIL's split of the last wave."""
    tail_at, tail_split = tail_plan(tiles, k_steps, sms) if tail else (tiles, 1)
    return tail_at, tail_split, (tail_at + (tiles - tail_at) * tail_split if tail_split > 1 else tiles * split)


# 16-bit: 128x256 with two consumer warpgroups (the tutorials' best Hopper tile; EPI_SPLIT=2 halves
# the output staging so a 4th stage fits), 64-row tiles with one warpgroup for few rows, smaller
# tiles for products with few tiles. tf32: 4-byte operands, half the K per stage; split-K (SPLIT_K
# units per tile, fixed up in the kernel) only where it won on the H100 (tf32, one row of tiles):
# in 16-bit it lost to the best unsplit tile on every shape measured (docs/history.md).
# 16-bit 128x128 keeps 5 stages in flight: 3-10 % faster than 4 on products of many K-steps per tile
# (256x13824x5120 81 -> 75 us, 256x5120^2 34 -> 31), 4 % at 4096^3-8192^3 (docs/history.md);
# it splits a partial last wave too (TAIL): 576-640 x 4096^2 bf16, 160 tiles, GPU 42.5 -> 38.7-39.8 us (the model's
# pick moves there from 128x256's one partial wave; docs/history.md).
CONFIGS = {
    "16bit": [_c(128, 256, 64, 8, 4, group=16, epi=2, tail=1), _c(128, 256, 64, 8, 3), _c(128, 128, 64, 8, 5, tail=1),
              _c(64, 256, 64, 4, 4), _c(64, 128, 64, 4, 6), _c(64, 64, 64, 4, 8), _c(128, 192, 64, 8, 5, parts=3),
              _c(64, 192, 64, 4, 6, parts=3)],
    "tf32": [_c(128, 128, 32, 8, 4), _c(64, 128, 32, 4, 6), _c(128, 256, 32, 8, 3, epi=2),
             _c(64, 128, 32, 4, 6, split=2), _c(256, 128, 32, 8, 3, epi=2)],
}
# TFLOP/s of each tile on large square products (H100, each config timed alone; 128x128 at 5 stages: a
# sweep at 4096^3 and 8192^3): the no-timing pick's model of a full wave; SPLIT_COST: a split unit's extra
# time (partial out, fix-up in), split only where the units fit in one wave
RATE = {(128, 256, 2): 720, (128, 256, 1): 704, (128, 128, 1): 660, (64, 256, 1): 638,
        (64, 128, 1): 543, (64, 64, 1): 400, (128, 192, 1): 670, (64, 192, 1): 540}
# 128x192 (PARTS = 3): 678 TFLOP/s at 768 x 4096^2 (132 tiles, one whole wave), ~670 from 4096^3 and 8192^3 over
# their waves' fill (docs/history.md). 64x192: 465 (384 x 4096^2, one whole wave) to 680 (256 x 13824
# x 5120, K long) -- 540 puts it where it measured best (257-384 x 4096^2, 256 x 5120 x 5120 and x 13824;
# docs/history.md)
RATE_TF32 = {(128, 128, 1): 315, (64, 128, 1): 266, (128, 256, 2): 355}
# tf32 with an operand in registers (a row-major B, or an M-major A): the rates of B row-major at
# 4096^3-8192^3 (each config timed alone, H100); 256x128 only here, where wgmma's n is BLOCK_M = 256
RATE_TF32_REG = {(256, 128, 2): 355, (128, 256, 2): 297, (128, 128, 1): 308, (64, 128, 1): 212}
SPLIT_COST = 1.6
# configs modelled within this factor of the fastest count as a tie, which the largest tile wins (fewer bytes per
# flop, which the model leaves out). Not 1.10: with it 512x4096x11008 16-bit took 128x256 (modelled 7 %
# slower than 128x128 at 5 stages) at 84-91 us against 128x128's 79-80 (docs/history.md)
NEAR = 1.05
# TAIL (the last partial wave's tiles split along K, tail_plan): that round costs about TAIL_ROUND + 1/split
# of a tile's round (H100, 16-bit 128x256, docs/history.md: 0.43 at split 8, 0.64 at 4, 0.65
# at 2). A launch with nothing to split runs the plain kernel (TAIL = 0): the TAIL build measured 3-6 %
# slower there.
TAIL_ROUND = 0.25


def smem_bytes(config: dict, esize: int, out_esize: int) -> int:
    """Shared memory of one program: the operand ring and the output staging tile."""
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    return config["num_stages"] * (bm + bn) * bk * esize + bm * bn * out_esize // (config.get("EPI_SPLIT", 1) *
                                                                                    parts(config))


def heuristic(M: int, N: int, K: int, kind: str, sms: int = 132, out_esize: int = 2, reg: bool = False,
              batch: int = 1, smem: int = SMEM_LIMIT) -> dict:
    """The config a no-timing pick takes. Model: waves of tiles over the SMs, each wave as long as
    one tile at its measured rate (RATE; tf32 with an operand in registers, ``reg``: RATE_TF32_REG);
    among configs within NEAR (5 %) of the best modelled time the largest tile wins (it moves fewer bytes
    per flop, which the model leaves out). Configs without a measured rate or over ``smem`` bytes are
    skipped, split-K ones unless all their units fit in one wave with >= 4 K-steps each; for a batch
    (``batch`` products), those whose tiles would cross from one product into the next (``batch_fits``)."""
    esize = 2 if kind == "16bit" else 4
    rates = RATE if kind == "16bit" else (RATE_TF32_REG if reg else RATE_TF32)
    timed = []
    for cfg in CONFIGS[kind]:
        split = cfg["SPLIT_K"]
        bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
        units = cdiv(M, bm) * cdiv(N, bn) * split * batch
        if batch > 1 and not batch_fits(cfg, M, K):
            continue
        if (bm, bn, cfg["EPI_SPLIT"]) not in rates or smem_bytes(cfg, esize, out_esize) > smem or \
                (split > 1 and (cdiv(K, cfg["BLOCK_K"]) < 4 * split or units > sms)):
            continue
        tile = bm * bn / rates[(bm, bn, cfg["EPI_SPLIT"])]
        tail_at, tail_split = tail_plan(units, cdiv(K, cfg["BLOCK_K"]), sms) if cfg.get("TAIL") else (units, 1)
        if tail_split > 1:
            timed.append(((tail_at // sms + TAIL_ROUND + 1 / tail_split) * tile, cfg))
            continue
        cost = SPLIT_COST if split > 1 else 1.0
        timed.append((cdiv(units, sms) * tile / split * cost, cfg))
    fastest = min(t for t, _ in timed)
    near = [(cfg["BLOCK_M"] * cfg["BLOCK_N"], -cfg["SPLIT_K"], -t, cfg) for t, cfg in timed if t <= NEAR * fastest]
    return dict(max(near, key=lambda x: x[:3])[3])


def _order(t):
    """'n' (unit stride along the last dim), 't' (along the first) or None (neither)."""
    return _order_of(t.shape, t.stride())


def _order_of(shape, st):
    if st[1] == 1 and (shape[0] == 1 or st[0] >= shape[1]):
        return "n"
    if st[0] == 1 and (shape[1] == 1 or st[1] >= shape[0]):
        return "t"
    return None


def _stack(t, rows: int, cols: int, batch: int):
    """One operand of a batch as one 2-D view and the row step between its products in the descriptor
    (``_step``: the view's rows for a row-major matrix, its transpose's for a column-major one; 0: the same
    matrix for every product), or the reason it cannot be (a batch stride that is not one matrix)."""
    if t.dim() == 2:
        return t, 0
    if t.shape[0] == 1 or batch == 1:
        return t[0], 0
    sr, sc = t.stride(1), t.stride(2)
    o = _order_of((rows, cols), (sr, sc))
    step = _step(t.stride(0), o, rows, cols, sr, sc)
    if step is None:
        return (f"a batched operand {tuple(t.shape)} with strides {t.stride()}: one unit stride and a batch "
                f"stride of one matrix"), 0
    if step == 0:
        return t[0], 0
    if o == "n":        # matrices one under another: (batch x rows, cols)
        return t.as_strided((batch * rows, cols), (sr, 1)), step
    return t.as_strided((rows, batch * cols), (1, sc)), step     # their transposes one under another


def _stacked(a, b, c):
    """(batch, M, N, K, (a, b, c) as 2-D stacked views, (a, b, c) row steps) of a 2-D or batched
    product (``_stack``), or the reason it cannot run as one."""
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    if a.dim() == b.dim() == c.dim() == 2:      # one product: the operands as they are
        return 1, M, N, K, (a, b, c), (0, 0, 0)
    batch = c.shape[0] if c.dim() == 3 else 1
    views, steps = [], []
    for t, rows, cols in ((a, M, K), (b, K, N), (c, M, N)):
        v, step = _stack(t, rows, cols, batch)
        if isinstance(v, str):
            return v
        views.append(v)
        steps.append(step)
    if batch > 1 and steps[2] == 0:
        return f"a batched output {tuple(c.shape)} with strides {c.stride()}: row-major, a batch stride of one matrix"
    return batch, M, N, K, tuple(views), tuple(steps)


def batch_fits(config: dict, M: int, K: int) -> bool:
    """A config's tiles stay inside each product of a batch (stacked descriptors: ``_stacked``)."""
    return M % config["BLOCK_M"] == 0 and K % config["BLOCK_K"] == 0


def why_not(a, b, c, precision, alpha=1.0, beta=0.0) -> str | None:
    """None if the kernel can run this product, else the reason (one line)."""
    if a.dim() not in (2, 3) or b.dim() not in (2, 3) or c.dim() != max(a.dim(), b.dim()):
        return f"2-D or batched 3-D only (a {tuple(a.shape)}, b {tuple(b.shape)}, c {tuple(c.shape)})"
    st = _stacked(a, b, c)
    if isinstance(st, str):
        return st
    batch, M, N, K, (a2, b2, c2), _ = st
    kind = _DTYPES.get(str(a.dtype))
    if kind is None or a.dtype != b.dtype:
        return f"dtypes {a.dtype}, {b.dtype}: bf16, fp16 or float32 (tf32) operands only"
    if kind == "tf32" and precision != "tf32":
        return f"float32 operands with precision {precision!r}: only tf32 runs on wgmma"
    if str(c.dtype) not in ("torch.bfloat16", "torch.float16", "torch.float32"):
        return f"output dtype {c.dtype}"
    if min(M, N, K, batch) == 0:
        return "empty product"
    if batch > 1 and not any(batch_fits(cfg, M, K) for cfg in CONFIGS[kind]):
        return (f"a batch of {M}x{K} @ {K}x{N}: each product's M a multiple of 64 and K of "
                f"{min(cfg['BLOCK_K'] for cfg in CONFIGS[kind])} (its tiles stay inside it)")
    a, b, c = a2, b2, c2
    oa, ob = _order(a), _order(b)
    if oa is None or ob is None or c.stride(1) != 1:
        return f"strides a {a.stride()}, b {b.stride()}, c {c.stride()}: one unit stride per operand, c row-major"
    if kind == "tf32" and oa == "t" and ob == "n":
        return ("tf32 with A column-major and B row-major: wgmma reads 32-bit shared-memory operands "
                "K-major and only one operand can come from registers")
    for t, o in ((a, oa), (b, ob), (c, "n")):
        lead = t.stride(0) if o == "n" else t.stride(1)
        if t.data_ptr() % 16 or (lead * t.element_size()) % 16:
            return f"TMA needs 16-byte aligned bases and row strides (shape {tuple(t.shape)}, strides {t.stride()})"
    if os.environ.get("TRITON_INTERPRET", "") == "1":
        return "Gluon kernels do not run in Triton's interpreter"
    if c.get_device() < 0 or not _is_hopper(c.get_device()):
        return "needs a Hopper GPU (sm_90)"
    return None


def applicable(a, b, c, precision, alpha=1.0, beta=0.0) -> bool:
    return why_not(a, b, c, precision, alpha, beta) is None


def descriptor_plan(a, b, c, config: dict, num_sms: int = 132) -> dict:
    """What the launch builds (no GPU needed): the tensors the descriptors cover, their block
    shapes, the transposition flags, the grid, the batch (its size and each descriptor's row step,
    ``_stacked``) and the split-K scratch sizes (elements). A transposed operand is described by its
    transpose (a contiguous view: no copy)."""
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    batch, M, N, K, (a, b, c), steps = _stacked(a, b, c)
    a_t, b_t = _order(a) == "t", _order(b) == "t"
    bnp = bn // parts(config)       # B's block: one of the tile's column slices (PARTS)
    tiles = cdiv(M, bm) * cdiv(N, bn) * batch
    split, epi = config.get("SPLIT_K", 1), config.get("EPI_SPLIT", 1)
    tail_at, tail_split, units = _units(tiles, cdiv(K, bk), num_sms, split, config.get("TAIL", 0))
    tail = {"tail_at": tail_at, "tail_split": tail_split}
    if tail_split > 1:      # TAIL: the last wave's tiles split along K, their partials and counters
        tail.update(grid=min(num_sms, units), workspace=(units - tail_at) * bm * bn, counters=tiles - tail_at)
    return {
        "a": (a.t() if a_t else a, [bk, bm] if a_t else [bm, bk]),
        "b": (b.t() if b_t else b, [bnp, bk] if b_t else [bk, bnp]),
        # EPI_SPLIT = 2: the output staging tile is half the tile, along M where the kernel computes
        # the tile transposed (tf32 with a row-major B), else along N; one column slice of a PARTS tile
        "c": (c, [bm // epi, bn] if operand_mode(a, b) == 2 else [bm, bnp // epi]),
        "A_T": a_t, "B_T": b_t, "tiles": tiles, "split": split, "batch": batch, "steps": steps, "MNK": (M, N, K),
        "grid": min(num_sms, tiles * split),
        # split-K: one fp32 partial tile per unit, one arrival counter per tile
        "workspace": tiles * split * bm * bn if split > 1 else 0, "counters": tiles if split > 1 else 0,
        **tail,
    }


# -- launching ------------------------------------------------------------------------------------

def _num_sms(dev: int | None = None) -> int:
    """SMs the kernel's persistent grid fills on device ``dev`` (None: the current one): ``tiledmm._device``'s,
    after ``TILEDMM_SM_MARGIN``."""
    return _device.num_sms(dev)


def _is_hopper(dev: int | None = None) -> bool:
    return _device.is_hopper(dev)


def _smem(dev: int) -> int:
    """The model's shared-memory bound on device ``dev``: its opt-in limit less the same slack as SMEM_LIMIT."""
    return _device.smem_limit(dev) + _device.SMEM_SLACK - (232448 - SMEM_LIMIT)


_pick = functools.lru_cache(maxsize=4096)(heuristic)    # launch's no-timing pick (a shared dict: read only)
_FULL = frozenset(_c(0, 0, 0, 0, 0))
_kernel_module = None


def _kernel():
    """gluon_kernel (the device code), imported on first use (not for a kernel found in the index)."""
    global _kernel_module
    if _kernel_module is None:
        from . import gluon_kernel
        _kernel_module = gluon_kernel
    return _kernel_module


# gluon_ws_kernel's parameters in order, as compiled (a CPU test holds them to the kernel's signature): the bound
# launch builds its arguments by them, known without importing Gluon
PARAMS = ("a_desc", "b_desc", "c_desc", "c_ptr", "stride_cm", "bias_ptr", "stride_bias", "ws_ptr", "cnt_ptr",
          "M", "N", "K", "batch", "a_step", "b_step", "c_step", "tail_at", "tail_split", "alpha", "beta",
          "STAGES", "A_T", "B_T", "GROUP_M", "NUM_SMS", "HAS_BETA", "ALPHA_ONE", "EPI_SPLIT", "SPLIT_K",
          "TAIL", "PARTS", "LOADER_REGS", "BIAS", "ACT", "num_warps")


@functools.lru_cache(maxsize=None)
def _source_key() -> str:
    """The kernel index's stand-in for ``gluon_ws_kernel.cache_key``: a hash of gluon_kernel.py, the file
    that holds the kernel and every function it calls but Triton's (which the index key's Triton
    fingerprint covers; a CPU test keeps the file free of imports from tiledmm) -- read, not imported."""
    import hashlib
    from pathlib import Path
    return "gluon_kernel.py:" + hashlib.sha256(Path(__file__).with_name("gluon_kernel.py").read_bytes()).hexdigest()


def _int_key(v: int) -> int:
    """What Triton specialises an integer parameter on: 64-bit, == 1, divisible by 16."""
    return (0 if -2 ** 31 <= v < 2 ** 31 else 4) + (1 if v == 1 else (2 if v % 16 == 0 else 0))


def _check_epilogue(bias, bias_mode, act, M: int, N: int, c) -> None:
    if act not in ACTS:
        raise TiledmmError(f"gluon-ws: activation {act!r} is not one of {list(ACTS)}")
    if bias_mode not in (0, 1, 2):
        raise TiledmmError(f"gluon-ws: bias_mode {bias_mode!r} is not 0 (none), 1 (per column) or 2 (per row)")
    if bias_mode:
        want = N if bias_mode == 1 else M
        if bias is None or bias.dim() != 1 or bias.shape[0] != want or \
                str(bias.dtype) not in (str(c.dtype), "torch.float32") or bias.device != c.device:
            got = "None" if bias is None else f"shape {tuple(bias.shape)} {bias.dtype} on {bias.device}"
            raise TiledmmError(f"gluon-ws: bias_mode {bias_mode} needs a 1-D bias of {want} elements, "
                               f"{c.dtype} or float32, on {c.device}; got {got}")


# device index -> (1-element fp32 stand-in workspace, int32 counters), and (device, stream) -> the
# same for the split launches of that stream
_SCRATCH: dict = {}
_scratch_lock = threading.Lock()


def _scratch(dev: int, counters: int, workspace: int, stream: int | None = None):
    """(fp32 workspace, int32 arrival counters) on device ``dev``. The counters are kept per device and
    stream (``stream``: the launch's; zero between launches: the last arrival resets them), so split
    launches on two streams never share them -- a tail tile's units wait on its counter; the
    workspace is a fresh tensor of ``workspace`` elements (Gluon's own launch; ``_workspace`` keeps one
    per stream for the bound launches) and a kept 1-element stand-in otherwise (never read)."""
    import torch
    key = dev if stream is None else (dev, stream)
    kept = _SCRATCH.get(key)
    if kept is None or kept[1].numel() < counters:
        with _scratch_lock:
            kept = _SCRATCH.get(key)
            if kept is None or kept[1].numel() < counters:
                where = torch.device("cuda", dev)
                kept = _SCRATCH[key] = (torch.empty(1, dtype=torch.float32, device=where),
                                        torch.zeros(max(counters, 1024), dtype=torch.int32, device=where))
    if workspace:
        return torch.empty(workspace, dtype=torch.float32, device=kept[1].device), kept[1]
    return kept


MAX_WS_BYTES = 32 << 20     # a stream's kept split workspace at most (a larger one is made for its call)
_WS: dict = {}              # (device, stream) -> the fp32 workspace kept for that stream's split launches


def _workspace(dev: int, stream: int, n: int, where) -> tuple:
    """(an fp32 workspace of >= ``n`` elements for a split launch on ``stream``, None or the tensor the caller
    must hold until the launch is queued). Launches on one stream run one after another, so each stream
    keeps one workspace, doubled when a launch needs more (an outgrown one is never freed: a launch queued
    before may still write it; ``fastlaunch.keep`` counts them against its cap) -- no allocation on the
    call path. A fresh one, held by the caller (its address alone is in the arguments: freed before the
    launch is queued, its memory could go to another tensor first), where the kept one would pass
    MAX_WS_BYTES or cannot be kept (a CUDA graph capture under way: it takes the graph's memory; the kept
    total full). ``where``: the torch device of ``dev``."""
    ws = _WS.get((dev, stream))
    if ws is not None and ws.numel() >= n:
        return ws, None
    import torch
    if 4 * n <= MAX_WS_BYTES:
        with _scratch_lock:
            ws = _WS.get((dev, stream))
            if ws is not None and ws.numel() >= n:
                return ws, None
            size = min(max(n, 2 * ws.numel() if ws is not None else 0), MAX_WS_BYTES // 4)
            kept = keep(4 * size, dev)
            if kept is not None:
                ws = _WS[(dev, stream)] = kept.view(torch.float32)
                return ws, None
    fresh = torch.empty(n, dtype=torch.float32, device=where)
    return fresh, fresh


def _public(a, b, c, M, N, K, config, sms, dev, bias, sbias, alpha, beta, bias_mode, act):
    """Gluon's own launch (compiles on first use): (CompiledKernel, the three descriptors)."""
    kmod = _kernel()
    plan = descriptor_plan(a, b, c, config, sms)
    descs = [kmod.descriptor(*plan[x]) for x in "abc"]
    ws, cnt = _scratch(dev, plan["counters"], plan["workspace"], current_stream() if plan["counters"] else None)
    ck = kmod.gluon_ws_kernel[(plan["grid"],)](
        *descs, c, c.stride(-2), bias, sbias, ws, cnt, M, N, K, plan["batch"], *plan["steps"], plan["tail_at"],
        plan["tail_split"], alpha, beta,
        STAGES=config["num_stages"], A_T=plan["A_T"], B_T=plan["B_T"], GROUP_M=config["GROUP_M"],
        NUM_SMS=sms, HAS_BETA=beta != 0.0, ALPHA_ONE=alpha == 1.0, EPI_SPLIT=config.get("EPI_SPLIT", 1),
        SPLIT_K=plan["split"], TAIL=config.get("TAIL", 0), PARTS=parts(config), LOADER_REGS=LOADER_REGS,
        BIAS=bias_mode, ACT=act, num_warps=config["num_warps"])
    return ck, descs


MAX_DESCS = 1024        # expanded descriptors kept (then the cache starts again)
_descs: dict = {}       # (tensor-map metadata, pointer, shape, strides, device) -> the C launch's arguments
_bound: dict = {}       # specialisation -> _Bound, or _PUBLIC (Gluon's launcher for good)
_PUBLIC = "public"
_bind_lock = threading.Lock()
_warned = False


class _Bound:
    """One specialisation's CompiledKernel, launched through its C launch: the descriptors'
    arguments from ``_descs``, sizes, pointers and the grid from the call. Immutable."""

    def __init__(self, td, config: dict, sms: int, a_t: bool, b_t: bool, consts: tuple):
        self.launch, self.coop, self.pdl, self.expand = td.launch, td.cooperative, td.pdl, td.expand
        self.function, self.packed = td.function, td.packed
        self.bm, self.bn, self.split = config["BLOCK_M"], config["BLOCK_N"], config.get("SPLIT_K", 1)
        self.bk, self.tail = config["BLOCK_K"], config.get("TAIL", 0)
        self.sms, self.a_t, self.b_t, self.consts = sms, a_t, b_t, consts
        self.mkeys = [repr(sorted(m.items())) for m in td.metadata]   # one tensor-map kind per descriptor

    def desc(self, i: int, ptr: int, shape: tuple, strides: tuple, dev: int) -> tuple:
        global _descs
        key = (self.mkeys[i], ptr, shape, strides, dev)
        hit = _descs.get(key)
        if hit is None:
            try:
                hit = tuple(self.expand(i, ptr, shape, strides))
            except RuntimeError:        # a thread new to CUDA: no current context to fill a tensor map in
                if not _adapter.ensure_context(dev):
                    raise
                hit = tuple(self.expand(i, ptr, shape, strides))
            cache = _descs
            if len(cache) >= MAX_DESCS:
                cache = _descs = {}
            cache[key] = hit
        return hit

    def __call__(self, a, b, c, M, N, K, sa, sb, sc, bias, sbias, alpha, beta, dev, batch=1, steps=(0, 0, 0)) -> None:
        """(a, b, c): the 2-D views (stacked for a batch: ``_stacked``; sa, sb, sc their strides)."""
        stream = current_stream()
        grid, args, hold, _ = self.args(a.data_ptr(), b.data_ptr(), c.data_ptr(), M, N, K, sa, sb, sc,
                                        bias.data_ptr(), sbias, alpha, beta, dev, stream, batch, steps)
        self.launch(grid, 1, 1, stream, *args)
        del hold        # a fresh workspace: held until its launch is queued (args has its address only)

    def args(self, pa: int, pb: int, pc: int, M, N, K, sa, sb, sc, pbias: int, sbias, alpha, beta, dev,
             stream: int | None = None, batch: int = 1, steps: tuple = (0, 0, 0)) -> tuple:
        """(grid, the C launch's arguments after the stream, a tensor to hold or None, the stream they are
        bound to or None) of one call. A split launch (SPLIT_K, or TAIL with a partial wave to split) takes
        ``stream``'s counters and its workspace (``_workspace``: the stream's kept one, or a fresh one returned
        for the caller to hold until the launch is queued), so its arguments are the stream's; the others'
        depend on nothing but the call's values (a class launch may keep either: ``_ClassLaunch``).
        A batch: ``batch`` products, the descriptors' row ``steps`` between them (``_stacked``)."""
        ra = steps[0] * batch or (K if self.a_t else M)     # the descriptors' rows (a batch's stacked)
        rb = steps[1] * batch or (N if self.b_t else K)
        ea = self.desc(0, pa, (ra, M) if self.a_t else (ra, K), (sa[1] if self.a_t else sa[0], 1), dev)
        eb = self.desc(1, pb, (rb, K) if self.b_t else (rb, N), (sb[1] if self.b_t else sb[0], 1), dev)
        ec = self.desc(2, pc, (steps[2] * batch or M, N), (sc[0], 1), dev)
        tiles = cdiv(M, self.bm) * cdiv(N, self.bn) * batch
        tail_at, tail_split, units = _units(tiles, cdiv(K, self.bk), self.sms, self.split, self.tail)
        hold = on = None
        if tail_split > 1 or self.split > 1:     # the split tiles' counters, their units' partials
            split_tiles, split_units = (tiles - tail_at, units - tail_at) if tail_split > 1 else (tiles, units)
            cnt = _scratch(dev, split_tiles, 0, stream)[1]
            ws, hold = _workspace(dev, stream, split_units * self.bm * self.bn, cnt.device)
            on = stream
        else:
            ws, cnt = _SCRATCH.get(dev) or _scratch(dev, 0, 0)
        return min(self.sms, units), (self.function, self.coop, self.pdl, None, None, self.packed, None, None, None,
                                      *ea, *eb, *ec, pc, sc[0], pbias, sbias, ws.data_ptr(), cnt.data_ptr(),
                                      M, N, K, batch, *steps, tail_at, tail_split, alpha, beta, *self.consts), \
            hold, on


MAX_SHAPES = 4096        # sizes a by-shape class launch remembers (then it starts again)
MAX_READY = 1024         # calls' launch arguments a class launch keeps (then it starts again)


class _ClassLaunch:
    """A bound specialisation serving a whole shape class of the short path (``fastlaunch.bind``'s
    class-launch protocol, ``__call__(stream, env) -> bool`` with ``env`` from ``fastlaunch.env``):
    a plain product (no bias or activation) whose sizes, strides and pointers come from each call.
    Returns False, launching nothing, where the call is not this specialisation's (another layout,
    a C row stride Triton would specialise otherwise, sizes past 32 bits, a batch that cannot be
    stacked or whose tiles would cross its products: ``_stacked``, ``batch_fits``): the caller then
    runs the variant, which binds that one.

    ``by_shape`` (where the class's config is the kernel's own model's, not a stored or timed one):
    each call's config is the model's for its own M, N and K (``heuristic``: a class spans up to 2x in
    each), remembered per size; a config not yet bound there returns False too, and the variant's
    launch (which then picks the same) binds it. A launch's arguments are kept per call values (``env``):
    a repeat of those values goes straight to the C launch (a split launch's: on the stream they are bound
    to, whose counters and workspace they name; not where the workspace was made for the call)."""

    def __init__(self, bound: _Bound, a_t: bool, b_t: bool, c_key: int, flags: tuple, dev: int,
                 specs: tuple = (), by_shape: tuple | None = None):
        self.bound, self.a, self.b, self.c_key, self.flags, self.dev = bound, "t" if a_t else "n", \
            "t" if b_t else "n", c_key, flags, dev
        self.specs = specs      # a TAIL config's two specialisations: (split, plain twin)
        self.by_shape = by_shape    # (kind, output element size, reg, the specs' part after the config)
        self.sizes: dict = {}       # by_shape: (M, N, K, batch) -> its _Bound
        self.ready: dict = {}       # env -> (C launch, grid, arguments) of an unsplit launch made before

    def __call__(self, stream: int, env: tuple) -> bool:
        ready = self.ready.get(env)
        if ready is not None and (ready[3] is None or ready[3] == stream):   # these values launched before (a
            ready[0](ready[1], 1, 1, stream, *ready[2])                      # split launch: on this stream)
            return True
        pa, pb, pc, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn, alpha, beta, batch = env
        if scn != 1 or _int_key(scm) != self.c_key or (beta != 0.0, alpha == 1.0) != self.flags \
                or max(M, N, K) >= 2 ** 31 or _order_of((M, K), (sam, sak)) != self.a \
                or _order_of((K, N), (sbk, sbn)) != self.b:
            return False
        steps = (0, 0, 0)
        if batch > 1:       # the products stacked along each operand's rows (_stack's rule), or not at all
            steps = (_step(sab, self.a, M, K, sam, sak), _step(sbb, self.b, K, N, sbk, sbn),
                     _step(scb, "n", M, N, scm, 1))
            if None in steps or not steps[2] or batch * max(M, N, K) >= 2 ** 31:
                return False
        if self.by_shape is not None:
            bound = self.sizes.get((M, N, K, batch)) or self._sized(M, N, K, batch)
            if bound is None:
                return False        # that config's first call here: the variant's launch binds it
        else:
            bound = self.bound
            if len(self.specs) == 2:     # a TAIL config: the call's wave decides which build runs (_plain_unless_split)
                split = _tail_splits(M, N, K, bound.bm, bound.bn, bound.bk, bound.sms, batch)
                bound = _bound.get(self.specs[0 if split else 1])
                if not isinstance(bound, _Bound):
                    return False        # that build's first call: the variant's launch binds it
        if batch > 1 and not batch_fits({"BLOCK_M": bound.bm, "BLOCK_K": bound.bk}, M, K):
            return False
        grid, args, hold, on = bound.args(pa, pb, pc, M, N, K, (sam, sak), (sbk, sbn), (scm, scn), pc, 0, alpha,
                                          beta, self.dev, stream, batch, steps)
        if hold is None:    # (not a fresh workspace, made for this call only)
            if len(self.ready) >= MAX_READY:
                self.ready = {}
            self.ready[env] = (bound.launch, grid, args, on)
        bound.launch(grid, 1, 1, stream, *args)
        return True

    def _sized(self, M: int, N: int, K: int, batch: int = 1) -> _Bound | None:
        """The bound specialisation of the model's config for (M, N, K, batch) -- what ``launch`` picks for
        it (``_full_config``, ``_plain_unless_split``) -- remembered; None where it is not bound yet."""
        kind, out_esize, reg, rest = self.by_shape
        sms = self.bound.sms
        config = _plain_unless_split(_pick(M, N, K, kind, sms, out_esize, reg, batch, _smem(self.dev)), M, N, K,
                                     sms, batch)
        bound = _bound.get((tuple(config.items()), *rest))
        if not isinstance(bound, _Bound):
            return None
        if len(self.sizes) >= MAX_SHAPES:
            self.sizes = {}
        self.sizes[(M, N, K, batch)] = bound
        return bound


def _step(batch_stride: int, order: str, rows: int, cols: int, s_rows: int, s_cols: int) -> int | None:
    """An operand's row step between a batch's products in its stacked descriptor (``_stack``): 0 where
    every product shares it, the rows of its matrix (or of its transpose) where the batch stride is one
    matrix, None where it cannot be stacked."""
    if batch_stride == 0:
        return 0
    if order == "n" and batch_stride == rows * s_rows:
        return rows
    if order == "t" and batch_stride == cols * s_cols:
        return cols
    return None


def _bind(spec, ck, descs, config: dict, sms: int, a_t: bool, b_t: bool, flags: tuple) -> None:
    """Remember how later calls of ``spec`` launch: a _Bound where the adapter gives the C launch
    and the compiled signature is the kernel's, else _PUBLIC (one warning where direct launches
    are on but this kernel's launcher is not the known one). Nothing while undecided (a capture)."""
    global _warned
    td = _adapter.tensordesc_launch(ck, descs) if ck is not None else None
    if td is not None:
        if td.params == PARAMS:
            has_beta, alpha_one, bias_mode, act = flags      # the constexprs (passed, not read, by the C launch)
            consts = (config["num_stages"], a_t, b_t, config["GROUP_M"], sms, has_beta, alpha_one,
                      config.get("EPI_SPLIT", 1), config.get("SPLIT_K", 1), config.get("TAIL", 0), parts(config),
                      LOADER_REGS, bias_mode, act, config["num_warps"])
            _bound[spec] = _Bound(td, config, sms, a_t, b_t, consts)
            return
    if not _adapter.decided():
        return
    if _adapter.triton_direct() and not _warned:
        _warned = True
        warnings.warn("tiledmm: the Gluon kernel's launcher is not the one checked (Triton "
                      f"{'/'.join(_adapter.TRITON_CHECKED)}); gluon-ws launches through kernel[grid](...) "
                      "(correct, ~100 us of host time a call)", RuntimeWarning, stacklevel=4)
    _bound[spec] = _PUBLIC


def _index_key(spec: tuple, config: dict):
    """tiledmm's kernel-index key of a specialisation (``_adapter.index_key``): ``spec`` but the
    device index (the GPU target stands for it), with the loader's registers; the kernel's source
    by ``_source_key`` (no Gluon import)."""
    return _adapter.index_key(_source_key(), {"LOADER_REGS": LOADER_REGS}, config["num_warps"],
                              config["num_stages"], spec[:-2] + (spec[-1],))


def _from_index(spec, a, b, c, config, sms, a_t, b_t, flags):
    """A specialisation compiled and bound by an earlier process, found through tiledmm's kernel index
    and bound again: no Gluon import, no JIT, no ``triton_key``. Its _Bound, or None (not there, or
    not bindable: then Gluon's own launch compiles or finds it)."""
    ck = _adapter.load_compiled(_index_key(spec, config), _adapter.SourceStub("gluon_ws_kernel", PARAMS),
                                require={"bound": True})
    if ck is None:
        return None
    plan = descriptor_plan(a, b, c, config, sms)
    _scratch(c.get_device(), plan["counters"], 0)      # the kept stand-ins and counters the bound launch reads
    _bind(spec, ck, None, config, sms, a_t, b_t, flags)
    bound = _bound.get(spec)
    if isinstance(bound, _Bound):
        return bound
    _bound.pop(spec, None)
    return None


def _full_config(config, M: int, N: int, K: int, a, c, sms: int, reg: bool = False, batch: int = 1) -> dict:
    """``config`` completed from the model's pick where it names only some meta-parameters (a tile width
    given without PARTS is one accumulator wide), checked where it names PARTS."""
    if not config or not _FULL <= config.keys():
        pick = _pick(M, N, K, _DTYPES[str(a.dtype)], sms, c.element_size(), reg, batch, _smem(c.get_device()))
        if config and "BLOCK_N" in config:
            pick = {k: v for k, v in pick.items() if k != "PARTS"}
        config = {**pick, **(config or {})}
    check_parts(config, _DTYPES[str(a.dtype)])
    return config


def _tail_splits(M: int, N: int, K: int, bm: int, bn: int, bk: int, sms: int, batch: int = 1) -> bool:
    """Whether a TAIL launch of this call (``batch`` products) splits its last wave (``tail_plan`` over all
    the launch's tiles, as ``_units`` counts them)."""
    return tail_plan(cdiv(M, bm) * cdiv(N, bn) * batch, cdiv(K, bk), sms)[1] > 1


def _plain_unless_split(config: dict, M: int, N: int, K: int, sms: int, batch: int = 1) -> dict:
    """A TAIL config where this call has no partial wave to split (``_tail_splits``): its plain twin
    (TAIL = 0), a specialisation of its own -- the TAIL build runs a few % slower with nothing to split."""
    if config.get("TAIL") and not _tail_splits(M, N, K, config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"],
                                               sms, batch):
        return dict(config, TAIL=0)
    return config


def operand_mode(a, b) -> int:
    """How the kernel feeds wgmma (``gluon_kernel._operand_mode``, from the same facts): 0 both operands
    from shared memory; tf32 only: 1 an M-major A from registers, 2 a row-major B, the tile computed
    transposed with B^T from registers."""
    if str(a.dtype) != "torch.float32":
        return 0
    if _order(b) != "t":
        return 2
    return 1 if _order(a) == "t" else 0


def _spec(config, a, c, bias, bias_mode, act, alpha, beta, a_t, b_t, stride_cm, sbias, biggest, dev, sms) -> tuple:
    """What one compiled and bound specialisation stands for (the key of ``_bound``)."""
    return (tuple(config.items()), a.dtype, c.dtype, bias.dtype, bias.data_ptr() % 16 == 0, bias_mode, act,
            beta != 0.0, alpha == 1.0, a_t, b_t, _int_key(stride_cm), _int_key(sbias), biggest >= 2 ** 31, dev, sms)


def class_launch(a, b, c, alpha=1.0, beta=0.0, *, precision, config=None):
    """After a plain launch of (a, b, c) (no bias or activation): its bound specialisation as a
    class launch for the short path (``_ClassLaunch``), or None where it was not bound (Gluon's own
    launcher, an undecided adapter). Without a ``config`` (the dispatcher's plan leaves it to this
    kernel's model) the class launch takes the model's config for each call's own size."""
    st = _stacked(a, b, c)
    if isinstance(st, str):
        return None
    batch, M, N, K, (a, b, c), _ = st
    sms = _num_sms(c.get_device())
    reg = operand_mode(a, b) != 0
    by_shape = not config
    config = _full_config(config, M, N, K, a, c, sms, reg, batch)
    alpha, beta = float(alpha), float(beta)
    a_t, b_t = _order(a) == "t", _order(b) == "t"
    dev = c.get_device()
    specs = [_spec(dict(config, TAIL=t), a, c, c, 0, "none", alpha, beta, a_t, b_t, c.stride(0), 0,
                   max(*a.shape, *b.shape, *c.shape), dev, sms) for t in ((1, 0) if config.get("TAIL") else (0,))]
    bound = _bound.get(specs[0] if _plain_unless_split(config, M, N, K, sms, batch) is config else specs[-1])
    if not isinstance(bound, _Bound):
        return None
    sized = (_DTYPES[str(a.dtype)], c.element_size(), reg, specs[0][1:]) if by_shape else None
    return _ClassLaunch(bound, a_t, b_t, _int_key(c.stride(0)), (beta != 0.0, alpha == 1.0), dev, tuple(specs),
                        sized)


def launch(a, b, c, *, precision, alpha=1.0, beta=0.0, config=None, bias=None, bias_mode=0, act="none") -> None:
    """Enqueue c = act(alpha * a @ b + beta * c + bias) on torch's current stream (no host sync).
    A partial ``config`` is completed from ``heuristic``'s; ``bias_mode`` 1: ``bias`` has one value
    per column (N), 2: one per row (M); ``act`` one of ``ACTS``. a (M, K) or (B, M, K), b (K, N) or (B, K, N),
    c (M, N) or (B, M, N): a batch runs in one launch where ``why_not`` allows it."""
    given = (a, b, c)       # what the descriptors' plan reads (descriptor_plan stacks a batch itself)
    batch, M, N, K, (a, b, c), steps = _stacked(a, b, c)
    sms = _num_sms(c.get_device())
    config = _plain_unless_split(_full_config(config, M, N, K, a, c, sms, operand_mode(a, b) != 0, batch),
                                 M, N, K, sms, batch)
    if batch > 1 and not batch_fits(config, M, K):
        raise TiledmmError(f"gluon-ws: a batch of {batch} products {M}x{K} @ {K}x{N} needs M a multiple of "
                           f"BLOCK_M and K of BLOCK_K (config {config['BLOCK_M']}x{config['BLOCK_N']}x"
                           f"{config['BLOCK_K']})")
    if bias_mode or act != "none":
        _check_epilogue(bias, bias_mode, act, M, N, c)
    alpha, beta = float(alpha), float(beta)
    sa, sb, sc = a.stride(), b.stride(), c.stride()
    a_t, b_t = _order_of(a.shape, sa) == "t", _order_of(b.shape, sb) == "t"
    if not bias_mode:
        bias, sbias = c, 0          # never read: C stands in for the pointer
    else:
        sbias = bias.stride(0)
    dev = c.get_device()
    spec = _spec(config, a, c, bias, bias_mode, act, alpha, beta, a_t, b_t, sc[0], sbias, max(*a.shape, *b.shape,
                 *c.shape), dev, sms)
    bound = _bound.get(spec)
    if bound is None:
        with _bind_lock:        # one thread compiles and binds a specialisation; the others wait
            bound = _bound.get(spec)
            if bound is None:
                flags = (beta != 0.0, alpha == 1.0, bias_mode, act)
                bound = _from_index(spec, *given, config, sms, a_t, b_t, flags)
                if bound is None:
                    ck, descs = _public(*given, M, N, K, config, sms, dev, bias, sbias, alpha, beta, bias_mode, act)
                    _bind(spec, ck, descs, config, sms, a_t, b_t, flags)
                    _adapter.remember_compiled(_index_key(spec, config), ck,
                                               bound=isinstance(_bound.get(spec), _Bound))
                    return
    if bound is _PUBLIC:
        _public(*given, M, N, K, config, sms, dev, bias, sbias, alpha, beta, bias_mode, act)
        return
    try:
        bound(a, b, c, M, N, K, sa, sb, sc, bias, sbias, alpha, beta, dev, batch, steps)
    except (TypeError, AttributeError, SystemError):   # a launcher of another shape: Gluon's, for good
        _bound[spec] = _PUBLIC
        _public(*given, M, N, K, config, sms, dev, bias, sbias, alpha, beta, bias_mode, act)
