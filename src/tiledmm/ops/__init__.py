"""tiledmm as a PyTorch operator: ``torch.ops.tiledmm.matmul`` / ``torch.ops.tiledmm.gemm``
(autograd, fake implementations for ``torch.compile``), the routing of ``tiledmm.matmul``
calls that need gradients, and ``enable()``, which sends a whole model's matmuls through tiledmm.

Importing this package registers the operators, and tells Dynamo to trace a call of
``tiledmm.matmul`` as those operators (``torch.compiler.substitute_in_graph``), so a compiled
function calling ``tiledmm.matmul`` has no graph break.
"""
from __future__ import annotations

from typing import Any

from .._backend import mode

mode()  # GPU or emulation is decided before torch is imported (importing torch may import triton)
import torch  # noqa: E402

from .. import api, registry  # noqa: E402
from .._arrays import TiledmmError  # noqa: E402
from . import _library  # noqa: E402  (registers torch.ops.tiledmm.*)
from .mode import enable  # noqa: E402

__all__ = ["enable", "maybe_autograd"]


def _needs_grad(a, b, out, alpha, beta) -> bool:
    if not torch.is_grad_enabled():
        return False
    return a.requires_grad or b.requires_grad or (isinstance(alpha, torch.Tensor) and alpha.requires_grad) or \
        (out is not None and beta != 0.0 and out.requires_grad)


def maybe_autograd(a: Any, b: Any, out: Any, alpha: Any, beta: Any, kernel: str | None, tile: Any,
                   precision: str | None, stream: Any, max_device_bytes: Any, options: dict) -> Any:
    """``tiledmm.matmul``'s call, differentiable (``_library.matmul``/``gemm``), where it records a graph
    (torch tensors, grad mode on, and a, b, a tensor alpha or out's beta-term needing a gradient);
    None where it does not (then ``tiledmm.matmul`` runs as always)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or not _needs_grad(a, b, out, alpha, beta):
        return None
    if tile is not None or stream is not None or max_device_bytes is not None or options:
        raise TiledmmError("tile=, stream=, max_device_bytes= and kernel options are not differentiable: "
                           "call tiledmm.matmul on tensors that need no gradient (detach them) to use them")
    beta = api._scalar("beta", beta)
    if not isinstance(alpha, torch.Tensor):
        alpha = api._scalar("alpha", alpha)
    if out is not None and out.requires_grad and out.is_leaf:
        raise TiledmmError(f"out {tuple(out.shape)} is a leaf tensor that requires grad: it cannot receive the "
                           "result in place; pass out=None and use the returned tensor")
    return _differentiable(a, b, out, alpha, beta, kernel, precision)


def _differentiable(a, b, out, alpha, beta: float, kernel, precision):
    scale = isinstance(alpha, torch.Tensor)
    al = 1.0 if scale else float(alpha)
    c = out if beta != 0.0 else None
    if scale and c is not None:
        raise TiledmmError("a tensor alpha with beta != 0 is not supported; pass alpha as a number")
    if al == 1.0 and c is None:
        y = _library.matmul(a, b, kernel, precision)
    else:
        y = _library.gemm(a, b, c, None, al, beta, -1, "none", False, kernel, precision)
    if scale:          # a tensor alpha (its gradient too): the scaling outside the kernel
        y = y * alpha.to(y.dtype)
    if out is None:
        return y
    out.copy_(y)
    return out


registry.provide("autograd", maybe_autograd)     # tiledmm.matmul's door for tensors that need gradients


@torch.compiler.substitute_in_graph(api.matmul, skip_signature_check=True)
def _traced_matmul(a, b, *, kernel=None, tile=None, out=None, alpha=1.0, beta=0.0, precision=None, stream=None,
                   max_device_bytes=None, **options):
    """What Dynamo traces for ``tiledmm.matmul``: the operators, never tiledmm's caches."""
    if tile is not None or stream is not None or max_device_bytes is not None or options:
        raise TiledmmError("under torch.compile tiledmm.matmul takes kernel=, out=, alpha=, beta= and "
                           "precision= only")
    return _differentiable(a, b, out, alpha, float(beta), kernel, precision)
