"""FP8 as PyTorch operators, and the FP8 linear layer's autograd (a training recipe like torchao's
Float8Linear).

    tiledmm::scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, act, fast_accum) -> Tensor
        ``tiledmm.scaled_matmul`` (without reading the scales on the host: no synchronisation)
    tiledmm::quantize_fp8(x, recipe, block_rows, dtype) -> (x8, scale)
        ``tiledmm.quantize_fp8`` (block_rows 1: 1 x 128 blocks, 128: 128 x 128; ignored otherwise)

Defined with ``torch.library.Library`` like ``_library.py``'s operators: one CompositeExplicitAutograd
kernel each and a fake implementation that checks the call and computes the result's shapes, so
``torch.compile(fullgraph=True)`` keeps each call as one node. Neither has a gradient (fp8 values
are not differentiable); what trains is ``linear``: an ``autograd.Function`` whose forward and
backward are made of these two operators -- the quantisation is in the graph, recomputed from the
high-precision tensors each step (dynamic scaling):

    forward   y = x @ w.T + bias    x, w quantised to e4m3 (recipe's groups along K)
    backward  dx = gy @ w           gy quantised to e5m2 along N, w (as w.T, K-major) to e4m3
              dw = gy.T @ x         gy.T quantised to e5m2 along the tokens, x (as x.T) to e4m3
              dbias = gy summed over the tokens

e4m3 for the forward's operands and e5m2 (more range) for the output's gradient, as torchao's
Float8Linear does by default; its gemm settings too: fast accumulation in the forward product,
promoted accumulation in the two backward products (blockwise always promotes). The recipes:
"tensorwise" (one scale per operand), "rowwise" (one per row along the contraction: torchao's
rowwise, each operand quantised for each product along that product's K), "blockwise" (1 x 128
groups for the left operand, 128 x 128 for the right one: DeepSeek-V3's). The layer keeps x and w
in their own precision (bf16 master weights) and quantises them again in the backward.

Under Dynamo the function traces into the graph as these operators; in eager the operators' kernels
are called directly (no dispatcher), as ``_library``'s entries do.
"""
from __future__ import annotations

import torch

from .. import _fp8_core as F8
from .._arrays import TiledmmError, describe
from . import _impl

LIB = torch.library.Library("tiledmm", "FRAGMENT")
LIB.define("scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias, ScalarType out_dtype, "
           "str act, bool fast_accum) -> Tensor")
LIB.define("quantize_fp8(Tensor x, str recipe, int block_rows, ScalarType dtype) -> (Tensor, Tensor)")


def _block(recipe: str, block_rows: int) -> tuple:
    if recipe == "blockwise" and block_rows not in (1, 128):
        raise TiledmmError(f"block_rows must be 1 (1 x 128 blocks) or 128 (128 x 128), got {block_rows}")
    return (block_rows, 128) if recipe == "blockwise" else (1, 128)


def _scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, act, fast_accum):
    return F8.call(a, b, scale_a, scale_b, bias, out_dtype, F8.check_activation(act), bool(fast_accum),
                   check_scales=False)


def _quantize_fp8(x, recipe, block_rows, dtype):
    block = F8._check_quantize(x, recipe, dtype, _block(recipe, block_rows))
    return F8._quantize(x, recipe, dtype, block)


LIB.impl("scaled_mm", _scaled_mm, "CompositeExplicitAutograd")
LIB.impl("quantize_fp8", _quantize_fp8, "CompositeExplicitAutograd")


@torch.library.register_fake("tiledmm::scaled_mm", lib=LIB)
def _scaled_mm_fake(a, b, scale_a, scale_b, bias, out_dtype, act, fast_accum):
    p = F8.plan(a, b, scale_a, scale_b, bias, out_dtype, act)
    return a.new_empty(p["res"], dtype=out_dtype)


@torch.library.register_fake("tiledmm::quantize_fp8", lib=LIB)
def _quantize_fp8_fake(x, recipe, block_rows, dtype):
    block = F8._check_quantize(x, recipe, dtype, _block(recipe, block_rows))
    return (x.new_empty(x.shape, dtype=dtype),
            x.new_empty(F8.scale_shape(tuple(x.shape), recipe, block), dtype=torch.float32))


# -- the entries tiledmm's layers call: the operators only where a tracer needs them ------------------

def scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, act: str, fast_accum: bool):
    if not F8._direct(a, b, scale_a, scale_b, bias):
        return torch.ops.tiledmm.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, act, fast_accum)
    return _scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, act, fast_accum)


def quantize(x, recipe: str, block_rows: int, dtype):
    if not F8._direct(x):
        return torch.ops.tiledmm.quantize_fp8(x, recipe, block_rows, dtype)
    return _quantize_fp8(x, recipe, block_rows, dtype)


# -- the FP8 linear layer ---------------------------------------------------------------------------

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _left(x, recipe: str, dtype):
    """x (rows, K) as the left operand of a product over K: (x8, scale_a)."""
    return quantize(x, recipe, 1, dtype)


def _right(w, recipe: str, dtype):
    """w (N, K) -- stored any way -- as the right operand ``w.T`` (K, N) of a product over K, K-major:
    (b8, scale_b). Rowwise: one scale per row of w; blockwise: 128 x 128 blocks."""
    q, s = quantize(w, recipe, 128, dtype)
    return q.t(), (s.t() if s.dim() == 2 else s)


def _product(left, right, bias, out_dtype, fast_accum: bool):
    (a8, sa), (b8, sb) = left, right
    return scaled_mm(a8, b8, sa, sb, bias, out_dtype, "none", fast_accum)


class _Linear(torch.autograd.Function):
    """y = x @ w.T + bias with FP8 products (x 2-D (tokens, K), w (N, K)); see the module's docstring."""

    @staticmethod
    def forward(ctx, x, w, bias, recipe: str):
        ctx.recipe = recipe
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.save_for_backward(x, w)
        b = None if bias is None else bias.to(x.dtype)
        return _product(_left(x, recipe, E4M3), _right(w, recipe, E4M3), b, x.dtype,
                        fast_accum=recipe != "blockwise")

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        recipe = ctx.recipe
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        gx = gw = gb = None
        if need_x:       # (T, N) @ (N, K): over N
            gx = _product(_left(gy, recipe, E5M2), _right(w.t(), recipe, E4M3), None, x.dtype, False)
        if need_w:       # (N, T) @ (T, K): over the tokens
            gw = _product(_left(gy.t(), recipe, E5M2), _right(x.t(), recipe, E4M3), None, w.dtype, False)
        if need_b and ctx.bias_dtype is not None:     # one reduction in float32, in the bias's dtype
            gb = gy.sum(0, dtype=torch.float32).to(ctx.bias_dtype)
        return gx, gw, gb, None


_TAKES = (torch.float32, torch.bfloat16, torch.float16)


def linear(x, weight, bias=None, recipe: str = "rowwise"):
    """``x @ weight.T + bias`` with FP8 products and their gradients (x (..., K), weight (N, K),
    bias (N,)); the result in x's dtype (float32, bfloat16 or float16)."""
    F8.check_recipe(recipe)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise TiledmmError(f"weight must be a 2-D tensor (out_features, in_features); got {_what(weight, 'weight')}")
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[-1] != weight.shape[1]:
        raise TiledmmError(f"x's last dimension must be in_features = {weight.shape[1]}; got {_what(x, 'x')}")
    for name, t in (("x", x), ("weight", weight), ("bias", bias)):
        if t is not None and t.dtype not in _TAKES:
            raise TiledmmError(f"an fp8 linear takes float32, bfloat16 or float16 tensors; got {describe(t, name)}")
    lead = x.shape[:-1]
    y = _Linear.apply(x.reshape(-1, x.shape[-1]), weight, bias, recipe)     # the bias: in the epilogue
    return y.reshape(*lead, weight.shape[0])


def _what(t, name: str) -> str:
    return describe(t, name) if isinstance(t, torch.Tensor) else type(t).__name__


def supported(x, weight, bias) -> str | None:
    """Why ``linear`` does not take a call that ``tiledmm.enable(fp8=...)`` sees (None: it does)."""
    if not (isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor)) or weight.dim() != 2 \
            or x.dim() == 0 or x.shape[-1] != weight.shape[1]:
        return "shapes"
    if x.dtype not in _TAKES or weight.dtype not in _TAKES or (bias is not None and bias.dtype not in _TAKES):
        return f"dtype {x.dtype}"
    from .. import _backend
    dev = "cpu" if _backend.emulating() else "cuda"
    if x.device.type != dev or weight.device != x.device or (bias is not None and bias.device != x.device):
        return f"device {x.device}"
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != weight.shape[0]):
        return "shapes"
    if _backend.emulating() and x.numel() * weight.shape[0] > _backend.emulation_limit(2 ** 24):
        return "over the emulation limit"
    return None


def route_linear(args, kwargs, recipe: str):
    """``tiledmm.enable(fp8=recipe)``'s route for ``F.linear``: (result, None), or (None, why not)."""
    parsed = _impl.linear_args(args, kwargs)
    if parsed is None:
        return None, "shapes"
    x, w, bias = parsed
    why = supported(x, w, bias)
    return (None, why) if why else (linear(x, w, bias, recipe), None)
