"""``tiledmm.nn.Linear``: ``torch.nn.Linear`` (same parameters, initialisation and state_dict) whose
forward is ``tiledmm.nn.functional.linear``, with an optional fused activation, or with ``fp8=`` an
FP8 training recipe (``tiledmm.ops._fp8.linear``: e4m3 forward, e5m2 gradients, dynamic scales)."""
from __future__ import annotations

import torch

from .functional import check_activation, check_fp8, linear


class Linear(torch.nn.Linear):
    """``y = activation(x @ weight.T + bias)``; ``activation``: None, "relu", "gelu", "gelu_tanh", "silu";
    ``fp8``: None, or "tensorwise", "rowwise", "blockwise" for FP8 products (weights stay in their dtype).
    A subclass of ``torch.nn.Linear``: loads its state_dict and is loaded by it."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None,
                 activation: str | None = None, precision: str | None = None, fp8: str | None = None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.activation = check_activation(activation)
        self.precision = precision
        self.fp8 = check_fp8(fp8)

    def forward(self, x):
        return linear(x, self.weight, self.bias, self.activation, precision=self.precision, fp8=self.fp8)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", activation={self.activation}" + (f", fp8={self.fp8}" if self.fp8 else "")
