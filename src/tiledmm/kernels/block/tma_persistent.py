"""Variant 'tma-persistent': Hopper's copy engine feeding wgmma, one program per SM.

What it adds over a plain persistent TMA kernel (tutorial 09's; issue 11):
* host-side tensor descriptors (``triton.tools.tensor_descriptor.TensorDescriptor``): the
  CUtensorMap is built by the launcher, no device-side descriptor creation or scratch memory;
* grouped ("swizzled") tile order: GROUP_M tile-rows are swept column by column, so the
  132 programs resident at one time share A rows and B columns in L2;
* an epilogue through TMA stores, optionally in two halves (EPI_SPLIT=2: half the staging
  shared memory, so one more pipeline stage fits), fused alpha and beta (C read by TMA too);
* the tile loop is flattened with the K loop (``tl.range(..., flatten=True)``), so the loads
  of the next tile start while the current tile's epilogue runs;
* optional ``warp_specialize`` on that loop (config key WS): Triton documents it for Blackwell;
  on Hopper with Triton 3.6 it is measured, not assumed (scripts/block_variants_bench.py).

wgmma reads 32-bit operands K-major only: for tf32 this variant takes A row-major and B
K-major (column-major) only; kmajor_cache.py gives it a cached K-major B for reused weights.
2-D only (applicable() is False for batches).
"""
from __future__ import annotations

from . import _vcommon as V
from ._vcommon import cdiv, cfg, hopper, index_of, kind_of, num_sms, smem_limit, tl_precision
from .heuristics import Traits, smem_bytes

import triton  # noqa: E402  (after _vcommon: it decides TRITON_INTERPRET)
import triton.language as tl  # noqa: E402

from .kernels import _tile_id  # noqa: E402  (the one grouped tile order)

NAME = "tma-persistent"
# host: three TensorDescriptors and a launch a call, never bound (an estimate: not measured alone)
TRAITS = Traits(persistent=True, tma_store=True, capability=(9, 0), host_us=60.0)


@triton.jit(do_not_specialize=["M", "N", "K"])   # the descriptors do the bounds: sizes only count tiles
def tma_persistent_kernel(a_desc, b_desc, c_desc, M, N, K, alpha, beta,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, EPI_SPLIT: tl.constexpr, WS: tl.constexpr,
                          B_KMAJOR: tl.constexpr, PRECISION: tl.constexpr, HAS_BETA: tl.constexpr,
                          ALPHA_ONE: tl.constexpr, NUM_SMS: tl.constexpr):
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    out_ty = c_desc.dtype
    tile_c = start - NUM_SMS   # the epilogue's own tile counter (keeps the flattened loop's live set small)
    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=True, warp_specialize=WS):
        pid_m, pid_n = _tile_id(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            a = a_desc.load([off_m, off_k])
            if B_KMAJOR:
                b = b_desc.load([off_n, off_k]).T
            else:
                b = b_desc.load([off_k, off_n])
            if PRECISION == "none":
                acc = tl.dot(a, b, acc)
            else:
                acc = tl.dot(a, b, acc, input_precision=PRECISION)
        tile_c += NUM_SMS
        pid_m, pid_n = _tile_id(tile_c, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        if not ALPHA_ONE:
            acc = acc * alpha
        if EPI_SPLIT == 2:
            acc = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            acc0, acc1 = tl.split(acc)
            if HAS_BETA:
                acc0 += beta * c_desc.load([off_m, off_n]).to(tl.float32)
            c_desc.store([off_m, off_n], acc0.to(out_ty))
            if HAS_BETA:
                acc1 += beta * c_desc.load([off_m, off_n + BLOCK_N // 2]).to(tl.float32)
            c_desc.store([off_m, off_n + BLOCK_N // 2], acc1.to(out_ty))
        else:
            if HAS_BETA:
                acc += beta * c_desc.load([off_m, off_n]).to(tl.float32)
            c_desc.store([off_m, off_n], acc.to(out_ty))


def _c(bm, bn, bk, warps, stages, epi=2, ws=False, group=8):
    return cfg(bm, bn, bk, warps, stages, GROUP_M=group, EPI_SPLIT=epi, WS=ws)


# Candidates per kind (<= 8 each), all within the H100's shared memory (heuristics.smem_bytes).
CONFIGS = {
    "16bit": [_c(128, 256, 64, 8, 3), _c(128, 256, 64, 8, 4), _c(256, 128, 64, 8, 3), _c(128, 128, 64, 8, 4),
              _c(128, 128, 64, 4, 4), _c(128, 128, 128, 8, 3), _c(64, 128, 64, 4, 4), _c(128, 256, 64, 8, 3, ws=True)],
    "tf32": [_c(128, 256, 32, 8, 3), _c(256, 128, 32, 8, 3), _c(128, 128, 32, 8, 5), _c(128, 128, 32, 8, 4),
             _c(128, 128, 64, 8, 3), _c(128, 128, 32, 4, 4), _c(64, 128, 32, 4, 4), _c(128, 256, 32, 8, 3, ws=True)],
    "ieee": [_c(128, 128, 32, 8, 3), _c(64, 128, 32, 4, 3), _c(128, 64, 32, 4, 4)],
}


def heuristic(M: int, N: int, K: int, kind: str, sms: int | None = None) -> dict:
    """Largest tile that still gives the SMs about a full wave (measured on the H100,
    docs/performance.md, issue 11): 128 x 256 when its tiles fill a wave (the WS-flagged
    compile for tf32 and for 16-bit beyond 4 waves, where it measured faster), else 128 x 128,
    else 64 x 128."""
    sms = sms or num_sms()
    if kind == "ieee":
        return dict(CONFIGS["ieee"][0])
    tiles256 = cdiv(M, 128) * cdiv(N, 256)
    if tiles256 >= sms:
        ws = kind == "tf32" or tiles256 >= 4 * sms
        return dict(CONFIGS[kind][7] if ws else CONFIGS[kind][0])
    if cdiv(M, 128) * cdiv(N, 128) >= 0.75 * sms:
        return dict(CONFIGS[kind][3])                       # 128 x 128, 8 warps
    return dict(CONFIGS[kind][6])                           # 64 x 128


_last: dict = {}   # the last CompiledKernel launched (its .asm holds ptx / cubin / sass), for reports


def _b_kmajor(b) -> bool:
    return b.stride(0) == 1 and (b.stride(1) != 1 or b.shape[1] == 1)


def applicable(a, b, c, precision, alpha=1.0, beta=0.0) -> bool:
    """Hopper GPU, 2-D, A row-major, C row-major, B row-major (16-bit) or K-major (any), and
    the copy engine's alignment rules; tf32 needs a K-major B (wgmma's rule for 32-bit)."""
    if not hopper(a):
        return False
    if a.dim() != 2 or b.dim() != 2 or c.dim() != 2 or kind_of(precision) == "ieee":
        return False
    if not (a.dtype == b.dtype == c.dtype) or not a.is_cuda or 0 in a.shape or 0 in b.shape:
        return False
    if not V.tma_ok(a, c):
        return False
    if _b_kmajor(b):
        return V.tma_ok(b.T)
    if kind_of(precision) == "tf32":
        return False
    return V.tma_ok(b)


def _desc(t, block):
    from triton.tools.tensor_descriptor import TensorDescriptor
    return TensorDescriptor(t, list(t.shape), list(t.stride()), list(block))


def launch(a, b, c, *, precision, alpha=1.0, beta=0.0, config=None) -> None:
    M, K = a.shape
    N = b.shape[1]
    kind = kind_of(precision)
    index = index_of(c)
    sms = num_sms(index)
    meta, warps, stages = V.split_meta(config or heuristic(M, N, K, kind, sms))
    bm, bn, bk = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]
    kmajor = _b_kmajor(b)
    a_desc = _desc(a, (bm, bk))
    b_desc = _desc(b.T, (bn, bk)) if kmajor else _desc(b, (bk, bn))
    c_desc = _desc(c, (bm, bn // meta.get("EPI_SPLIT", 1)))
    if beta != 0.0:
        meta, stages = _fit_beta(meta, stages, a.element_size(), c.element_size(), smem_limit(index))
    grid = (max(1, min(sms, cdiv(M, bm) * cdiv(N, bn))),)
    flags = dict(B_KMAJOR=kmajor, PRECISION=tl_precision(precision), HAS_BETA=beta != 0.0,
                 ALPHA_ONE=alpha == 1.0, NUM_SMS=sms)
    _last["kernel"] = _launcher(grid, (a_desc, b_desc, c_desc, M, N, K, float(alpha), float(beta)),
                                {**{k: meta[k] for k in _META}, **flags}, warps, stages)
    V.mark_written(c)


_META = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EPI_SPLIT", "WS")
_launcher = V.Launcher(tma_persistent_kernel)


def _fit_beta(meta: dict, stages: int, esize: int, out_esize: int, limit: int):
    """beta != 0 reads C through shared memory too (measured on the H100: +64 KB for a
    128 x 128 fp32 half-tile): drop pipeline stages until the model fits the device's ``limit``."""
    extra = meta["BLOCK_M"] * meta["BLOCK_N"] // meta.get("EPI_SPLIT", 1) * out_esize
    while stages > 2 and smem_bytes({**meta, "num_stages": stages}, esize, out_esize, True) + 2 * extra > limit:
        stages -= 1
    return meta, stages
