"""The baseline every kernel is measured against: cuBLAS through ``torch.matmul``.

``precision`` picks cuBLAS's float32 mode: "ieee" (true float32 products, TF32 off,
the default) or "tf32". Registered as kernel ``cublas`` so the API, the harness and
the benchmark treat it like any other kernel.
"""
from __future__ import annotations

from contextlib import contextmanager

from ..registry import KernelSpec, register


@contextmanager
def fp32_matmul_precision(precision: str):
    """Set cuBLAS's float32 matmul mode for the duration (restores the old one)."""
    import torch
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _launch(a, b, c, *, tile, opts, alpha=1.0, beta=0.0) -> None:
    import torch
    with fp32_matmul_precision(opts.get("precision") or "ieee"):
        if beta == 0.0 and alpha == 1.0 and c.is_contiguous():
            torch.matmul(a, b, out=c)
        elif c.dim() == 2 and a.dim() == 2 and b.dim() == 2:
            torch.addmm(c, a, b, beta=beta, alpha=alpha, out=c) if c.is_contiguous() else \
                c.copy_(torch.addmm(c, a, b, beta=beta, alpha=alpha))
        else:
            p = torch.matmul(a, b)
            c.copy_(p.mul_(alpha).add_(c, alpha=beta) if beta != 0.0 else p.mul_(alpha))


SPEC: KernelSpec = register(KernelSpec(
    name="cublas", family="library", summary="cuBLAS via torch.matmul (the baseline); precision ieee|tf32",
    dtypes=("float64", "float32", "float16", "bfloat16"), launch=_launch, batched=True, epilogue=True,
    options=("precision",), emulation_limit=None, order=0, block_tile=lambda tile: (tile or 128, tile or 128)))
