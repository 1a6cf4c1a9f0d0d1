"""The device GEMM callbacks of out-of-core runs (and of tiledmm.distributed's local products):
``gemm(a, b, c, alpha, beta)`` computes c = alpha * a @ b + beta * c in place on device tensors,
on torch's current stream.

``tiledmm_gemm`` launches a registered kernel through its KernelSpec (the registry's door, not
tiledmm.matmul: the public API calls into this package, never the other way round).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from .. import _backend, epilogue, registry
from .._arrays import TiledmmError

Gemm = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float, float], object]

# the kernel ``tiledmm_gemm()`` runs when none is named: tiledmm.matmul's default for float32 and 16-bit
DEFAULT_KERNEL = "triton"


def torch_gemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, alpha: float, beta: float) -> None:
    """c = alpha*a@b + beta*c in place with torch (cuBLAS on a GPU); beta=0 ignores c. A wider c
    (float32 for 16-bit a, b) takes the product in its dtype (``torch.mm(out_dtype=)`` where torch has
    it for the device, else on upcast operands)."""
    if c.dtype == a.dtype:
        c.addmm_(a, b, beta=beta, alpha=alpha)
        return
    try:
        p = torch.mm(a, b, out_dtype=c.dtype)
    except (TypeError, RuntimeError, NotImplementedError):
        p = torch.mm(a.to(c.dtype), b.to(c.dtype))
    if beta == 0:
        c.copy_(p)
        if alpha != 1:
            c.mul_(alpha)
    else:
        c.mul_(beta).add_(p, alpha=alpha)


def tiledmm_gemm(kernel: Optional[str] = None, **options) -> Gemm:
    """A callback running the registered kernel ``kernel`` (default: the Triton block kernel, picked
    as tiledmm.matmul's default picks: no timing unless TILEDMM_TUNE=on) with ``options`` (e.g.
    ``variant=``, ``precision=``). ``c`` may be wider than a and b (float32 for 16-bit inputs: the
    accumulator). Kernels without their own alpha/beta (the SIMT ones) compute a @ b into a
    temporary and the shared epilogue combines (straight into c when alpha = 1, beta = 0 and c has
    a's dtype). The kernel and options are checked at first call."""
    specs: dict = {}

    def spec_for(dtype: torch.dtype):
        name = str(dtype).replace("torch.", "")
        spec = specs.get(name)
        if spec is None:
            emulating = _backend.emulating()       # decided before a kernel family (Triton) is imported
            spec = registry.get(kernel or DEFAULT_KERNEL)
            spec.check_call(name, options, "" if kernel else "; name a kernel for it (tiledmm_gemm('tiled'))")
            if emulating and spec.emulation_limit is None:
                raise TiledmmError(f"kernel {spec.name!r} needs a GPU; none is in use (emulation)")
            limit = _backend.emulation_limit(spec.emulation_limit) if emulating else None
            spec = specs[name] = (spec, spec.check_tile(None), limit)
        return spec

    def gemm(a, b, c, alpha, beta):
        if a.device.type == "cpu" and not _backend.emulating():
            # host tensors on a GPU machine (gloo ranks sharing one GPU): the product runs on the GPU
            dev = torch.device("cuda", torch.cuda.current_device())
            C = c.to(dev) if beta != 0 else torch.empty(c.shape, dtype=c.dtype, device=dev)
            gemm(a.to(dev), b.to(dev), C, alpha, beta)
            c.copy_(C)
            return
        spec, tile, limit = spec_for(a.dtype)
        work = a.shape[0] * a.shape[1] * b.shape[1]
        if limit is not None and work > limit:
            raise TiledmmError(f"a block product of {a.shape[0]}x{a.shape[1]} @ {a.shape[1]}x{b.shape[1]} is "
                               f"{work:,} multiply-adds, over the emulation limit of {limit:,} for kernel "
                               f"{spec.name!r} (no GPU: the kernel runs in a simulator); give a smaller "
                               "max_device_bytes, or raise TILEDMM_EMULATION_LIMIT if you will wait")
        if spec.epilogue:
            spec.launch(a, b, c, tile=tile, opts=options, alpha=float(alpha), beta=float(beta))
            return
        if alpha == 1 and beta == 0 and c.dtype == a.dtype:
            spec.launch(a, b, c, tile=tile, opts=options)
            return
        p = torch.empty(c.shape, dtype=a.dtype, device=a.device)
        spec.launch(a, b, p, tile=tile, opts=options)
        epilogue.apply(c, p, float(alpha), float(beta))
    return gemm
