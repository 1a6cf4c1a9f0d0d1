"""``linear(x, weight, bias=None, activation=None)``: ``act(x @ weightᵀ + bias)`` in one tiledmm GEMM.

The bias (along N) and the activation -- "relu", "gelu" (erf), "gelu_tanh", "silu" -- are applied
in the Triton kernel's epilogue (one pass over the output) where the dispatcher runs a variant
with one (``Variant.epilogue``), and in a torch pass over the result after the product otherwise
(split-K, tma-copy, float64, tensors off the kernels' device). Differentiable in x, weight and bias; for gelu and
silu the forward also keeps the pre-activation when a gradient will be needed (their backward
reads it, as torch's does).
"""
from __future__ import annotations

import torch

from .._arrays import TiledmmError, describe
from ..ops import _fp8, _library
from ..ops._impl import ACTIVATIONS, check_activation
from ..ops._impl import activation as activation_fn

__all__ = ["linear", "check_fp8", "ACTIVATIONS"]


def check_fp8(fp8) -> str | None:
    """An FP8 recipe name ("tensorwise", "rowwise", "blockwise") or None."""
    if fp8 is None:
        return None
    from ..fp8 import check_recipe
    return check_recipe(fp8)


def linear(x, weight, bias=None, activation: str | None = None, *, precision: str | None = None,
           fp8: str | None = None):
    """``act(x @ weight.T + bias)`` like ``torch.nn.functional.linear`` (x: (..., in_features),
    weight: (out_features, in_features), bias: (out_features,)) with a fused activation.
    precision: float32 only, "ieee" (default) or "tf32". fp8: an FP8 recipe (``tiledmm.fp8``) for the
    product and its gradients; the activation then follows in torch."""
    act = check_activation(activation)
    if fp8 is not None:
        y = _fp8.linear(x, weight, bias, check_fp8(fp8))
        return y if act == "none" else activation_fn(y, act)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise TiledmmError(f"weight must be a 2-D tensor (out_features, in_features); got {_what(weight, 'weight')}")
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[-1] != weight.shape[1]:
        raise TiledmmError(f"x's last dimension must be in_features = {weight.shape[1]}; got {_what(x, 'x')}")
    keep = act not in ("none", "relu") and torch.is_grad_enabled() and \
        (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))
    return _library.gemm(x, weight.mT, None, bias, 1.0, 0.0, -1, act, keep, None, precision)


def _what(t, name: str) -> str:
    return describe(t, name) if isinstance(t, torch.Tensor) else type(t).__name__
