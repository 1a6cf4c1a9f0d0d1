"""FP8 products: ``tiledmm.scaled_matmul``, ``tiledmm.quantize_fp8`` and ``tiledmm.dequantize_fp8``.

``scaled_matmul(a, b, scale_a, scale_b)`` is ``(a * scale_a) @ (b * scale_b)`` for float8 operands
(``float8_e4m3fn`` or ``float8_e5m2``, any pair) with fp32 accumulation, as ``torch._scaled_mm``
computes it; the scales' shapes name the recipe, as torch's do (a (M, K), b (K, N)):

=========== ===================================== =====================================
recipe      scale_a                               scale_b
=========== ===================================== =====================================
per tensor  one element (shape (), (1,), (1, 1))   one element
rowwise     (M, 1): one per row of a              (1, N): one per column of b
blockwise   (M, ceil(K/128)): 1 x 128 blocks of a (ceil(K/128), ceil(N/128)): 128 x 128 of b
=========== ===================================== =====================================

Per tensor and rowwise scales may be mixed (one per tensor on one side, rowwise on the other).
Scales are float32, positive and finite; the real value is the fp8 value times its scale.
Batches: a (B, M, K) and/or b (B, K, N) (a batch of 1 or a 2-D operand broadcasts); a scale may
carry the batch as a leading dimension of B (or 1), or not (one set of scales for every batch).

Layouts: the kernel reads a row-major (K contiguous) and b K-major (``b.t()`` contiguous, i.e.
b = w.t() for a row-major weight w (N, K)) -- the layouts wgmma takes for 8-bit operands, and the
ones ``torch._scaled_mm`` requires. Any other layout is taken too, at the cost of one transposing
copy of that operand (``a.contiguous()``, ``b.t().contiguous().t()``).

Accumulation: fp32. On Hopper the tensor core's fp8 accumulator keeps about 14 bits, so the kernel
promotes: every 128 elements of K the tensor core's partial sum is added into an fp32 register
accumulator (blockwise scaling does so with each K block's scales). ``use_fast_accum=True`` skips
the promotion for per-tensor and rowwise scales (one tensor-core accumulator all along K: faster,
less accurate for long K), as torch's does; blockwise scaling always promotes.

Output: ``out_dtype`` bfloat16 (default), float16 or float32, with an optional ``bias`` (N values
added to every row) and ``activation`` ("relu", "gelu", "gelu_tanh", "silu") applied in the
kernel's epilogue, in fp32, before the one rounding to ``out_dtype``.

Accuracy (the documented bound, checked by the tests on the CPU and on the GPU): against the
float64 product of the dequantised operands (``dequantize_fp8(a, scale_a) @ dequantize_fp8(b,
scale_b)``, plus bias), with random operands, the relative Frobenius error is at most
``u(out_dtype) + 2**-11`` for every recipe with promotion -- u = 2**-8 for bfloat16, 2**-11 for
float16, 2**-24 for float32 (one rounding of the result) plus the fp32 accumulation of 128-element
tensor-core partial sums -- and does not grow with K (K = 16384 stays within 2x of K = 1024). With
``use_fast_accum=True`` the accumulation term grows with K (the bench measures it). The
quantisation itself (``quantize_fp8``) rounds each value to 3 (e4m3) or 2 (e5m2) fraction bits:
``|dequantize(quantize(x)) - x| <= 2**-4 |x|`` (e4m3; 2**-3 for e5m2) above the format's
subnormal range, ``scale * 2**-10`` (e4m3; ``scale * 2**-17`` e5m2) below it.

Validation: every bad call is a one-line ``TiledmmError`` naming the shapes, dtypes or scales --
non-fp8 operands, mismatched shapes, batches or devices, scales of a shape no recipe has, of a
dtype other than float32, non-positive or non-finite scales (``check_scales=True``, the default,
reads the scales: one device synchronisation per call on a GPU, none while a CUDA graph is
captured or under ``torch.compile``; pass ``check_scales=False`` where the scales come from
``quantize_fp8``). Inputs are never modified.

Without a GPU the same kernel runs in Triton's interpreter on CPU tensors (toy sizes): fp8 values
multiply exactly and sum in fp32, with the same scaling per 128-wide K block.

``quantize_fp8(x, recipe, dtype)`` returns ``(x8, scale)`` with ``x ~= x8 * scale``: amax of each
group, scale = amax / fp8_max (448 for e4m3, 57344 for e5m2; a group of zeros gets 1e-12 / fp8_max),
values divided by it and cast with saturation, in one pass per group on the GPU. Groups:
"tensorwise" (one scale, shape ()), "rowwise" (one per row, over the last dimension: shape
x.shape[:-1] + (1,)), "blockwise" (``block=(1, 128)``, the A side: x.shape[:-1] + (ceil(C/128),);
``block=(128, 128)``, the B side: x.shape[:-2] + (ceil(R/128), ceil(C/128))). For the B operand
quantise the weight w (N, K) as stored and pass ``w8.t()`` with ``scale.t()``: rowwise (N, 1)
becomes (1, N), blockwise (ceil(N/128), ceil(K/128)) becomes (ceil(K/128), ceil(N/128)).
"""
from __future__ import annotations

from ._backend import mode

mode()  # GPU or emulation is decided before torch is imported (importing torch may import triton)
import torch  # noqa: E402

from ._arrays import TiledmmError  # noqa: E402,F401
from ._fp8_core import (  # noqa: E402,F401  (the engine; its public names are this module's)
    mode, FP8_DTYPES, OUT_DTYPES, RECIPES, BLOCKS, BLOCK, FP8_MAX, EPS, ACTIVATIONS, KERNEL, _cdiv, _name,
    check_activation, check_recipe, _check_operand, _last2, plan, _scale3, check_scale_values, call, _plans,
    _MAX_PLANS, _bound, _stream, _signature, _repeat, _planned, _direct, _run, _bind, _check_quantize, scale_shape,
    _quantize, expand_scale, dequantize_fp8
)


def scaled_matmul(a, b, scale_a, scale_b, *, out_dtype=torch.bfloat16, bias=None, activation=None,
                  use_fast_accum: bool = False, out=None, check_scales: bool = True, config=None):
    """``act((a * scale_a) @ (b * scale_b) + bias)`` in ``out_dtype``, fp8 ``a`` and ``b`` (see the
    module's docstring: recipes by the scales' shapes, layouts, promotion, accuracy, errors).

    a: (M, K) or (B, M, K) float8; b: (K, N) or (B, K, N) float8 (best K-major: b = w.t());
    scale_a, scale_b: float32 tensors; out_dtype: bfloat16, float16, float32; bias: (N,) float;
    activation: None, "relu", "gelu", "gelu_tanh", "silu"; use_fast_accum: no promotion (per tensor
    and rowwise only); out: a tensor of the result's shape and ``out_dtype`` to write into;
    check_scales: read the scales and refuse non-positive or non-finite ones (one device sync);
    config: a config name of the kernel family (``tiledmm.kernels.block.fp8_kernels.CONFIGS``) or
    dict, for benchmarks. Returns the result (``out`` if given)."""
    act = check_activation(activation)
    if not _direct(a, b, scale_a, scale_b, bias):          # torch.compile, export, fake tensors: the operator
        if out is not None or config is not None:
            raise TiledmmError("under torch.compile scaled_matmul takes no out= or config=")
        from .ops import _fp8
        return _fp8.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, act, bool(use_fast_accum))
    return call(a, b, scale_a, scale_b, bias, out_dtype, act, bool(use_fast_accum), out, check_scales, config)


def quantize_fp8(x, recipe: str = "tensorwise", dtype=torch.float8_e4m3fn, *, block=(1, 128)):
    """``(x8, scale)``: x in fp8 with float32 scales, ``x ~= dequantize_fp8(x8, scale)`` (see the
    module's docstring). recipe: "tensorwise", "rowwise" (over the last dimension) or "blockwise"
    (``block`` (1, 128) for an A operand, (128, 128) for a B operand / weight). x8 has x's shape
    (contiguous); x itself is not modified."""
    block = _check_quantize(x, recipe, dtype, block)
    if not _direct(x):
        from .ops import _fp8
        return _fp8.quantize(x, recipe, block[0], dtype)
    return _quantize(x, recipe, dtype, block)


__all__ = ["scaled_matmul", "quantize_fp8", "dequantize_fp8", "RECIPES", "FP8_DTYPES"]

from .ops import _fp8 as _ops  # noqa: E402,F401  (registers torch.ops.tiledmm.scaled_mm and quantize_fp8)
