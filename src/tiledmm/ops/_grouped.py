"""The grouped product as a PyTorch operator: ``torch.ops.tiledmm.grouped_mm``, its fake implementation,
its autograd, and the route that sends ``torch._grouped_mm`` through it under ``tiledmm.enable()``.

    tiledmm::grouped_mm(a, b, offs, bias, out_dtype, act, keep_pre, precision) -> (y, z)
        y = act(a @ b + bias) per group (``tiledmm.grouped``: the four layouts); z = the pre-activation
        where ``keep_pre`` and act is gelu/gelu_tanh/silu (their backward reads it), else empty

Defined like ``_library``'s operators: one CompositeExplicitAutograd kernel, a fake implementation that
checks the call and computes the result's shape only (``torch.compile(fullgraph=True)`` keeps a call as
one node; nothing reads ``offs``), ``register_autograd`` for the backward, and an entry, ``grouped``,
that runs the operator only where a tracer needs it and otherwise the same computation without the
dispatcher (a plain ``autograd.Function`` where a gradient is recorded).

The backward is grouped products again, on transposed views and with the same ``offs`` (never read on
the host either). With g the gradient of the pre-activation:

    a (M, K) @ b (G, K, N) [rows grouped]:   da = g @ bᵀ (rows grouped)    db = aᵀ @ g (K grouped: (G, K, N))
    a (G, M, K) @ b (K, N) [columns]:         da = g @ bᵀ (K grouped)       db = aᵀ @ g (columns grouped)
    a (M, K) @ b (K, N) -> (G, M, N) [K]:     da = g @ bᵀ (columns grouped) db = aᵀ @ g (rows grouped)
    3-D @ 3-D:                                da = g @ bᵀ, db = aᵀ @ g (batches)

and the bias's gradient sums g over each group's rows (a grouped product with a row of ones where the
groups split the rows or the columns, so the part after the last group, which holds no bias, adds
nothing). Every result the forward writes outside the groups is zero whatever a and b hold, so
nothing flows back from it.
"""
from __future__ import annotations

import torch

from .. import _grouped_core as G
from . import _impl

LIB = torch.library.Library("tiledmm", "FRAGMENT")
LIB.define("grouped_mm(Tensor a, Tensor b, Tensor? offs, Tensor? bias, ScalarType? out_dtype, str act, "
           "bool keep_pre, str? precision=None) -> (Tensor, Tensor)")


def _keeps(keep_pre: bool, act: str) -> bool:
    return keep_pre and act not in ("none", "relu")


def _kept(a, b, offs, bias, out_dtype, act, keep_pre, precision):
    """(y, z): z the pre-activation where it is kept, else None; no autograd recorded."""
    if _keeps(keep_pre, act):
        z = G.compute(a, b, offs, bias, out_dtype, "none", precision)
        return _impl.activation(z, act), z
    return G.compute(a, b, offs, bias, out_dtype, act, precision), None


def _grouped_mm(a, b, offs, bias, out_dtype, act, keep_pre, precision=None):
    d = [None if t is None else t.detach() for t in (a, b, bias)]
    y, z = _kept(d[0], d[1], offs, d[2], out_dtype, act, keep_pre, precision)
    return y, y.new_empty((0,)) if z is None else z


LIB.impl("grouped_mm", _grouped_mm, "CompositeExplicitAutograd")


@torch.library.register_fake("tiledmm::grouped_mm", lib=LIB)
def _grouped_mm_fake(a, b, offs, bias, out_dtype, act, keep_pre, precision=None):
    p = G.check(a, b, offs, bias, out_dtype, act)
    return a.new_empty(p.shape, dtype=p.dtype), a.new_empty(p.shape if _keeps(keep_pre, act) else (0,),
                                                            dtype=p.dtype)


# -- autograd ---------------------------------------------------------------------------------------

def _product(x, y, offs, out_dtype, precision):
    return grouped(x, y, offs, None, out_dtype, "none", precision)


def _bias_grad(g, layout: str, offs, dtype):
    """The gradient of a (G, N) or (N,) bias: g summed over each group's rows, in the bias's dtype."""
    if layout in ("k", "batch"):
        return g.sum(dim=1, dtype=dtype)
    rows = g.shape[0]
    if layout == "m":        # (1, M) @ g grouped along M: (G, 1, N)
        ones = g.new_ones((1, rows))
        return _product(ones, g, offs, dtype, None).squeeze(1)
    ones = g.new_ones((1, 1, rows)).expand(offs.shape[0], 1, rows)     # "n": (G, 1, M) @ g: (1, N)
    return _product(ones, g, offs, dtype, None).squeeze(0)


def _setup(ctx, inputs, output):
    a, b, offs, bias, out_dtype, act, keep_pre, precision = inputs
    y, z = output
    keep = _keeps(keep_pre, act)
    recompute = act not in ("none", "relu") and not keep
    need = ctx.needs_input_grad
    ctx.save_for_backward(a if need[1] or recompute else None, b if need[0] or recompute else None, offs,
                          bias if recompute else None, y if act == "relu" else (z if keep else None))
    ctx.args = (out_dtype, act, keep_pre, precision)
    ctx.meta = (a.dim(), b.dim(), a.shape, b.shape, a.dtype, b.dtype, None if bias is None else bias.dtype,
                b.stride(-2) == 1 and b.stride(-1) != 1)
    if keep:
        ctx.set_materialize_grads(False)


def _backward(ctx, gy, gz=None):
    a, b, offs, bias, saved = ctx.saved_tensors
    out_dtype, act, keep_pre, precision = ctx.args
    da_, db_, a_shape, b_shape, a_dtype, b_dtype, bias_dtype, b_kmajor = ctx.meta
    need = ctx.needs_input_grad
    if gy is None and gz is None:
        return (None,) * 8
    if act not in ("none", "relu") and saved is None:
        saved = grouped(a, b, offs, bias, out_dtype, "none", precision)
    g = None if gy is None else _impl.activation_backward(gy, act, saved)
    if gz is not None and _keeps(keep_pre, act):
        g = gz if g is None else g + gz
    layout = {(2, 3): "m", (3, 2): "n", (2, 2): "k", (3, 3): "batch"}[da_, db_]
    ga = gb = gbias = None
    gin = g.to(a_dtype) if g.dtype != a_dtype else g
    if need[0]:
        # da = g @ bᵀ, grouped as the table in the module's docstring says; "m" and "batch" keep offs' meaning
        ga = _product(gin, b.mT, offs, a_dtype, precision)
    if need[1]:
        # db = aᵀ @ g, computed in b's own memory order: a weight used transposed (an MoE layer's w.mT, K-major)
        # gets its gradient as (gᵀ @ a)ᵀ, the transpose of a contiguous product -- the weight's own layout, so
        # autograd hands it on without a strided copy (a whole extra pass over dW, about 1.4 ms at 64 experts
        # x 2048 x 1408 bf16 on the H100); the layouts map onto each other (m <-> n, k and batch to themselves)
        gb = _product(gin.mT, a, offs, b_dtype, precision).mT if b_kmajor else \
            _product(a.mT, gin, offs, b_dtype, precision)
    if need[3]:
        gbias = _bias_grad(g, layout, offs, bias_dtype)
    return ga, gb, None, gbias, None, None, None, None


torch.library.register_autograd("tiledmm::grouped_mm", _backward, setup_context=_setup, lib=LIB)


# -- the entry tiledmm's layers call --------------------------------------------------------------------

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _direct(*tensors) -> bool:
    """No tracer (Dynamo, export) and plain tensors with storage: the dispatcher may be skipped."""
    if torch.compiler.is_compiling():
        return False
    try:
        for t in tensors:
            if t is not None and (type(t) not in _PLAIN or t.data_ptr() is None):
                return False
    except RuntimeError:
        return False
    return True


def recorded(a, b, bias=None) -> bool:
    """Whether a call on these operands records a gradient."""
    return torch.is_grad_enabled() and (a.requires_grad or b.requires_grad or
                                        (bias is not None and bias.requires_grad))


def grouped(a, b, offs, bias, out_dtype, act: str, precision=None):
    """``torch.ops.tiledmm.grouped_mm(...)[0]`` and its gradients, with the host cost of one
    ``autograd.Function`` at most; the pre-activation is kept only where a gradient is recorded."""
    keep = act not in ("none", "relu") and recorded(a, b, bias)
    if not _direct(a, b, offs, bias):
        return torch.ops.tiledmm.grouped_mm(a, b, offs, bias, out_dtype, act, keep, precision)[0]
    if recorded(a, b, bias):
        out = _GroupedFunction.apply(a, b, offs, bias, out_dtype, act, keep, precision)
        return out[0] if isinstance(out, tuple) else out
    return G.compute(a, b, offs, bias, out_dtype, act, precision)


class _GroupedFunction(torch.autograd.Function):
    """tiledmm::grouped_mm's autograd without the dispatcher: y alone, or (y, z) where z is kept."""

    @staticmethod
    def forward(ctx, *inputs):
        y, z = _kept(*inputs)
        _setup(ctx, inputs, (y, z))
        return y if z is None else (y, z)

    backward = staticmethod(_backward)


# -- torch._grouped_mm under tiledmm.enable() -------------------------------------------------------------

_ROUTED = (torch.bfloat16, torch.float16, torch.float32)


def route(args, kwargs):
    """``tiledmm.enable()``'s handler for ``torch._grouped_mm(mat_a, mat_b, offs=None, bias=None,
    out_dtype=None)``: (result, None) where tiledmm takes the call, else (None, why) and torch runs it.
    Taken: tensors of one of torch's dtypes on the kernels' device, a shape and offs tiledmm accepts, no
    bias (torch takes none), not under autocast (torch decides what autocast does to its own call)."""
    names = ("mat_a", "mat_b", "offs", "bias", "out_dtype")
    if len(args) > len(names) or set(kwargs) - set(names):
        return None, "extra arguments"
    kw = dict(zip(names, args))
    kw.update(kwargs)
    a, b, offs = kw.get("mat_a"), kw.get("mat_b"), kw.get("offs")
    if kw.get("bias") is not None:
        return None, "bias"
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return None, "not tensors"
    if a.dtype not in _ROUTED:
        return None, f"dtype {a.dtype}"
    from .. import _backend
    if a.device.type != ("cpu" if _backend.emulating() else "cuda"):
        return None, f"device {a.device}"
    if torch.is_autocast_enabled(a.device.type):
        return None, "autocast"
    try:
        p = G.check(a, b, offs, None, kw.get("out_dtype"))
    except G.TiledmmError:
        return None, "shapes"
    if _backend.emulating() and p.work > _backend.emulation_limit(G.EMULATION_LIMIT):
        return None, "over the emulation limit"
    from ._impl import float32_precision as _precision
    return grouped(a, b, offs, None, kw.get("out_dtype"), "none", _precision(a.dtype)), None
