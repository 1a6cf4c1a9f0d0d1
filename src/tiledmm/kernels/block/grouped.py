"""Grouped products (Mixture-of-Experts): one persistent Triton kernel for every group.

A grouped product multiplies G pairs of matrices that share one or two of their dimensions and sit
in the same tensors -- an expert's slice of the tokens times that expert's weights. Four layouts,
those of ``torch._grouped_mm`` (``tiledmm.grouped`` checks the calls):

    "m"      a (M, K) @ b (G, K, N) -> c (M, N):  group g takes the rows offs[g-1] .. offs[g] of a and c
    "n"      a (G, M, K) @ b (K, N) -> c (M, N):  group g takes the columns offs[g-1] .. offs[g] of b and c
    "k"      a (M, K) @ b (K, N) -> c (G, M, N):  group g sums over offs[g-1] .. offs[g] of K (a weight gradient)
    "batch"  a (G, M, K) @ b (G, K, N) -> c (G, M, N): equal groups, no offsets

``offs`` (int32, on the device) holds the groups' ends; the first group starts at 0. The host never
reads it, so the grid cannot count tiles: the grid is persistent -- one program per SM, at most the
tiles the host can bound from the totals (``tile_bound``) -- and every program walks all groups on the
device, counting each group's tiles from the offsets it loads, and takes every P-th tile of the
sequence (Triton's grouped-GEMM tutorial's scheduler, with the extents read from ``offs``). Along the
grouped dimension the part after the last group belongs to none: in the layouts "m" and "n" the
programs walk it as one more group, with no product, and write zeros there (the result is defined
everywhere). Offsets are not checked (that would read them on the host); the kernel clips each to
the extent and takes each group's end as the largest offset so far -- a decreasing offset gives an
empty group -- so groups never overlap and every position has one writer.

Two ways of reading a tile, one kernel: masked pointer loads (any strides, every device and the
interpreter: the rows and K outside the group read as zeros), or on Hopper the copy engine (TMA):
descriptors over the whole of a and b built on the device, tiles read at the group's offsets, and
what a tile reads beyond its group (rows of the next expert) either never stored (rows, columns) or
zeroed before the product (K, in layout "k"). The epilogue adds a bias per group and column, applies
the activation (``kernels._activation``) and stores with a mask in c's dtype. SWAP computes the
transposed tile, so that a few rows per group use the tensor cores' narrow side (the small-group path:
``heuristic`` picks it from the host-known average group size). float64 accumulates in float64 with
multiply-adds (``ACC64``: gradcheck and references; no tensor cores).
"""
from __future__ import annotations

from ..._backend import emulating, mode
from ._vcommon import cdiv, fast, hopper, index_of, num_sms, split_meta

mode()  # decide GPU or emulation (TRITON_INTERPRET) before triton is imported
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .kernels import _activation, _tile_id, _tile_product  # noqa: E402

LAYOUTS = {"batch": 0, "m": 1, "n": 2, "k": 3}


@triton.jit
def _product64(a_tile, b_tile, rows, cols, M, N, k_len, stride_ak, stride_bk,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """float64: acc = A[rows, :k_len] @ B[:k_len, cols] with float64 multiply-adds (a broadcast
    product summed over K: no dot instruction, which Triton has for float64 on few targets)."""
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float64)
    for phase in range(0, tl.cdiv(k_len, BLOCK_K)):
        k_left = k_len - phase * BLOCK_K
        a = tl.load(a_tile, mask=(rows[:, None] < M) & (ks[None, :] < k_left), other=0.0)
        b = tl.load(b_tile, mask=(ks[:, None] < k_left) & (cols[None, :] < N), other=0.0)
        acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    return acc


@triton.jit
def _tma_tiles(a_desc, b_desc, g, off_m, off_n, off_k, A_3D: tl.constexpr, B_3D: tl.constexpr,
               A_KMAJOR: tl.constexpr, B_KMAJOR: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The (BLOCK_M x BLOCK_K, BLOCK_K x BLOCK_N) tiles of A and B at (off_m, off_k) and (off_k, off_n)
    through the descriptors (g: the group's index along a 3-D operand's first dimension); a K-major
    operand is read as stored and transposed in registers (a view for the tensor cores)."""
    if A_3D:
        if A_KMAJOR:
            a = a_desc.load([g, off_m, off_k]).reshape(BLOCK_M, BLOCK_K)
        else:
            a = a_desc.load([g, off_k, off_m]).reshape(BLOCK_K, BLOCK_M).T
    else:
        if A_KMAJOR:
            a = a_desc.load([off_m, off_k])
        else:
            a = a_desc.load([off_k, off_m]).T
    if B_3D:
        if B_KMAJOR:
            b = b_desc.load([g, off_n, off_k]).reshape(BLOCK_N, BLOCK_K).T
        else:
            b = b_desc.load([g, off_k, off_n]).reshape(BLOCK_K, BLOCK_N)
    else:
        if B_KMAJOR:
            b = b_desc.load([off_n, off_k]).T
        else:
            b = b_desc.load([off_k, off_n])
    return a, b


@triton.jit
def _mma(a, b, acc, PRECISION: tl.constexpr, UPCAST: tl.constexpr, SWAP: tl.constexpr):
    """acc += a @ b (SWAP: acc^T += b^T @ a^T, acc held transposed)."""
    if UPCAST:  # emulation only: the Triton interpreter's bf16 tl.dot returns garbage (triton 3.9)
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    if SWAP:
        x = tl.trans(b)
        y = tl.trans(a)
    else:
        x = a
        y = b
    if PRECISION == "none":
        acc = tl.dot(x, y, acc)
    else:
        acc = tl.dot(x, y, acc, input_precision=PRECISION)
    return acc


@triton.jit
def _tma_product(a_desc, b_desc, g, off_m, off_n, k_start, k_len, A_3D: tl.constexpr, B_3D: tl.constexpr,
                 A_KMAJOR: tl.constexpr, B_KMAJOR: tl.constexpr, MASK_K: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 PRECISION: tl.constexpr, UPCAST: tl.constexpr, SWAP: tl.constexpr):
    """The phase loop through the copy engine: acc = A[off_m.., k_start : k_start + k_len] @
    B[k_start : k_start + k_len, off_n..] in fp32. The descriptors zero-fill outside the tensors;
    MASK_K: K continues into the next group (layout "k"), so the last, partial phase is zeroed past
    k_len before the product (finite or not, another group's values never reach the sum)."""
    if SWAP:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if MASK_K:
        full = k_len // BLOCK_K
    else:
        full = tl.cdiv(k_len, BLOCK_K)
    for kk in range(0, full):
        a, b = _tma_tiles(a_desc, b_desc, g, off_m, off_n, k_start + kk * BLOCK_K, A_3D, B_3D, A_KMAJOR,
                          B_KMAJOR, BLOCK_M, BLOCK_N, BLOCK_K)
        acc = _mma(a, b, acc, PRECISION, UPCAST, SWAP)
    if MASK_K:
        if full * BLOCK_K < k_len:
            a, b = _tma_tiles(a_desc, b_desc, g, off_m, off_n, k_start + full * BLOCK_K, A_3D, B_3D, A_KMAJOR,
                              B_KMAJOR, BLOCK_M, BLOCK_N, BLOCK_K)
            inside = full * BLOCK_K + tl.arange(0, BLOCK_K) < k_len
            a = tl.where(inside[None, :], a, tl.zeros_like(a))
            b = tl.where(inside[:, None], b, tl.zeros_like(b))
            acc = _mma(a, b, acc, PRECISION, UPCAST, SWAP)
    if SWAP:
        acc = tl.trans(acc)
    return acc


# Triton compiles a kernel per specialisation of its integer arguments (== 1, divisible by 16). The
# group count and M vary from call to call (experts, tokens) and feed only tile counts and row masks:
# not specialised, one compiled kernel serves them all. N, K and the strides keep Triton's rule (their
# divisibility decides vector loads along a row).
NO_SPECIALISE = ["G", "M"]


@triton.jit(do_not_specialize=NO_SPECIALISE)
def grouped_kernel(a_ptr, b_ptr, c_ptr, offs_ptr, bias_ptr, G, M, N, K,
                   stride_ag, stride_am, stride_ak, stride_bg, stride_bk, stride_bn,
                   stride_cg, stride_cm, stride_cn, stride_xg, stride_xn,
                   LAYOUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr, SWAP: tl.constexpr, TMA: tl.constexpr, A_KMAJOR: tl.constexpr,
                   B_KMAJOR: tl.constexpr, PRECISION: tl.constexpr, ACC64: tl.constexpr, UPCAST: tl.constexpr,
                   HAS_BIAS: tl.constexpr, ACT: tl.constexpr):
    """c = act(a @ b + bias) per group (the module's docstring): LAYOUT 0 batch, 1 "m", 2 "n", 3 "k".
    M, N, K: the whole extents (the grouped one's total). The bias: one value per group and column,
    ``bias_ptr[g * stride_xg + column * stride_xn]`` (column counted in c). TMA (Hopper, 16-bit):
    A_KMAJOR / B_KMAJOR say which of each operand's last two dimensions is the unit-stride one."""
    A_3D: tl.constexpr = LAYOUT == 0 or LAYOUT == 2
    B_3D: tl.constexpr = LAYOUT == 0 or LAYOUT == 1
    if TMA:
        if A_3D:
            if A_KMAJOR:
                a_desc = tl.make_tensor_descriptor(a_ptr, shape=[G, M, K], strides=[stride_ag, stride_am, 1],
                                                   block_shape=[1, BLOCK_M, BLOCK_K])
            else:
                a_desc = tl.make_tensor_descriptor(a_ptr, shape=[G, K, M], strides=[stride_ag, stride_ak, 1],
                                                   block_shape=[1, BLOCK_K, BLOCK_M])
        else:
            if A_KMAJOR:
                a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1],
                                                   block_shape=[BLOCK_M, BLOCK_K])
            else:
                a_desc = tl.make_tensor_descriptor(a_ptr, shape=[K, M], strides=[stride_ak, 1],
                                                   block_shape=[BLOCK_K, BLOCK_M])
        if B_3D:
            if B_KMAJOR:
                b_desc = tl.make_tensor_descriptor(b_ptr, shape=[G, N, K], strides=[stride_bg, stride_bn, 1],
                                                   block_shape=[1, BLOCK_N, BLOCK_K])
            else:
                b_desc = tl.make_tensor_descriptor(b_ptr, shape=[G, K, N], strides=[stride_bg, stride_bk, 1],
                                                   block_shape=[1, BLOCK_K, BLOCK_N])
        else:
            if B_KMAJOR:
                b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1],
                                                   block_shape=[BLOCK_N, BLOCK_K])
            else:
                b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1],
                                                   block_shape=[BLOCK_K, BLOCK_N])
    tile = tl.program_id(0)
    step = tl.num_programs(0)
    seen = 0        # tiles of the groups walked so far
    end = 0         # where the previous group ended along the grouped dimension
    if LAYOUT == 1:
        extent = M
    elif LAYOUT == 2:
        extent = N
    else:
        extent = K
    if LAYOUT == 1 or LAYOUT == 2:
        walked = G + 1      # the part after the last group too
    else:
        walked = G
    for g in range(0, walked):
        m_start = 0
        m_size = M
        n_start = 0
        n_size = N
        k_start = 0
        k_size = K
        g64 = tl.cast(g, tl.int64)
        real = g64 < G
        if LAYOUT != 0:
            start = end
            end = tl.load(offs_ptr + g, mask=real, other=extent)
            end = tl.maximum(tl.minimum(end, extent), start)     # clipped; never before the previous end
            size = end - start
            if LAYOUT == 1:
                m_start = start
                m_size = size
                k_size = tl.where(real, K, 0)      # past the last group: zeros, no product
            elif LAYOUT == 2:
                n_start = start
                n_size = size
                k_size = tl.where(real, K, 0)
            else:
                k_start = start
                k_size = size
        num_m = tl.cdiv(m_size, BLOCK_M)
        tiles = num_m * tl.cdiv(n_size, BLOCK_N)
        while tile < seen + tiles:
            pid_m, pid_n = _tile_id(tile - seen, m_size, n_size, BLOCK_M, BLOCK_N, GROUP_M)
            rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)      # within the group
            cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            if TMA:
                acc = _tma_product(a_desc, b_desc, g, m_start + pid_m * BLOCK_M, n_start + pid_n * BLOCK_N,
                                   k_start, k_size, A_3D, B_3D, A_KMAJOR, B_KMAJOR, LAYOUT == 3,
                                   BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, UPCAST, SWAP)
            else:
                ks = tl.arange(0, BLOCK_K)
                a_at = a_ptr + g64 * stride_ag + (m_start + rows[:, None]).to(tl.int64) * stride_am \
                    + (k_start + ks[None, :]).to(tl.int64) * stride_ak
                b_at = b_ptr + g64 * stride_bg + (k_start + ks[:, None]).to(tl.int64) * stride_bk \
                    + (n_start + cols[None, :]).to(tl.int64) * stride_bn
                if ACC64:
                    acc = _product64(a_at, b_at, rows, cols, m_size, n_size, k_size, stride_ak, stride_bk,
                                     BLOCK_M, BLOCK_N, BLOCK_K)
                else:
                    acc = _tile_product(a_at, b_at, rows, cols, m_size, n_size, k_size, stride_ak, stride_bk,
                                        BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, UPCAST, SWAP)
            if HAS_BIAS:
                acc += tl.load(bias_ptr + g64 * stride_xg + (n_start + cols) * stride_xn,
                               mask=cols < tl.where(real, n_size, 0), other=0.0).to(acc.dtype)[None, :]
            acc = _activation(acc, ACT)
            c_at = c_ptr + g64 * stride_cg + (m_start + rows[:, None]).to(tl.int64) * stride_cm \
                + (n_start + cols[None, :]).to(tl.int64) * stride_cn
            tl.store(c_at, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < m_size) & (cols[None, :] < n_size))
            tile += step
        seen += tiles


# -- the host side ------------------------------------------------------------------------------------

def config(bm: int, bn: int, bk: int, warps: int, stages: int, *, group_m: int = 8, swap: int = 0,
           tma: bool | None = None) -> dict:
    """One config: tile, phase width, GROUP_M, SWAP, TMA (None: on Hopper where the operands fit; True:
    wherever they fit, the interpreter included; False: never), warps, stages."""
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m, "SWAP": swap, "TMA": tma,
            "num_warps": warps, "num_stages": stages}


# The interpreter's tiles: small, so that toy groups span several tiles and ragged edges.
EMULATION = config(16, 16, 16, 4, 1, group_m=2, tma=False)
# float64 (multiply-adds, a BLOCK_M x BLOCK_K x BLOCK_N product in registers): small tiles everywhere.
FP64 = config(16, 16, 8, 4, 2, group_m=4, tma=False)

# 16-bit candidates on the GPU (H100 shared memory: (BM + BN) x BK x 2 bytes a stage), in the order
# ``heuristic`` reads them; scripts/bench_grouped.py times them all on the shapes.
CONFIGS = {
    "large": config(128, 256, 64, 8, 3),        # many rows per group, wide N
    "square": config(128, 128, 64, 8, 4),
    "square4": config(128, 128, 64, 4, 4),
    "medium": config(64, 128, 64, 4, 4),        # groups of 64-127 rows on average
    "small": config(32, 128, 128, 4, 4, swap=1),    # 17-63 rows: the transposed tile (wgmma's n = 32)
    "tiny": config(16, 128, 128, 4, 5, swap=1),     # up to 16 rows a group
    "k64": config(128, 128, 64, 8, 3),          # layout "k" (weight gradients): long K per group
}
FP32 = {"ieee": config(64, 64, 32, 4, 3, tma=False), "tf32": config(128, 128, 32, 8, 3, tma=False)}


def heuristic(layout: str, M: int, N: int, K: int, G: int, esize: int, precision: str) -> dict:
    """The config for a call from what the host knows -- the totals and the group count, never the
    offsets: the average group size along the grouped dimension picks the tile's short side (the
    small-group path: a transposed 16- or 32-row tile where groups average few rows, so that tiles are
    not mostly empty), the other extents its width."""
    if emulating():
        return dict(FP64 if esize == 8 else EMULATION)
    if esize == 8:
        return dict(FP64)
    if esize == 4:
        return dict(FP32["tf32" if precision == "tf32" else "ieee"])
    if layout == "m":
        avg = M / max(G, 1)
        if avg <= 16:
            return dict(CONFIGS["tiny"])
        if avg < 64:
            return dict(CONFIGS["small"])
        if avg < 128:
            return dict(CONFIGS["medium"])
        return dict(CONFIGS["large"] if N >= 256 and M * N >= 128 * 256 * 4 * num_sms() else CONFIGS["square"])
    if layout == "k":
        return dict(CONFIGS["k64"])
    if layout == "n":
        avg = N / max(G, 1)
        return dict(CONFIGS["medium"] if avg < 128 else CONFIGS["square"])
    return dict(CONFIGS["square"] if M >= 128 else CONFIGS["medium"])


def _kmajor(t, k_dim: int, other_dim: int) -> bool | None:
    """True: the K dimension has the unit stride; False: the other one has; None: neither."""
    if t.stride(k_dim) == 1 and (t.stride(other_dim) != 1 or t.shape[other_dim] == 1):
        return True
    if t.stride(other_dim) == 1:
        return False
    return None


def tma_fits(a, b, layout: str) -> bool:
    """Whether the copy engine can read a and b as the kernel describes them: 16-bit, one unit-stride
    dimension among each one's last two, 16-byte aligned bases and other strides (TMA's rules), and
    the grouped dimension not the unit-stride one of a descriptor (the tiles then start at the groups'
    offsets along it, which need not be 16-byte aligned)."""
    if a.element_size() != 2 or b.element_size() != 2:
        return False
    for t, kd, od in ((a, -1, -2), (b, -2, -1)):
        if _kmajor(t, kd, od) is None or t.data_ptr() % 16:
            return False
        if any(s < 1 or s != 1 and (s * t.element_size()) % 16 for s in t.stride()):
            return False
    a_k, b_k = _kmajor(a, -1, -2), _kmajor(b, -2, -1)
    return {"m": a_k, "n": b_k, "k": not a_k and not b_k}.get(layout, True)


def tile_bound(layout: str, M: int, N: int, K: int, G: int, bm: int, bn: int) -> int:
    """The most tiles a call can have, from its totals: a group adds at most one partial tile along the
    grouped dimension (plus the part after the last group, in layouts "m" and "n")."""
    if layout == "m":
        return (cdiv(M, bm) + G + 1) * cdiv(N, bn)
    if layout == "n":
        return cdiv(M, bm) * (cdiv(N, bn) + G + 1)
    return G * cdiv(M, bm) * cdiv(N, bn)


def launch(a, b, c, offs, layout: str, *, bias=None, act: str = "none", precision: str = "none",
           config: dict | None = None) -> None:
    """Enqueue c = act(a @ b + bias) per group on torch's current stream: a, b, c, offs (int32, or None for
    "batch"), bias ((G, N) or, layout "n", (N,)) torch tensors on the kernels' device, shaped and typed as
    the module's docstring says (checked by the caller); ``precision``: "none" (16-bit), "ieee" or
    "tf32" (float32); ``config``: a full or partial config (the rest: ``heuristic``'s). Nothing is read
    back to the host, and nothing allocated but Triton's descriptor scratch: capturable in a CUDA graph."""
    if layout == "m":
        (M, K), (G, _, N) = a.shape, b.shape
        sa, sb = (0, a.stride(0), a.stride(1)), b.stride()
        sc = (0, c.stride(0), c.stride(1))
    elif layout == "n":
        (G, M, K), N = a.shape, b.shape[1]
        sa, sb = a.stride(), (0, b.stride(0), b.stride(1))
        sc = (0, c.stride(0), c.stride(1))
    elif layout == "k":
        (M, K), N, G = a.shape, b.shape[1], c.shape[0]
        sa, sb, sc = (0, a.stride(0), a.stride(1)), (0, b.stride(0), b.stride(1)), c.stride()
    else:
        (G, M, K), N = a.shape, b.shape[2]
        sa, sb, sc = a.stride(), b.stride(), c.stride()
    esize = a.element_size()
    cfg = heuristic(layout, M, N, K, G, esize, precision)
    if config:
        cfg.update(config)
    if esize == 8:
        cfg.update(TMA=False, SWAP=0)
    meta, warps, stages = split_meta(cfg)
    bm, bn = meta["BLOCK_M"], meta["BLOCK_N"]
    tiles = tile_bound(layout, M, N, K, G, bm, bn)
    if tiles == 0 or c.numel() == 0:
        return
    tma = meta.pop("TMA")      # None: on Hopper; True: wherever the operands fit (the interpreter runs it too)
    tma = (tma or tma is None and hopper(a)) and tma_fits(a, b, layout) and G > 0 and K > 0
    a_kmajor = _kmajor(a, -1, -2) if tma else True
    b_kmajor = _kmajor(b, -2, -1) if tma else False
    if bias is not None:
        sx = (bias.stride(0), bias.stride(1)) if bias.dim() == 2 else (0, bias.stride(0))
    else:
        sx = (0, 0)
    flags = (("LAYOUT", LAYOUTS[layout]), ("TMA", bool(tma)), ("A_KMAJOR", bool(a_kmajor)),
             ("B_KMAJOR", bool(b_kmajor)), ("PRECISION", precision if esize == 4 else "none"),
             ("ACC64", esize == 8), ("UPCAST", emulating() and esize == 2), ("HAS_BIAS", bias is not None),
             ("ACT", act))
    # an absent offs or bias is fixed like the constexprs (a None pointer is one to Triton), not passed
    flags += tuple((name, None) for name, t in (("offs_ptr", offs), ("bias_ptr", bias)) if t is None)
    fk = fast(grouped_kernel, tuple({**meta, "num_warps": warps, "num_stages": stages}.items()), flags)
    grid = (max(1, min(num_sms(index_of(c)), tiles)),)
    tensors = [t for t in (a, b, c, offs, bias) if t is not None]
    if emulating():
        _interpret(fk, grid, tensors, (G, M, N, K, *sa, *sb, *sc, *sx))
    else:
        fk(grid, *tensors, G, M, N, K, *sa, *sb, *sc, *sx)
    _last.update(config={**meta, "num_warps": warps, "num_stages": stages}, tma=bool(tma), grid=grid[0])


_last: dict = {}    # the last launch's config, whether it read through TMA, its grid (for tests and reports)


def _interpret(fk, grid, tensors, ints) -> None:
    """The launch in Triton's interpreter: operands at distinct addresses (it keys its copies of them
    by address: two storages at one address clash), IEEE arithmetic without numpy's warnings (NaN and
    Inf inputs are legal: they propagate)."""
    import numpy as np
    seen: set = set()
    ops = []
    for t in tensors:
        if t.numel() and t.data_ptr() in seen:
            t = t.clone()
        if t.numel():
            seen.add(t.data_ptr())
        ops.append(t)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        fk(grid, *ops, *ints)


def launch_spec(a, b, c, *, tile=None, opts=None) -> None:
    """The ``triton-grouped`` KernelSpec's launch (``kernels/block/__init__.py``): c = a @ b for a 2-D
    product or a batch (b's batch of 1 broadcast), run as equal groups -- the grouped kernel in
    ``tiledmm.matmul``'s contract (every stride, dtype and size the harness and the fuzzer draw)."""
    from . import check_precision
    opts = opts or {}
    precision = check_precision(str(a.dtype).replace("torch.", ""), opts.get("precision"))
    if c.dim() == 2:
        a, b, c = a[None], b[None], c[None]
    else:
        n = c.shape[0]
        a = a.expand(n, *a.shape[-2:]) if a.dim() == 2 or a.shape[0] != n else a
        b = b.expand(n, *b.shape[-2:]) if b.dim() == 2 or b.shape[0] != n else b
    launch(a, b, c, None, "batch", precision=precision, config=opts.get("config"))
