"""The ``torch.ops.tiledmm`` operators: definitions, fake (meta) implementations and autograd.

Defined with ``torch.library.Library`` (not ``@custom_op``, whose Python wrapper costs
microseconds a call), with one CompositeExplicitAutograd kernel each (CPU and CUDA alike:
``tiledmm.matmul`` moves host tensors itself), a fake implementation that only computes the
result's shape, so ``torch.compile(fullgraph=True)`` keeps each call as one opaque node, and
``torch.library.register_autograd`` for the backward, which computes the products again on
transposed views (dA = dC Bᵀ, dB = Aᵀ dC: no copies where the kernels read the strides).

    tiledmm::matmul(a, b, kernel_name, precision) -> a @ b       (numpy's matmul rules)
    tiledmm::gemm(a, b, c, bias, alpha, beta, bias_dim, act, keep_pre, kernel_name, precision)
        -> (y, z): y = act(alpha * a @ b + beta * c + bias); z = the pre-activation when
           ``keep_pre`` and act is gelu/gelu_tanh/silu (their backward reads it), else empty
    (``kernel_name``: tiledmm.matmul's ``kernel=``, named apart from inductor's own ``kernel`` argument)

``matmul`` and ``gemm`` here are what tiledmm's own layers call (``enable()``, ``tiledmm.nn``,
``tiledmm.matmul`` on tensors needing gradients): the operators while Dynamo or export trace (and
for tensor subclasses: fake, functional tensors), and otherwise the same computation without the
dispatcher's layers -- a plain ``torch.autograd.Function`` (``_MatmulFunction``, ``_GemmFunction``:
the operators' own setup and backward) where a gradient is recorded, the kernels directly where
none is. The backward's products go through the same entry, so they call the kernels directly
unless ``create_graph`` records them (double backward).
"""
from __future__ import annotations

import torch

from .. import api
from . import _impl

LIB = torch.library.Library("tiledmm", "DEF")
LIB.define("matmul(Tensor a, Tensor b, str? kernel_name=None, str? precision=None) -> Tensor")
LIB.define("gemm(Tensor a, Tensor b, Tensor? c, Tensor? bias, float alpha, float beta, int bias_dim, str act, "
           "bool keep_pre, str? kernel_name=None, str? precision=None) -> (Tensor, Tensor)")


def _keeps(keep_pre: bool, act: str) -> bool:
    return keep_pre and act not in ("none", "relu")


# -- eager kernels ----------------------------------------------------------------------------------

def _matmul(a, b, kernel_name=None, precision=None):
    # detached: no re-entry into autograd
    return api.matmul(a.detach(), b.detach(), kernel=kernel_name, precision=precision)


def _gemm(a, b, c, bias, alpha, beta, bias_dim, act, keep_pre, kernel_name=None, precision=None):
    d = [None if t is None else t.detach() for t in (a, b, c, bias)]
    y, z = _gemm_kept(*d, alpha, beta, bias_dim, act, keep_pre, kernel_name, precision)
    return y, a.new_empty((0,)) if z is None else z


def _gemm_kept(a, b, c, bias, alpha, beta, bias_dim, act, keep_pre, kernel, precision):
    """(y, z): z the pre-activation where it is kept, else None; no autograd recorded."""
    if _keeps(keep_pre, act):
        z = _impl.gemm(a, b, c, bias, alpha, beta, bias_dim, "none", kernel, precision)
        return _impl.activation(z, act), z
    return _impl.gemm(a, b, c, bias, alpha, beta, bias_dim, act, kernel, precision), None


LIB.impl("matmul", _matmul, "CompositeExplicitAutograd")
LIB.impl("gemm", _gemm, "CompositeExplicitAutograd")


# -- fake implementations: shapes only -------------------------------------------------------------

@torch.library.register_fake("tiledmm::matmul", lib=LIB)
def _matmul_fake(a, b, kernel_name=None, precision=None):
    return a.new_empty(_impl.check(a, b, None, None, -1, "none"))


@torch.library.register_fake("tiledmm::gemm", lib=LIB)
def _gemm_fake(a, b, c, bias, alpha, beta, bias_dim, act, keep_pre, kernel_name=None, precision=None):
    res = _impl.check(a, b, c, bias, bias_dim, act)
    return a.new_empty(res), a.new_empty(res if _keeps(keep_pre, act) else (0,))


# -- autograd ---------------------------------------------------------------------------------------

def _product(x, y, alpha: float, kernel, precision):
    """alpha * x @ y through ``matmul``/``gemm`` (recorded where create_graph asks: double backward)."""
    if alpha == 1.0:
        return matmul(x, y, kernel, precision)
    return gemm(x, y, None, None, alpha, 0.0, -1, "none", False, kernel, precision)


def _transposed(t) -> bool:
    """A 2-D transposed view of a contiguous tensor (a weight ``w`` passed as ``w.mT``)."""
    return t.dim() == 2 and not t.is_contiguous() and t.mT.is_contiguous()


def _grad_a(g, b, a, alpha: float, kernel, precision):
    # each gradient in its operand's layout (a transposed view's as the transposed product): the
    # tensor AccumulateGrad receives has the leaf's strides and is kept without a copy
    if _transposed(a):
        return _product(b, g.mT, alpha, kernel, precision).mT
    return _product(g, b.mT, alpha, kernel, precision)


def _grad_b(a, g, b, alpha: float, kernel, precision):
    if _transposed(b):                         # weight.mT (linear): dW = dYᵀ x, torch's own, in W's layout
        return _product(g.mT, a, alpha, kernel, precision).mT
    return _product(a.mT, g, alpha, kernel, precision)


def _mm_grads(g, a, b, alpha: float, need_a: bool, need_b: bool, kernel, precision):
    """(dA, dB) of alpha * a @ b for the result's gradient ``g``: numpy's rules backwards
    (1-D operands, broadcast batch dimensions summed as torch sums them); a 2-D operand's
    gradient has that operand's layout (``_grad_a``, ``_grad_b``)."""
    if a.dim() == 2 and b.dim() == 2:          # the common case: no reshapes, no reductions
        return (_grad_a(g, b, a, alpha, kernel, precision) if need_a else None,
                _grad_b(a, g, b, alpha, kernel, precision) if need_b else None)
    a1 = a.unsqueeze(0) if a.dim() == 1 else a
    b1 = b.unsqueeze(-1) if b.dim() == 1 else b
    nbatch = max(a1.dim(), b1.dim()) - 2
    if not (a1 is a and b1 is b and g.dim() == nbatch + 2):     # a 1-D operand: its dimension back in g
        g = g.reshape(tuple(g.shape[:nbatch]) + (a1.shape[-2], b1.shape[-1]))
    ga = gb = None
    if need_a:
        ga = _product(g, b1.mT, alpha, kernel, precision)
        if ga.shape != a1.shape:
            ga = ga.sum_to_size(a1.shape)
        ga = ga if a1 is a else ga.reshape(a.shape)
    if need_b:
        if b1.dim() == 2 and a1.dim() > 2:     # the batch folded into K of one product: no reduction after
            K, N = a1.shape[-1], b1.shape[-1]
            gb = _grad_b(a1.reshape(-1, K), g.reshape(-1, N), b1, alpha, kernel, precision)
        else:
            gb = _product(a1.mT, g, alpha, kernel, precision)
            if gb.shape != b1.shape:
                gb = gb.sum_to_size(b1.shape)
        gb = gb if gb.shape == b.shape else gb.reshape(b.shape)
    return ga, gb


def _shape_only(shape, stride):
    """A stand-in for an operand not saved: its gradient is not needed, only its shape and strides
    (the other operand's gradient is made in the same layout) are read."""
    return torch.empty_strided(shape, stride, device="meta")


def _matmul_setup(ctx, inputs, output):
    a, b, kernel, precision = inputs
    ctx.save_for_backward(a if ctx.needs_input_grad[1] else None, b if ctx.needs_input_grad[0] else None)
    ctx.shapes, ctx.options = ((a.shape, a.stride()), (b.shape, b.stride())), (kernel, precision)


def _matmul_backward(ctx, grad):
    a, b = ctx.saved_tensors
    a = a if a is not None else _shape_only(*ctx.shapes[0])
    b = b if b is not None else _shape_only(*ctx.shapes[1])
    ga, gb = _mm_grads(grad, a, b, 1.0, ctx.needs_input_grad[0], ctx.needs_input_grad[1], *ctx.options)
    return ga, gb, None, None


def _gemm_setup(ctx, inputs, output):
    a, b, c, bias, alpha, beta, bias_dim, act, keep_pre, kernel, precision = inputs
    y, z = output
    keep = _keeps(keep_pre, act)
    recompute = act not in ("none", "relu") and not keep    # gelu/silu without z: computed again in backward
    need = ctx.needs_input_grad
    saved_act = y if act == "relu" else (z if keep else None)
    ctx.save_for_backward(a if need[1] or recompute else None, b if need[0] or recompute else None,
                          c if recompute else None, bias if recompute else None, saved_act)
    ctx.args = (alpha, beta, bias_dim, act, keep_pre, kernel, precision)
    ctx.shapes = ((a.shape, a.stride()), (b.shape, b.stride()), None if c is None else c.shape, c is not None,
                  bias is not None)
    ctx.dtypes = (None if c is None else c.dtype, None if bias is None else bias.dtype)
    if keep:
        ctx.set_materialize_grads(False)        # an unused z's gradient stays None: no zeros added


def _gemm_backward(ctx, gy, gz=None):
    a, b, c, bias, saved = ctx.saved_tensors
    alpha, beta, bias_dim, act, keep_pre, kernel, precision = ctx.args
    a_shape, b_shape, c_shape, has_c, has_bias = ctx.shapes
    need = ctx.needs_input_grad
    if gy is None and gz is None:                      # neither output reached the loss
        return (None,) * 11
    if act not in ("none", "relu") and saved is None:
        saved = gemm(a, b, c if has_c else None, bias, alpha, beta, bias_dim, "none", False, kernel, precision)
    g = None if gy is None else _impl.activation_backward(gy, act, saved)      # one pass (none: gy itself)
    if gz is not None and _keeps(keep_pre, act):
        g = gz if g is None else g + gz
    a = a if a is not None else _shape_only(*a_shape)
    b = b if b is not None else _shape_only(*b_shape)
    ga, gb = _mm_grads(g, a, b, alpha, need[0], need[1], kernel, precision)
    gc = gbias = None
    if has_c and need[2]:                              # reduced first, then scaled: one pass over g
        gc = g.sum_to_size(c_shape)
        gc = (gc * beta if beta != 1.0 else gc).to(ctx.dtypes[0])
    if has_bias and need[3]:                           # one reduction, accumulated in float32 (torch's own
        keep_dim = g.dim() + bias_dim                  # for 16-bit sums), written in the bias's dtype
        dims = tuple(d for d in range(g.dim()) if d != keep_dim)
        gbias = g.sum(dim=dims, dtype=ctx.dtypes[1]) if dims else g.to(ctx.dtypes[1])
    return ga, gb, gc, gbias, None, None, None, None, None, None, None


torch.library.register_autograd("tiledmm::matmul", _matmul_backward, setup_context=_matmul_setup, lib=LIB)
torch.library.register_autograd("tiledmm::gemm", _gemm_backward, setup_context=_gemm_setup, lib=LIB)


# -- the entry tiledmm's layers call: the operators only where a tracer needs them --------------------

_PLAIN = (torch.Tensor, torch.nn.Parameter)     # not fake, functional or other subclasses of Tensor


def _direct(a, b, c=None, bias=None) -> bool:
    """Whether a call may skip the dispatcher: no tracing (Dynamo, export), and tensors that are plain
    torch tensors with storage -- not subclasses (fake, functional) nor torch.func's wrappers (vmap,
    grad: their data pointer raises), which the operators serve."""
    if torch.compiler.is_compiling():
        return False
    try:
        for t in (a, b, c, bias):
            if t is not None and (type(t) not in _PLAIN or t.data_ptr() is None):
                return False
    except RuntimeError:
        return False
    return True


def matmul(a, b, kernel=None, precision=None):
    """``torch.ops.tiledmm.matmul(a, b, kernel, precision)``'s result and gradient, with the host cost
    of one ``autograd.Function`` at most (see the module's docstring)."""
    if not _direct(a, b):
        return torch.ops.tiledmm.matmul(a, b, kernel, precision)
    if (a.requires_grad or b.requires_grad) and torch.is_grad_enabled():
        return _MatmulFunction.apply(a, b, kernel, precision)
    return api.matmul(a, b, kernel=kernel, precision=precision)


def gemm(a, b, c, bias, alpha, beta, bias_dim, act, keep_pre, kernel=None, precision=None):
    """``torch.ops.tiledmm.gemm(...)[0]`` (y) and its gradients, with the host cost of one
    ``autograd.Function`` at most; the pre-activation is kept (``keep_pre``) only where recorded."""
    if not _direct(a, b, c, bias):
        return torch.ops.tiledmm.gemm(a, b, c, bias, alpha, beta, bias_dim, act, keep_pre, kernel, precision)[0]
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad or c is not None and c.requires_grad or
                                    bias is not None and bias.requires_grad):
        out = _GemmFunction.apply(a, b, c, bias, alpha, beta, bias_dim, act, keep_pre, kernel, precision)
        return out[0] if isinstance(out, tuple) else out
    return _impl.gemm(a, b, c, bias, alpha, beta, bias_dim, act, kernel, precision)


class _MatmulFunction(torch.autograd.Function):
    """tiledmm::matmul's autograd without the dispatcher (eager only: the operator is what compiles)."""

    @staticmethod
    def forward(ctx, a, b, kernel, precision):
        y = api.matmul(a, b, kernel=kernel, precision=precision)       # grad mode is off in here
        _matmul_setup(ctx, (a, b, kernel, precision), y)
        return y

    backward = staticmethod(_matmul_backward)


class _GemmFunction(torch.autograd.Function):
    """tiledmm::gemm's autograd without the dispatcher: y alone, or (y, z) where z is kept."""

    @staticmethod
    def forward(ctx, *inputs):
        y, z = _gemm_kept(*inputs)
        _gemm_setup(ctx, inputs, (y, z))
        return y if z is None else (y, z)

    backward = staticmethod(_gemm_backward)
