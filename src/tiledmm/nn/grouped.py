"""``tiledmm.nn.GroupedLinear``: the experts of a Mixture-of-Experts layer as one parameter, one grouped
product (``tiledmm.grouped_matmul``) for all of them.

The weight is (experts, out_features, in_features) -- each expert's slice is an ``nn.Linear`` weight, so
a dense model's layers stack into it and its state_dict reads like theirs -- and the layer multiplies by
its transpose, ``x @ weight[g].T`` for the tokens routed to expert g. That is the layout MoE blocks use
with ``torch._grouped_mm`` (weights K-contiguous: the forward reads them with the copy engine K-major,
the input gradient row-major; the weight gradient comes out in the weight's own layout). The bias is
(experts, out_features); the activation runs in the kernel's epilogue.
"""
from __future__ import annotations

import math

import torch

from .._arrays import TiledmmError
from ..ops import _grouped
from ..ops._impl import check_activation


class GroupedLinear(torch.nn.Module):
    """``y[rows of expert g] = activation(x[rows of expert g] @ weight[g].T + bias[g])``.

    forward(x, offs): x (tokens, in_features) sorted by expert, offs the int32 cumulative token counts
    per expert on x's device (``torch.cumsum(counts, 0, dtype=torch.int32)``; never read on the host);
    returns (tokens, out_features). Tokens after offs[-1] belong to no expert: their rows are zero.
    Initialised per expert as ``torch.nn.Linear`` is (uniform in ±1/sqrt(in_features))."""

    def __init__(self, num_experts: int, in_features: int, out_features: int, bias: bool = False, device=None,
                 dtype=None, activation: str | None = None, precision: str | None = None):
        super().__init__()
        if min(num_experts, in_features, out_features) < 1:
            raise TiledmmError(f"GroupedLinear needs at least one expert, input and output feature; got "
                               f"num_experts={num_experts}, in_features={in_features}, out_features={out_features}")
        self.num_experts, self.in_features, self.out_features = num_experts, in_features, out_features
        kw = {"device": device, "dtype": dtype}
        self.weight = torch.nn.Parameter(torch.empty(num_experts, out_features, in_features, **kw))
        self.bias = torch.nn.Parameter(torch.empty(num_experts, out_features, **kw)) if bias else None
        self.activation = check_activation(activation)
        self.precision = precision
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.in_features)
        torch.nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            torch.nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x, offs):
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != self.in_features:
            raise TiledmmError(f"GroupedLinear takes x of shape (tokens, {self.in_features}); got "
                               f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
        return _grouped.grouped(x, self.weight.mT, offs, self.bias, None, self.activation, self.precision)

    def extra_repr(self) -> str:
        return (f"num_experts={self.num_experts}, in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, activation={self.activation}")
