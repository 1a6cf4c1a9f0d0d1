"""The Gluon kernel's host-side model, no Gluon imported: its configs and measured rates, the wave model
that picks a config (``heuristic``), the tail split (``tail_plan``), the layouts it takes (``why_not``) and
what a launch's descriptors cover (``descriptor_plan``). ``gluon_gemm`` launches; the dispatcher's model
(``heuristics.py``) and the variants read this through it."""
from __future__ import annotations

import os

from ... import _device
from ..._arrays import TiledmmError

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
    if c.get_device() < 0 or not _device.is_hopper(c.get_device()):
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


def operand_mode(a, b) -> int:
    """How the kernel feeds wgmma (``gluon_kernel._operand_mode``, from the same facts): 0 both operands
    from shared memory; tf32 only: 1 an M-major A from registers, 2 a row-major B, the tile computed
    transposed with B^T from registers."""
    if str(a.dtype) != "torch.float32":
        return 0
    if _order(b) != "t":
        return 2
    return 1 if _order(a) == "t" else 0


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
