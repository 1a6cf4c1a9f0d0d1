"""The baseline every kernel is measured against: cuBLAS through ``torch.matmul``.

``precision`` picks cuBLAS's float32 mode: "ieee" (true float32 products, TF32 off,
the default) or "tf32". Registered as kernel ``cublas`` so the API, the harness and
the benchmark treat it like any other kernel.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

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


@dataclass
class TorchLaunch:
    a: Any
    b: Any
    out: Any
    precision: str
    alpha: float = 1.0
    beta: float = 0.0

    def run(self) -> None:
        import torch
        with fp32_matmul_precision(self.precision):
            if self.beta == 0.0 and self.alpha == 1.0:
                torch.matmul(self.a, self.b, out=self.out)
            elif self.out.dim() == 2:
                torch.addmm(self.out, self.a, self.b, beta=self.beta, alpha=self.alpha, out=self.out)
            else:
                torch.baddbmm(self.out, self.a, self.b, beta=self.beta, alpha=self.alpha, out=self.out)

    host_out: Any = None   # the caller's host Operand, when the result must be copied back

    def finish(self) -> None:
        if self.host_out is not None:
            self.host_out.assign_from_torch(self.out)


def _prepare(a, b, out, tile, opts):
    return TorchLaunch(a.torch_view("cuda"), b.torch_view("cuda"), out.torch_view("cuda"),
                       opts.get("precision") or "ieee", opts.get("alpha", 1.0), opts.get("beta", 0.0),
                       out if out.on_host else None)


SPEC: KernelSpec = register(KernelSpec(
    name="cublas", family="library", summary="cuBLAS via torch.matmul (the baseline); precision ieee|tf32",
    dtypes=("float64", "float32", "float16", "bfloat16"), prepare=_prepare, batched=True,
    options=("precision", "alpha", "beta"), emulation_limit=None, order=0))
