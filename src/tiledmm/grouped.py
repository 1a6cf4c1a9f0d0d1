"""``tiledmm.grouped_matmul``: grouped products for Mixture-of-Experts, ``torch._grouped_mm``'s semantics.

One call multiplies every expert's slice of the tokens by that expert's weights, in one launch of one
persistent kernel (``kernels/block/grouped.py``), without reading the group sizes on the host: ``offs``
stays on the device, so the call never waits for the GPU and can be captured in a CUDA graph.

    a (M, K)    @ b (G, K, N), offs (G,) -> (M, N)     rows offs[g-1]:offs[g] of a times b[g] (MoE forward)
    a (G, M, K) @ b (K, N),    offs (G,) -> (M, N)     columns offs[g-1]:offs[g] of b times a[g]
    a (M, K)    @ b (K, N),    offs (G,) -> (G, M, N)  group g sums over K = offs[g-1]:offs[g] (weight gradient)
    a (G, M, K) @ b (G, K, N)            -> (G, M, N)  equal groups (a batch), no offs

``offs``: int32, 1-D, on the operands' device, the groups' cumulative ends (the first group starts at
0); groups may be empty and of any size. Offsets should not decrease and not pass the grouped
dimension's extent; neither can be checked without reading them on the host, so the kernel defines
what it does instead: an offset past the extent counts as the extent, and each end is taken as the
largest offset so far (a decreasing offset gives an empty group), so groups never overlap. Where the
groups end before the extent (offs[-1] < M in the first layout, < N in the second) the rest of the
result is zero: it belongs to no group (``torch._grouped_mm`` leaves it unwritten).

``bias``: one row per group -- (G, N) -- or, where the groups split the columns (the second layout),
one value per column, (N,); added in the kernel's epilogue with ``activation`` ("relu", "gelu",
"gelu_tanh", "silu"), before the store in ``out_dtype`` (default: the inputs' dtype). Inputs are never
modified. Differentiable (``tiledmm.ops``' operator ``torch.ops.tiledmm.grouped_mm``) in a, b and bias.
"""
from __future__ import annotations

from . import _backend
from ._arrays import TiledmmError

_backend.mode()     # GPU or emulation is decided before torch is imported (importing torch may import triton)
import torch  # noqa: E402

from ._grouped_core import EMULATION_LIMIT, Problem, check, compute  # noqa: E402,F401  (the engine)
from .ops import _grouped as _op  # noqa: E402  (the operator: autograd, torch.compile)
from .ops._impl import check_activation  # noqa: E402


def grouped_matmul(a, b, offs=None, *, out_dtype=None, bias=None, activation: str | None = None, out=None,
                   precision: str | None = None):
    """``activation(a @ b + bias)`` per group, as ``torch._grouped_mm(a, b, offs)`` groups it (see the
    module's docstring for the four layouts, ``offs`` and ``bias``).

    a, b: torch tensors of one float dtype (bfloat16, float16; float32, float64) on the GPU (the CPU in
        emulation), any strides; offs: int32 group ends on the same device (None for 3-D @ 3-D).
    out_dtype: the result's dtype (default: the inputs'; float32 keeps the fp32 accumulator).
    bias, activation: the fused epilogue ("relu", "gelu", "gelu_tanh", "silu" or None).
    out: a tensor of the result's shape and dtype that receives it (and is returned).
    precision: float32 only, "ieee" (exact, default) or "tf32" (tensor cores).
    Never synchronises with the GPU; differentiable in a, b and bias (not into ``out``)."""
    act = check_activation(activation)
    check(a, b, offs, bias, out_dtype, act, out)
    if out is not None and out.requires_grad and out.is_leaf and torch.is_grad_enabled():
        raise TiledmmError(f"out {tuple(out.shape)} is a leaf tensor that requires grad: it cannot receive the "
                           "result in place; pass out=None and use the returned tensor")
    if out is not None and not _op.recorded(a, b, bias) and not torch.compiler.is_compiling():
        return compute(a, b, offs, bias, out_dtype, act, precision, out)
    y = _op.grouped(a, b, offs, bias, out_dtype, act, precision)
    if out is None:
        return y
    out.copy_(y)
    return out


__all__ = ["grouped_matmul", "check", "compute", "Problem"]
