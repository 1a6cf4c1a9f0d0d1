"""``tiledmm.nn.Linear``: ``torch.nn.Linear`` (same parameters, initialisation and state_dict) whose
forward is ``tiledmm.nn.functional.linear``, with an optional fused activation."""
from __future__ import annotations

import torch

from .functional import check_activation, linear


class Linear(torch.nn.Linear):
    """``y = activation(x @ weight.T + bias)``; ``activation``: None, "relu", "gelu", "gelu_tanh", "silu".
    A subclass of ``torch.nn.Linear``: loads its state_dict and is loaded by it."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None,
                 activation: str | None = None, precision: str | None = None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.activation = check_activation(activation)
        self.precision = precision

    def forward(self, x):
        return linear(x, self.weight, self.bias, self.activation, precision=self.precision)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", activation={self.activation}"
