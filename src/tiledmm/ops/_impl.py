"""The forward computations behind the ``torch.ops.tiledmm`` operators (eager, on real tensors).

``gemm`` computes ``act(alpha * a @ b + beta * c + bias)`` with numpy's matmul rules for a and b,
c broadcast to the result, bias a 1-D tensor along N (the result's last dimension) or M (its
second-to-last); a C broadcast along rows ((N,), (1, N), ...) with beta 1 is taken as a bias along
N (never copied to full size). Where the dispatcher's pick for the call has a fused epilogue
(``Variant.epilogue``: the blocked, TMA and Gluon variants; the pick is asked with the passes a
variant without one would leave) it does it all in one pass over C; otherwise (split-K, tma-copy,
the SIMT ladder, float64) the product runs through ``tiledmm.matmul``, then the bias is added in
place (one pass) and the activation is one pass more, in the result's dtype (rounded as torch's
eager ``act(linear(x, w, b))`` is).
"""
from __future__ import annotations

from .. import _backend, invariance
from .._arrays import TiledmmError, describe

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")
BIAS_ALONG = {-1: 1, -2: 2}          # bias_dim -> the kernel's BIAS mode (1: along N, 2: along M)
_FUSED_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")


def linear_args(args, kwargs):
    """``F.linear``'s (input, weight, bias) from a routed call's arguments, or None where it names others
    (the routes of ``enable()``, plain and FP8, read them alike)."""
    if not kwargs and 2 <= len(args) <= 3:     # the common call: no keywords
        return args if len(args) == 3 else (*args, None)
    kw = dict(zip(("input", "weight", "bias"), args))
    kw.update(kwargs)
    if set(kw) - {"input", "weight", "bias"}:
        return None
    return kw.get("input"), kw.get("weight"), kw.get("bias")


def float32_precision(dtype) -> str | None:
    """float32 follows torch's own setting: tf32 where torch would use it for matmuls (GPU only); None
    for the other dtypes (the routed layers of ``enable()`` and of the grouped product ask here)."""
    import torch
    if dtype != torch.float32 or _backend.emulating():
        return None
    return "tf32" if torch.backends.cuda.matmul.allow_tf32 else None


def check_activation(act) -> str:
    """The activation's canonical name; None means "none"."""
    name = "none" if act is None else act
    if name not in ACTIVATIONS:
        raise TiledmmError(f"activation must be one of {list(ACTIVATIONS)} or None, got {act!r}")
    return name


def activation(x, act: str):
    """act(x) in torch (the fallback's epilogue and the keep-pre-activation path)."""
    import torch
    import torch.nn.functional as F
    if act == "relu":
        return torch.relu(x)
    if act == "gelu":
        return F.gelu(x)
    if act == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if act == "silu":
        return F.silu(x)
    return x


def activation_backward(grad, act: str, saved):
    """d act / d z times ``grad``: ``saved`` is the output y for relu, the pre-activation z otherwise."""
    import torch
    aten = torch.ops.aten
    if act == "relu":
        return aten.threshold_backward(grad, saved, 0)
    if act in ("gelu", "gelu_tanh"):
        return aten.gelu_backward(grad, saved, approximate="none" if act == "gelu" else "tanh")
    if act == "silu":
        if torch.is_grad_enabled() and (grad.requires_grad or saved.requires_grad):
            s = torch.sigmoid(saved)             # recorded (create_graph): aten's silu_backward has no derivative
            return grad * s * (1 + saved * (1 - s))
        return aten.silu_backward(grad, saved)
    return grad


def check(a, b, c, bias, bias_dim: int, act: str) -> tuple:
    """Validate a call (one-line TiledmmErrors naming shapes and dtypes); returns the result shape."""
    for name, t in (("a", a), ("b", b)):
        if t.dtype not in _float_dtypes():
            raise TiledmmError(f"unsupported dtype: {describe(t, name)}; tiledmm supports float32, float64, "
                               "float16, bfloat16")
    if a.dtype != b.dtype:
        raise TiledmmError(f"mixed dtypes: {describe(a, 'a')}; {describe(b, 'b')}")
    if a.device != b.device:
        raise TiledmmError(f"a and b are on different devices: {describe(a, 'a')}; {describe(b, 'b')}")
    sa, sb = a.shape, b.shape
    if len(sa) == 0 or len(sb) == 0:
        raise TiledmmError(f"matmul needs tensors of at least one dimension; got {describe(a, 'a')}; "
                           f"{describe(b, 'b')}")
    kb = sb[0] if len(sb) == 1 else sb[-2]
    if sa[-1] != kb:
        raise TiledmmError(f"inner dimensions differ: a is {tuple(sa)}, b is {tuple(sb)}")
    if len(sa) == 2 and len(sb) == 2:           # the common case first
        res = (sa[0], sb[1])
    else:
        try:
            batch = _checked_broadcast(tuple(sa[:-2]), tuple(sb[:-2]))
        except ValueError:
            raise TiledmmError(f"batch dimensions do not broadcast: a is {tuple(sa)}, b is {tuple(sb)}") from None
        res = tuple(batch) + (tuple(sa[-2:-1]) if len(sa) > 1 else ()) + (tuple(sb[-1:]) if len(sb) > 1 else ())
    if act != "none":
        check_activation(act)
    if c is not None:
        try:
            if tuple(_checked_broadcast(tuple(c.shape), res)) != res:
                raise ValueError
        except ValueError:
            raise TiledmmError(f"c {tuple(c.shape)} does not broadcast to the result's shape {res}") from None
        if c.device != a.device:
            raise TiledmmError(f"c is on another device: {describe(c, 'c')}; a is on {a.device}")
    if bias is not None:
        if bias_dim not in BIAS_ALONG:
            raise TiledmmError(f"bias_dim must be -1 (along N) or -2 (along M), got {bias_dim}")
        if len(res) < -bias_dim or bias.dim() != 1 or bias.shape[0] != res[bias_dim]:
            raise TiledmmError(f"bias must be 1-D with {'N' if bias_dim == -1 else 'M'} elements for a result of "
                               f"shape {res}; got {describe(bias, 'bias')}")
        if bias.device != a.device or not bias.is_floating_point():
            raise TiledmmError(f"bias must be a float tensor on {a.device}; got {describe(bias, 'bias')}")
    return res


_FLOATS: tuple = ()


def _float_dtypes() -> tuple:
    """The dtypes tiledmm takes (torch imported on first use)."""
    global _FLOATS
    if not _FLOATS:
        import torch
        _FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
    return _FLOATS


def _checked_broadcast(x: tuple, y: tuple) -> list:
    n = max(len(x), len(y))
    x, y = (1,) * (n - len(x)) + x, (1,) * (n - len(y)) + y
    out = []
    for p, q in zip(x, y):
        if p != q and p != 1 and q != 1:
            raise ValueError
        out.append(q if p == 1 else p)
    return out


def gemm(a, b, c, bias, alpha: float, beta: float, bias_dim: int, act: str, kernel, precision):
    """A new tensor ``act(alpha * a @ b + beta * c + bias)`` of a's dtype (see the module's docstring).
    Called where no autograd is recorded (grad mode off, or no input needs a gradient)."""
    res = check(a, b, c, bias, bias_dim, act)
    if c is None or beta == 0.0:
        c, beta = None, 0.0
    elif bias is None and beta == 1.0 and res and c.dtype == a.dtype and c.shape[-1:] == res[-1:] and \
            c.numel() == res[-1]:
        c, bias, bias_dim, beta = None, c.reshape(-1), -1, 0.0     # C broadcast along rows: a bias, no copy
    out = a.new_empty(res)
    if c is not None:
        out.copy_(c.expand(res))
    if out.numel() == 0:
        return out
    if kernel in (None, "triton") and _fused(a, b, out, bias, alpha, beta, bias_dim, act, precision):
        return out
    from .. import api
    api.matmul(a, b, out=out, alpha=alpha, beta=beta, kernel=kernel, precision=precision)
    if bias is not None:            # one pass, in place in out's dtype: rounded as torch's eager linear
        out.add_(bias if bias_dim == -1 else bias[:, None])
    return out if act == "none" else activation(out, act)      # one pass more: the activation's own result


def _fused(a, b, out, bias, alpha, beta, bias_dim, act, precision) -> bool:
    """The whole call in one Triton kernel's epilogue, where the dispatcher's pick for this call is
    a variant whose launch takes the fused epilogue (``Variant.epilogue``: the blocked, the
    persistent TMA and the Gluon kernels; a plain product: whatever it picks); False (nothing done) where it
    cannot be: other dtypes or devices, 1-D operands, batches the kernel does not take, a pick
    without the epilogue and a bias or an activation to apply."""
    if str(a.dtype) not in _FUSED_DTYPES or a.device.type != ("cpu" if _backend.emulating() else "cuda") \
            or a.dim() < 2 or b.dim() < 2:
        return False
    A, B, C = a, b, out
    if B.dim() == 3 and B.shape[0] == 1:
        B = B[0]
    if A.dim() == 3 and A.shape[0] == 1 and B.dim() == 3:
        A = A[0]
    if A.dim() > 2 and B.dim() == 2 and (bias is None or bias_dim == -1):   # (..., M, K) @ (K, N): one tall
        try:                                                                  # 2-D product
            A, C = A.view(-1, A.shape[-1]), C.view(-1, C.shape[-1])
        except RuntimeError:
            if not invariance.get():
                return False
            # batch-invariant mode: the rows' kernel and fused epilogue whatever A's strides (a copy of A)
            A, C = A.reshape(-1, A.shape[-1]), C.view(-1, C.shape[-1])
    elif A.dim() > 3 or B.dim() > 3 or B.dim() == 3 and not (A.dim() == 2 or A.shape[0] == B.shape[0]):
        return False
    if _backend.emulating() and (A.data_ptr() == B.data_ptr() or
                                 C.numel() * A.shape[-1] > _backend.emulation_limit(2 ** 24)):
        return False        # the interpreter keys its copies by address (api._compute); the limit: api's
    from ..kernels.block import dispatch as BM
    prec = BM.check_precision(str(a.dtype).replace("torch.", ""), precision)
    fn = BM.resolved(A, B, C, prec, alpha, beta, (bias is not None) + 2 * (act != "none"))
    if not getattr(fn, "epilogue", False):
        if bias is None and act == "none":
            fn(A, B, C, alpha=alpha, beta=beta)
            return True
        return False
    import torch
    if bias is not None and bias.dtype not in (C.dtype, torch.float32):
        bias = bias.float()         # the kernels read a bias of C's dtype or float32 (gluon-ws: only those)
    fn(A, B, C, alpha=alpha, beta=beta, bias=bias, bias_mode=BIAS_ALONG[bias_dim] if bias is not None else 0,
       act=act)
    return True
