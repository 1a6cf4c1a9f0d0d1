"""The host side of variant 'tma': Hopper's copy engine feeding wgmma, one program per SM.

The kernel is ``kernels.matmul_tma_persistent_kernel`` (device-side descriptors, grouped tile
order, flattened tile x K loop, TMA-store epilogue optionally in two halves, fused alpha/beta,
bias and activation); here: which calls it takes (``applicable``), its config when none is
given (``heuristic``), and ``launch`` -- one FastKernel launch on (a, b, c), so fastlaunch binds
repeat calls (a class launch, the global scratch of the descriptors kept). ``variants.py``
makes it the 'tma' variant; ``tma_copy.py`` and ``kmajor_cache.py`` launch it on operands
they prepared.

wgmma reads 32-bit operands K-major only: for tf32 the kernel takes A row-major and B K-major
(column-major) only; kmajor_cache.py gives it a cached K-major B for reused weights.
2-D only (applicable() is False for batches).
"""
from __future__ import annotations

from . import _vcommon as V
from . import configs as C
from ._vcommon import cdiv, fast, hopper, index_of, kind_of, num_sms, smem_limit, tl_precision
from .heuristics import smem_bytes
from .kernels import matmul_tma_persistent_kernel


def heuristic(M: int, N: int, K: int, kind: str, sms: int | None = None) -> dict:
    """Largest tile that still gives the SMs about a full wave (measured on the H100,
    docs/history.md): 128 x 256 when its tiles fill a wave, else 128 x 128, else
    64 x 128. Never the WS-flagged configs: their measured gain was the host-descriptor kernel's,
    whose flattened loop ignored the flag; here WS unflattens the loop (not measured yet).
    Positions in ``configs.TMA`` (its tables keep this order)."""
    sms = sms or num_sms()
    table = C.TMA[kind]
    if kind == "ieee":
        return dict(table[0])
    if cdiv(M, 128) * cdiv(N, 256) >= sms:
        return dict(table[0])
    if cdiv(M, 128) * cdiv(N, 128) >= 0.75 * sms:
        return dict(table[3])                       # 128 x 128, 8 warps
    return dict(table[6])                           # 64 x 128


def b_kmajor(b) -> bool:
    """B stored K-contiguous (column-major): the kernel describes B^T."""
    return b.stride(0) == 1 and (b.stride(1) != 1 or b.shape[1] == 1)


def applicable(a, b, c, precision, alpha=1.0, beta=0.0) -> bool:
    """Hopper GPU, 2-D, one dtype, no empty operand, A and C row-major, B row-major or K-major,
    and the copy engine's alignment rules (``_vcommon.tma_ok``); tf32 needs a K-major B (wgmma's
    rule for 32-bit operands). Any alpha and beta (fused in the epilogue)."""
    if not hopper(a) or a.dim() != 2 or b.dim() != 2 or c.dim() != 2:
        return False
    if not (a.dtype == b.dtype == c.dtype) or not a.is_cuda or 0 in a.shape or 0 in b.shape:
        return False
    if not V.tma_ok(a, c):
        return False
    if b_kmajor(b):
        return V.tma_ok(b.T)
    return kind_of(precision) != "tf32" and V.tma_ok(b)


_last: dict = {}   # the last CompiledKernel launched (its .asm holds ptx / cubin / sass), for reports


def launch(a, b, c, *, precision, alpha=1.0, beta=0.0, config=None, bias=None, bias_mode=0, act="none") -> None:
    """c = act(alpha * a @ b + beta * c + bias) (``bias_mode`` 0 none, 1 along N, 2 along M; ``act`` as
    ``kernels._activation``) on operands ``applicable`` accepts; ``config`` None: ``heuristic``'s."""
    M, K = a.shape
    N = b.shape[1]
    index = index_of(c)
    sms = num_sms(index)
    meta, warps, stages = V.split_meta(config or heuristic(M, N, K, kind_of(precision), sms))
    if beta != 0.0:
        stages = _fit_beta(meta, stages, a.element_size(), c.element_size(), smem_limit(index))
    flags = (("PRECISION", tl_precision(precision)), ("B_KMAJOR", b_kmajor(b)), ("NUM_SMS", sms),
             ("HAS_BETA", beta != 0.0), ("ALPHA_ONE", alpha == 1.0), ("EPI_SPLIT", meta.get("EPI_SPLIT", 1)),
             ("WS", meta.get("WS", False)), ("BIAS", bias_mode), ("ACT", act))
    if bias_mode:
        extra = (bias, bias.stride(0))
    else:      # no bias: its two parameters fixed like the constexprs, so every runtime parameter is
        flags += (("bias_ptr", None), ("stride_bias", 0))   # one a class launch computes (fastlaunch._ENV)
        extra = ()
    fk = fast(matmul_tma_persistent_kernel, tuple({**meta, "num_warps": warps, "num_stages": stages}.items()),
              flags)
    grid = (min(sms, cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"])),)
    _last["kernel"] = fk(grid, a, b, c, M, N, K, a.stride(0), b.stride(0), b.stride(1), c.stride(0),
                         float(alpha), float(beta), *extra)
    V.mark_written(c)


def _fit_beta(meta: dict, stages: int, esize: int, out_esize: int, limit: int) -> int:
    """beta != 0 reads C through shared memory too: one more staging buffer of the epilogue's piece
    (128 x 256 x 32 tf32, 3 stages, EPI_SPLIT 2: 279,576 bytes = the model's 213,016 + 65,536 + 24,
    on the H100 with triton 3.6 and compiled for sm_90 with triton 3.9 alike). The pipeline stages,
    fewer until that fits the device's ``limit``."""
    extra = meta["BLOCK_M"] * meta["BLOCK_N"] // meta.get("EPI_SPLIT", 1) * out_esize
    while stages > 2 and smem_bytes({**meta, "num_stages": stages}, esize, out_esize, True) + extra > limit:
        stages -= 1
    return stages
