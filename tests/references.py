"""float64 references the kernel tests compare against (written from the formulas, not from tiledmm)."""
import math

import torch


def activation64(x, act: str):
    """The fused activations in float64: relu, gelu (erf), gelu_tanh (its tanh form), silu; "none": x."""
    if act == "relu":
        return x.clamp_min(0.0)
    if act == "gelu":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if act == "gelu_tanh":
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if act == "silu":
        return x * torch.sigmoid(x)
    return x
