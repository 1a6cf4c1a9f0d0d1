"""Variant 'batched-small': many tiny products in one batch.

A batch of products of at most 32 x 32 x 32 (attention heads of a small model, per-token
projections, a mixture of tiny experts) wastes most of the blocked kernel's work: it runs one
program per (output tile, batch entry) with tiles of 64 rows or more, so a 8 x 16 x 8 product
fills an eighth of each tile and each program does almost nothing next to its launch. Here one
program computes G whole products: each product's M, N and K are padded to power-of-two blocks
of at most 32 (masked loads read zeros past the edges, the store is masked), the G products sit
on a leading axis of the program's tensors, and one 3-D ``tl.dot`` ([G, BM, BK] x [G, BK, BN] ->
[G, BM, BN], accumulated in fp32) computes them all: on the tensor cores for 16-bit inputs and
tf32 (mma.sync: a 3-D dot has no wgmma form), as FMAs for exact float32 ('ieee',
``input_precision="ieee"``). Triton 3.6 takes K blocks of 16 or more (its ``min_dot_size``; 3.9
also 8 for fp32) and M, N blocks of any size; here M and N blocks are at least 16 on the tensor
cores (their smallest product) and 8 for the FMAs: a 4 x 4 x 4 product runs as 8 x 8 x 16 in fp32.

G is a power of two: G products' tiles (A, B and the fp32 accumulator) hold at most the config's
``ELEMS`` elements -- 8,192 for 4 warps, 64 a thread: 34-91 registers a thread for the
configs' tiles, Triton 3.9 for sm_90 (56 for 16 fp32 products of 8 x 8 x 16, 156 for 64) --
at most 64 products, and at most a quarter of an SM's share of the batch (enough programs to
fill every SM several times). A 3-D dot puts its warps along the batch axis: a program has at
most G warps. The grid is cdiv(batch, G) programs on axis 0, so any batch count runs in one
launch. Any strides; a batch stride of 0 (a 2-D or a batch-1 operand) broadcasts it.
"""
from __future__ import annotations

from . import _vcommon as V
from ._vcommon import cdiv, index_of, kind_of, num_sms, tl_precision
from .heuristics import _BEST_INTENSITY, Traits

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .kernels import _epilogue  # noqa: E402  (the blocked kernel's epilogue: alpha, beta, masked store)

NAME = "batched-small"
REPLAYABLE = True     # one FastKernel launch on (a, b, c): fastlaunch.replay binds it per exact signature
MAX_DIM = 32          # largest M, N and K it takes (blocks of up to 32 x 32 x 32)
# fewest batch entries it is offered for: any batch. A small batch gets G = 1, one program per product
# with blocks of at most 32 where the blocked kernel runs a tile of 64 x 64 or more (16 x 128 for few
# rows) per product: less work, and as many programs. (The dispatcher's plan key has no batch count: a class's first call
# decides for its later ones, so a threshold here would leave a class first met with a small batch on
# the blocked kernel.) Unmeasured: the batch count where the two kernels cross.
MIN_BATCH = 2
MAX_G = 64            # most products one program computes


# the runtime parameter ``n_batch`` (the batch count) is named outside fastlaunch._ENV on purpose:
# a ClassLaunch computes a tile grid, this kernel's grid counts groups of products, so only exact
# signatures are bound (fastlaunch.replay)
@triton.jit(do_not_specialize=["n_batch", "M"])   # one compile for every batch count and M
def batched_small_kernel(a_ptr, b_ptr, c_ptr, n_batch, M, N, K,
                         stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn,
                         stride_cb, stride_cm, stride_cn, alpha, beta,
                         G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         PRECISION: tl.constexpr, HAS_BETA: tl.constexpr, ALPHA_ONE: tl.constexpr,
                         UPCAST: tl.constexpr):
    """Program p: C[g] = alpha * A[g] @ B[g] + beta * C[g] for the G batch entries g = p*G .. p*G+G-1
    (those below ``n_batch``), each a whole product of at most BLOCK_M x BLOCK_N x BLOCK_K."""
    g = tl.program_id(0).to(tl.int64) * G + tl.arange(0, G)
    in_batch = g < n_batch
    rows = tl.arange(0, BLOCK_M).to(tl.int64)
    cols = tl.arange(0, BLOCK_N).to(tl.int64)
    ks = tl.arange(0, BLOCK_K).to(tl.int64)
    # the slides' two boundary rules, per product: zeros past M, N, K on load, nothing stored past M, N
    a_at = a_ptr + g[:, None, None] * stride_ab + rows[None, :, None] * stride_am + ks[None, None, :] * stride_ak
    b_at = b_ptr + g[:, None, None] * stride_bb + ks[None, :, None] * stride_bk + cols[None, None, :] * stride_bn
    a = tl.load(a_at, mask=in_batch[:, None, None] & (rows[None, :, None] < M) & (ks[None, None, :] < K), other=0.0)
    b = tl.load(b_at, mask=in_batch[:, None, None] & (ks[None, :, None] < K) & (cols[None, None, :] < N), other=0.0)
    if UPCAST:  # emulation only: the Triton interpreter's bf16 tl.dot returns garbage (triton 3.9)
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    if PRECISION == "none":
        acc = tl.dot(a, b)                                  # [G, BM, BN] in fp32: G products at once
    else:
        acc = tl.dot(a, b, input_precision=PRECISION)      # 'ieee': FMAs, exact fp32; 'tf32': tensor cores
    c_at = c_ptr + g[:, None, None] * stride_cb + rows[None, :, None] * stride_cm + cols[None, None, :] * stride_cn
    inside = in_batch[:, None, None] & (rows[None, :, None] < M) & (cols[None, None, :] < N)
    _epilogue(c_at, acc, inside, alpha, beta, ALPHA_ONE, HAS_BETA)


def _pow2(x: int) -> int:
    return 1 << max(0, x - 1).bit_length()


def _floor_pow2(x: int) -> int:
    return 1 << (max(1, x).bit_length() - 1)


LEAST_K = 16                            # tl.dot's smallest K block (Triton's min_dot_size, 16- and 32-bit)


def least_block(kind: str) -> int:
    """The smallest M and N block: 16 on the tensor cores, 8 for the exact fp32 FMAs."""
    return 8 if kind == "ieee" else 16


def blocks(M: int, N: int, K: int, kind: str) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K): M, N, K rounded up to powers of two, at least ``least_block``
    (M, N) and LEAST_K (K)."""
    lo = least_block(kind)
    return max(lo, _pow2(M)), max(lo, _pow2(N)), max(LEAST_K, _pow2(K))


def _c(bm: int, bn: int, bk: int, elems: int, warps: int) -> dict:
    return V.cfg(bm, bn, bk, warps, 1, ELEMS=elems)


# every block combination, with 4 or 8 warps (64 tile elements a thread either way)
_SIZES = {"16bit": (16, 32), "tf32": (16, 32), "ieee": (8, 16, 32)}
CONFIGS = {kind: [_c(bm, bn, bk, elems, warps) for bm in s for bn in s for bk in (16, 32)
                  for elems, warps in ((8192, 4), (16384, 8))] for kind, s in _SIZES.items()}


def heuristic(M: int, N: int, K: int, kind: str) -> dict:
    """The config whose blocks are this product's, 4 warps."""
    bm, bn, bk = blocks(M, N, K, kind)
    return _c(bm, bn, bk, 8192, 4)


def prune(configs: list[dict], M: int, N: int, K: int, sms: int, batch: int = 1) -> list[dict]:
    """The configs whose blocks are this product's (at the class's representative size: launch widens a
    block the call's own M, N or K outgrows); none where the product is larger than MAX_DIM."""
    if max(M, N, K) > MAX_DIM:
        return []
    want = blocks(M, N, K, "ieee" if any(c["BLOCK_M"] < 16 for c in configs) else "16bit")   # only ieee's < 16
    return [c for c in configs if (c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"]) == want]


# Throughput against the persistent TMA kernel's peak, for the model (heuristics.estimate_us), of one
# padded product: the model's tile-reuse factor (intensity) describes shared-memory-fed tensor cores,
# which this kernel does not use, so it is divided out (as heuristics.gluon_speed does). Guesses, not
# fitted to a measurement: 3-D dots run as mma.sync on tiny tiles (~0.3),
# the FMA dot at about half the FMA peak (operands through shared memory beside the FMAs).
SPEED = {"16bit": 0.3, "tf32": 0.3, "ieee": 0.5}


def _speed(p, config: dict) -> float:
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    return SPEED[p.kind] / min(1.0, bm * bn / (bm + bn) / _BEST_INTENSITY)


TRAITS = Traits(speed=_speed)
_kernel = V.Launcher(batched_small_kernel)


def applicable(a, b, c, precision, alpha=1.0, beta=0.0) -> bool:
    """A batch (a or b 3-D, the other 3-D or 2-D: broadcast) of at least MIN_BATCH products whose M,
    N and K are 1..MAX_DIM; one float dtype in and out (float32 for 'ieee'/'tf32', bf16/fp16 else)."""
    if a.dim() not in (2, 3) or b.dim() not in (2, 3) or max(a.dim(), b.dim()) != 3 or c.dim() != 3:
        return False
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    if not (0 < M <= MAX_DIM and 0 < N <= MAX_DIM and 0 < K <= MAX_DIM) or c.shape[0] < MIN_BATCH:
        return False
    if not (a.dtype == b.dtype == c.dtype) or str(a.dtype) not in ("torch.float16", "torch.bfloat16",
                                                                      "torch.float32"):
        return False
    if (str(a.dtype) == "torch.float32") == (kind_of(precision) == "16bit"):
        return False
    return V.emulating() or (a.is_cuda and b.is_cuda and c.is_cuda)


def group(M: int, N: int, K: int, batch: int, kind: str, config: dict, sms: int) -> tuple[int, int, int, int]:
    """(G, BLOCK_M, BLOCK_N, BLOCK_K) for one call: the config's blocks, widened where the call's own
    M, N or K outgrows them (``blocks``); G a power of two whose G tiles of A, B and C hold at most the
    config's ELEMS elements, at most MAX_G, and at most a quarter of each SM's share of the batch (so
    that every SM gets four programs or more)."""
    bm, bn, bk = (max(x, config[k]) for x, k in zip(blocks(M, N, K, kind), ("BLOCK_M", "BLOCK_N", "BLOCK_K")))
    per_product = bm * bk + bk * bn + bm * bn
    g = min(MAX_G, _floor_pow2(config.get("ELEMS", 8192) // per_product), _floor_pow2(batch // (4 * sms)))
    return g, bm, bn, bk


def launch(a, b, c, *, precision, alpha=1.0, beta=0.0, config=None) -> None:
    import torch
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = c.shape[0]
    kind = kind_of(precision)
    cfg, warps, stages = V.split_meta(config or heuristic(M, N, K, kind))
    G, bm, bn, bk = group(M, N, K, batch, kind, cfg, num_sms(index_of(c)))
    # no more warps than products: a 3-D dot puts its warps along the batch axis
    warps = min(warps, G)
    sa = a.stride(0) if a.dim() == 3 and a.shape[0] > 1 else 0
    sb = b.stride(0) if b.dim() == 3 and b.shape[0] > 1 else 0
    meta = dict(G=G, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, PRECISION=tl_precision(precision),
                HAS_BETA=beta != 0.0, ALPHA_ONE=alpha == 1.0,
                UPCAST=V.emulating() and a.dtype == torch.bfloat16)
    _kernel((cdiv(batch, G),), (a, b, c, batch, M, N, K, sa, a.stride(-2), a.stride(-1), sb, b.stride(-2),
                                b.stride(-1), c.stride(0), c.stride(1), c.stride(2), float(alpha), float(beta)),
            meta, warps, stages)
    V.mark_written(c)
