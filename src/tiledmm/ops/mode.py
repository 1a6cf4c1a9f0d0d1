"""``tiledmm.enable()``: a ``TorchFunctionMode`` that sends a model's matrix products through tiledmm.

Inside ``with tiledmm.enable(): model(x)``, ``torch.matmul``, ``@``, ``mm``, ``bmm``, ``addmm``,
``baddbmm`` and ``F.linear`` (functions and Tensor methods) run through tiledmm's operators
(``torch.ops.tiledmm`` while torch.compile traces; in eager the same computation without the
dispatcher's layers) -- with their autograd, so ``loss.backward()`` runs tiledmm's kernels too --
wherever tiledmm
supports the call: torch tensors of one float dtype on the kernels' device (CUDA; the CPU in
emulation), no ``out=``. Every other call goes to torch unchanged. ``nn.MultiheadAttention``'s
projections are inside one torch function (``F.multi_head_attention_forward``) that the mode
sees only as a whole: they stay in torch, and the counts say so. Under ``torch.autocast`` a routed
call's float32/float16/bfloat16 tensors are cast to autocast's dtype first, as autocast casts them
for torch's own kernels (these products are on its lower-precision list). The mode counts what went where;
``enable(report=True)`` prints the counts on exit, and ``summary()`` returns them.
"""
from __future__ import annotations

import math
from collections import Counter

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .. import _backend
from .._arrays import TiledmmError
from . import _grouped, _impl, _library

_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


_precision = _impl.float32_precision     # float32 follows torch's own tf32 setting


def _unsupported(a, b, c=None, bias=None, bias_dim=-1) -> str | None:
    """Why tiledmm does not take this call (None: it does)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return "not tensors"
    dt, dev = a.dtype, a.device
    if dt not in _DTYPES:
        return f"dtype {dt}"
    if b.dtype != dt or c is not None and c.dtype != dt or bias is not None and bias.dtype != dt:
        return "mixed dtypes"
    emulating = _backend.emulating()
    if dev.type != ("cpu" if emulating else "cuda") or b.device != dev or c is not None and c.device != dev \
            or bias is not None and bias.device != dev:
        return f"device {dev}"
    try:
        res = _impl.check(a, b, c, bias, bias_dim, "none")
    except TiledmmError:
        return "shapes"
    if emulating and math.prod(res) * a.shape[-1] > _backend.emulation_limit(2 ** 24):
        return "over the emulation limit"
    return None


def _gemm(a, b, c=None, bias=None, alpha=1.0, beta=0.0):
    """The routed call: ``tiledmm.ops``' entry (the operators only where a tracer needs them)."""
    prec = _precision(a.dtype)
    if c is None and bias is None and alpha == 1.0:
        return _library.matmul(a, b, None, prec)
    return _library.gemm(a, b, c, bias, float(alpha), float(beta), -1, "none", False, None, prec)


def _matmul(args, kwargs, ranks=None):
    if kwargs or len(args) != 2:
        return None, "out= or keyword arguments"
    a, b = args
    why = _unsupported(a, b)
    if why is None and ranks is not None and (a.dim(), b.dim()) != ranks:
        why = "shapes"
    if why is None and ranks == (3, 3) and a.shape[0] != b.shape[0]:
        why = "shapes"
    return (None, why) if why else (_gemm(a, b), None)


def _addmm(args, kwargs, rank: int):
    if not kwargs and len(args) == 3:          # the common call: no keywords
        c, a, b = args
        alpha = beta = 1
    else:
        names = ("input", "mat1", "mat2") if rank == 2 else ("input", "batch1", "batch2")
        kw = dict(zip(names, args))
        kw.update(kwargs)
        if set(kw) - set(names) - {"alpha", "beta"} or len(args) > 3:
            return None, "out= or extra arguments"
        c, a, b = kw.get(names[0]), kw.get(names[1]), kw.get(names[2])
        alpha, beta = kw.get("alpha", 1), kw.get("beta", 1)
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (alpha, beta)):
        return None, "tensor alpha/beta"
    if not isinstance(c, torch.Tensor) or not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) \
            or a.dim() != rank or b.dim() != rank:
        return None, "shapes"
    n = b.shape[-1]
    if beta == 1 and c.dim() <= rank and c.shape[-1:] == (n,) and c.numel() == n:
        # input broadcast along rows ((N,), (1, N), (1, 1, N)): a bias along N, in the kernel's epilogue,
        # never a full-size copy of it
        bias = c if c.dim() == 1 else c.reshape(n)
        why = _unsupported(a, b, None, bias)
        return (None, why) if why else (_gemm(a, b, None, bias, alpha), None)
    why = _unsupported(a, b, c)
    return (None, why) if why else (_gemm(a, b, c, None, alpha, beta), None)


def _linear(args, kwargs):
    parsed = _impl.linear_args(args, kwargs)
    if parsed is None:
        return None, "shapes"
    x, w, bias = parsed
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        return None, "shapes"
    why = _unsupported(x, w.mT, None, bias)
    return (None, why) if why else (_gemm(x, w.mT, None, bias), None)


_ROUTES = {
    torch.matmul: ("matmul", _matmul), torch.Tensor.matmul: ("matmul", _matmul),
    torch.Tensor.__matmul__: ("matmul", _matmul),
    torch.Tensor.__rmatmul__: ("matmul", lambda args, kw: _matmul((args[1], args[0]), kw)),
    torch.mm: ("mm", lambda args, kw: _matmul(args, kw, (2, 2))),
    torch.Tensor.mm: ("mm", lambda args, kw: _matmul(args, kw, (2, 2))),
    torch.bmm: ("bmm", lambda args, kw: _matmul(args, kw, (3, 3))),
    torch.Tensor.bmm: ("bmm", lambda args, kw: _matmul(args, kw, (3, 3))),
    torch.addmm: ("addmm", lambda args, kw: _addmm(args, kw, 2)),
    torch.Tensor.addmm: ("addmm", lambda args, kw: _addmm(args, kw, 2)),
    torch.baddbmm: ("baddbmm", lambda args, kw: _addmm(args, kw, 3)),
    torch.Tensor.baddbmm: ("baddbmm", lambda args, kw: _addmm(args, kw, 3)),
    F.linear: ("linear", _linear),
    # one torch function whose projections run inside it, where this mode cannot see them: counted, to say so
    F.multi_head_attention_forward: ("multi_head_attention", lambda args, kw: (None, "its projections run in torch")),
}
if hasattr(torch, "_grouped_mm"):      # Mixture-of-Experts layers' grouped products (ops/_grouped.py)
    _ROUTES[torch._grouped_mm] = ("grouped_mm", _grouped.route)


def _autocast(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call's arguments as ``torch.autocast`` would hand them to a lower-precision op: where
    autocast is on for the first tensor's device, every float32/float16/bfloat16 tensor in its
    dtype (float64 and other arguments unchanged); else the arguments themselves."""
    first = next((x for x in args if isinstance(x, torch.Tensor)), None)
    if first is None or not torch.is_autocast_enabled(first.device.type):
        return args, kwargs
    dt = torch.get_autocast_dtype(first.device.type)

    def cast(x):
        return x.to(dt) if isinstance(x, torch.Tensor) and x.dtype in _AUTOCAST_FROM and x.dtype != dt else x
    return tuple(cast(x) for x in args), {k: cast(v) for k, v in kwargs.items()}


_AUTOCAST_FROM = (torch.float32, torch.float16, torch.bfloat16)


def _fp8_route(recipe: str):
    """``F.linear``'s handler under ``enable(fp8=recipe)``: ``tiledmm.ops._fp8.route_linear``."""
    import functools
    from .. import fp8
    from . import _fp8
    return functools.partial(_fp8.route_linear, recipe=fp8.check_recipe(recipe))


class enable(TorchFunctionMode):
    """``with tiledmm.enable(report=False) as mode:`` -- route the model's matrix products through
    tiledmm where it supports them (see the module's docstring); ``mode.summary()`` says what went
    where: {op: {"tiledmm": n, "torch": n}} and the reasons for the calls left to torch. ``fp8``:
    "tensorwise", "rowwise" or "blockwise" sends ``F.linear`` (a model's linears) through tiledmm's
    FP8 linear (``tiledmm.nn.Linear(fp8=...)``'s recipe) instead."""

    def __init__(self, report: bool = False, fp8: str | None = None):
        super().__init__()
        self.report = report
        self.fp8 = None if fp8 is None else _fp8_route(fp8)     # F.linear with FP8 products (tiledmm.fp8)
        self.counts: Counter = Counter()        # (op, "tiledmm" | "torch") -> calls
        self.reasons: Counter = Counter()       # (op, why it went to torch) -> calls

    def __torch_function__(self, func, types, args=(), kwargs=None):
        route = _ROUTES.get(func)          # every torch call of the model comes here: one dict look-up
        if route is None:                 # for those not routed
            return func(*args, **kwargs) if kwargs else func(*args)
        kwargs = kwargs or {}
        name, handler = route
        if self.fp8 is not None and name == "linear":
            handler = self.fp8
        result, why = handler(*_autocast(args, kwargs))
        if why is None:
            self.counts[name, "tiledmm"] += 1
            return result
        self.counts[name, "torch"] += 1
        self.reasons[name, why] += 1
        return func(*args, **kwargs)

    def summary(self) -> "Summary":
        ops = sorted({op for op, _ in self.counts})
        return Summary(calls={op: {w: self.counts[op, w] for w in ("tiledmm", "torch")} for op in ops},
                       to_torch={f"{op}: {why}": n for (op, why), n in sorted(self.reasons.items())})

    def __exit__(self, *exc):
        out = super().__exit__(*exc)
        if self.report:
            print(self.summary())
        return out


class Summary(dict):
    """``enable().summary()``: a dict ({"calls": {op: {"tiledmm": n, "torch": n}}, "to_torch": {"op: why": n}})
    that prints as a small table."""

    def __str__(self) -> str:
        calls, to_torch = self["calls"], self["to_torch"]
        if not calls:
            return "tiledmm.enable: no matrix product was called"
        width = max(len("op"), *map(len, calls))
        lines = ["tiledmm.enable: calls of each op, by where they ran",
                 f"  {'op':<{width}}  {'tiledmm':>7}  {'torch':>7}"]
        lines += [f"  {op:<{width}}  {c['tiledmm']:>7,}  {c['torch']:>7,}" for op, c in calls.items()]
        lines += [f"  to torch: {k} ({n:,} call{'s' * (n != 1)})" for k, n in to_torch.items()]
        return "\n".join(lines)
