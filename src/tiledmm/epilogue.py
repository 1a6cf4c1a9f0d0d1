"""The GEMM epilogue every kernel family shares: ``C = alpha * P + beta * C``.

Kernels that do not fold alpha and beta into their own store (the SIMT ladder,
split-K's reduction, cuBLAS through torch) write the product P into a temporary;
this one function then finishes the job with the BLAS rules:

* ``beta == 0``: C's old contents are never read (NaN or Inf there cannot leak);
* ``beta != 0``: C is read, scaled and added, in float32 (float64 for float64 C);
* K = 0 (no product at all): ``C = beta * C`` -- ``fill_scaled``.
"""
from __future__ import annotations


def _acc_dtype(t):
    import torch
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def apply(c, p, alpha: float, beta: float) -> None:
    """c <- alpha * p + beta * c, in place on torch tensor ``c`` (``p``: the product, any float dtype)."""
    if beta == 0.0:
        if alpha == 1.0:
            c.copy_(p)
        else:
            c.copy_(p.to(_acc_dtype(c)) * alpha)
        return
    acc = p.to(_acc_dtype(c)) * alpha if alpha != 1.0 else p.to(_acc_dtype(c))
    acc.add_(c.to(acc.dtype), alpha=beta)
    c.copy_(acc)


def fill_scaled(c, beta: float) -> None:
    """c <- beta * c (the GEMM with K = 0); beta == 0 writes zeros without reading c."""
    if beta == 0.0:
        c.zero_()
    elif beta != 1.0:
        c.copy_(c.to(_acc_dtype(c)) * beta)
