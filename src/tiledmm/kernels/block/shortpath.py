"""The Triton family's short path: repeat calls without the API's checks or the dispatcher.

The family registers ``fast_plan`` on its KernelSpec; ``tiledmm.api`` asks it for a plan per
(array type, dtypes, kernel, precision) on the first call of that kind that passes the API's
checks, and calls the plan first on every call of the kind from then on. A plan returns None for anything unusual (the full
path then handles the call, checks and all): another device, broadcasting, out overlapping
an input, a zero stride in out, alpha/beta that are not plain numbers.

Each plan keys its bound launches by *class* (``dispatch.class_key``): the device, ranks, bit
lengths of M, N and K, which strides are unit, the strides' and pointers' 16-byte alignment
residues, alpha == 1 and beta == 0. The dispatcher computes its plan key from the class
(``dispatch.plan_of``), so one class always means one variant and config. A key's first call runs the dispatcher and binds
(``fastlaunch.bind``): for a plain single-kernel variant a ``ClassLaunch`` that computes sizes,
strides and grid per call (any new M of a seen class: no Python planning, no new closure);
for the others an exact-signature bound launch (``fastlaunch.replay``) per signature.

A first call on torch tensors walks: ``api.matmul`` -> ``api._matmul`` (checks) ->
``TorchPlan.__call__`` -> ``TorchPlan._bind`` -> ``block.dispatch.resolved`` (the pick) ->
``fastlaunch.bind`` -> the variant's launch -> ``FastKernel`` -> Triton; a repeat call:
``api.matmul`` -> ``TorchPlan.__call__`` -> ``ClassLaunch`` -> the C launch.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ... import _adapter, invariance
from ..._arrays import dtype_name, to_torch
from . import fastlaunch
from . import dispatch as dispatcher
from .dispatch import check_precision, class_key

MAX_SIGNATURES = 512     # bound launches a plan keeps (then it starts again)


class TorchPlan:
    """The short path for torch CUDA tensors: 2-D or 3-D operands (equal batch), same dtype in
    and out, torch's current stream and device (any device: keys carry its index)."""

    def __init__(self, a, precision: str | None):
        import torch
        self.dtype = a.dtype
        self.precision = check_precision(str(a.dtype).replace("torch.", ""), precision)
        self.esize = a.element_size()
        self.m = max(1, 16 // self.esize)
        self.empty, self.Tensor, self.grad_enabled = torch.empty, torch.Tensor, torch.is_grad_enabled
        self.bound: dict[tuple, Any] = {}     # class key -> (ClassLaunch or None, variant launch, {sig: bound})
        self.seen: dict[tuple, Any] = {}      # exact signature -> its class's entry
        self.current = _adapter.device_getter()
        self.stream = _adapter.raw_stream_getter()
        # made in batch-invariant mode (api keeps such plans apart): its classes are keyed by exact N and K
        # too, as the mode's plans are (invariant.key_of)
        self.exact_nk = invariance.get()

    def __call__(self, a, b, out, alpha, beta):
        ta, tb = type(alpha), type(beta)
        if ta is not float and ta is not int or tb is not float and tb is not int:
            return None
        if (a.requires_grad or b.requires_grad or out is not None and out.requires_grad) and self.grad_enabled():
            return None                          # a differentiable call: the full path (tiledmm.ops)
        sa, sb = a.shape, b.shape
        if len(sa) != len(sb) or len(sa) not in (2, 3):
            return None
        device = a.device
        index = device.index
        if sa[-1] != sb[-2] or b.device != device or self.current() != index or b.dtype != self.dtype:
            return None
        if len(sa) == 3 and sa[0] != sb[0]:     # the plan's key fixes both ranks equal
            return None
        shape = (*sa[:-1], sb[-1])
        if out is None:
            if beta:
                return None
            c = self.empty(*shape, dtype=self.dtype, device=device)   # (sizes as arguments: ~1 us less than a tuple, H100 host)
        else:
            if type(out) is not self.Tensor or out.shape != shape or out.dtype != self.dtype or out.device != device:
                return None
            c = out
        if 0 in shape or sa[-1] == 0:
            return None
        st_a, st_b, st_c = a.stride(), b.stride(), c.stride()
        pa, pb, pc = a.data_ptr(), b.data_ptr(), c.data_ptr()
        if out is not None:     # out may not overlap an input (_arrays.overlaps, from the values at hand)
            if 0 in st_c:
                return None
            es = self.esize
            end_c = pc + (_extent(shape, st_c) + 1) * es
            if pa < end_c and pc < pa + (_extent(sa, st_a) + 1) * es or \
                    pb < end_c and pc < pb + (_extent(sb, st_b) + 1) * es:
                return None
        sig = (index, sa, sb, st_a, st_b, st_c, pa & 15, pb & 15, pc & 15, alpha, beta)
        hit = self.seen.get(sig)          # a signature seen before: its class's entry without the key
        if hit is None:
            key = class_key(index, sa, sb, st_a, st_b, st_c, pa, pb, pc, self.m, alpha, beta)
            if self.exact_nk:
                key = (*key, sa[-1], sb[-1])
            hit = self.bound.get(key)
            if hit is None:
                self._bind(key, sig, a, b, c, float(alpha), float(beta))
                return c
            if len(self.seen) >= MAX_SIGNATURES:
                self.seen.clear()
            self.seen[sig] = hit
        cls, fn, exact = hit
        stream = self.stream(index)
        if cls is not None:
            env = fastlaunch.env(sa, sb, st_a, st_b, st_c, pa, pb, pc, float(alpha), float(beta))
            if cls(stream, env) is False:
                fn(a, b, c, alpha=float(alpha), beta=float(beta))      # compiles a new specialisation
            return c
        go = exact.get(sig)
        if go is None:
            if len(exact) >= MAX_SIGNATURES:
                exact.clear()
            exact[sig] = fastlaunch.replay(fn, a, b, c, alpha=float(alpha), beta=float(beta)) or False
        elif go is False or go(stream, pa, pb, pc) is False:
            fn(a, b, c, alpha=float(alpha), beta=float(beta))   # not bound, or bound on another stream
        return c

    def _bind(self, key: tuple, sig: tuple, a, b, c, alpha: float, beta: float) -> None:
        """A class's first call (``sig`` its exact signature): the dispatcher's pick, run once and
        bound (on torch's current stream)."""
        fn = dispatcher.resolved(a, b, c, self.precision, alpha, beta)
        cls, go = fastlaunch.bind(fn, a, b, c, alpha, beta)
        if not _adapter.decided():
            return                       # (inside a CUDA graph capture, before the launch self-test)
        exact = {}
        if cls is None:
            exact[sig] = go or False
        if len(self.bound) >= MAX_SIGNATURES:
            self.bound.clear()
        self.bound[key] = (cls, fn, exact)


class PointerPlan:
    """The short path for CuPy arrays and numba device arrays: the same bound launches as
    torch's, keyed by the device and the arrays' own shapes, byte strides and pointers, on CuPy's
    current stream (CuPy) or the default stream (numba); the output is allocated by the array's
    own library. Exact signatures only; signatures whose launch is more than one plain launch take
    the full path. Any device: the arrays' (CuPy's current device, which both must be on) or, for
    numba's arrays, torch's current device."""

    def __init__(self, kind: str, a, precision: str | None):
        self.kind, self.dtype, self.type = kind, a.dtype, type(a)
        self.precision = check_precision(dtype_name(a, kind), precision)
        self.exact: dict[tuple, Any] = {}
        self.empties: dict[int, Any] = {}      # device -> the output allocator there
        if kind == "cupy":
            import cupy
            self.ptr = lambda x: x.data.ptr
            current = cupy.cuda.get_current_stream
            self.stream = lambda: current().ptr
            device = cupy.cuda.runtime.getDevice

            def where(x, y) -> int:         # -1: not one device, or not CuPy's current one
                d = x.data.device_id
                return d if d == y.data.device_id == device() else -1
            self.where = where
        else:
            self.ptr = _adapter.numba_pointer
            self.stream = lambda: 0
            current = _adapter.device_getter()
            self.where = lambda x, y: current()

    def _empty(self, index: int):
        empty = self.empties.get(index)
        if empty is None:
            if self.kind == "cupy":
                import cupy
                empty = cupy.empty
            else:
                empty = numba_empty(index, self.dtype)
            empty = self.empties.setdefault(index, empty)
        return empty

    def __call__(self, a, b, out, alpha, beta):
        ta, tb = type(alpha), type(beta)
        if ta is not float and ta is not int or tb is not float and tb is not int:
            return None
        sa, sb = a.shape, b.shape
        if len(sa) != len(sb) or len(sa) not in (2, 3):
            return None
        if sa[-1] != sb[-2] or b.dtype != self.dtype:
            return None
        index = self.where(a, b)
        if index < 0:
            return None
        if len(sa) == 3 and sa[0] != sb[0]:
            return None
        shape = (*sa[:-1], sb[-1])
        if 0 in shape or sa[-1] == 0:
            return None
        if out is None:
            if beta:
                return None
            c = self._empty(index)(shape, dtype=self.dtype)
        else:
            if type(out) is not self.type or out.shape != shape or out.dtype != self.dtype or 0 in out.strides:
                return None
            c = out
        pa, pb, pc = self.ptr(a), self.ptr(b), self.ptr(c)
        if out is not None and (_span_overlap(c, pc, a, pa) or _span_overlap(c, pc, b, pb)):
            return None
        sig = (index, sa, sb, a.strides, b.strides, c.strides, pa & 15, pb & 15, pc & 15, alpha, beta)
        go = self.exact.get(sig, False)
        if go is None:                  # this signature takes the full path
            return None
        if go is not False:
            return c if go(self.stream(), pa, pb, pc) is not False else None
        if len(self.exact) >= MAX_SIGNATURES:
            self.exact.clear()
        done, self.exact[sig] = self._bind(index, a, b, c, float(alpha), float(beta))
        return c if done else None

    def _bind(self, index: int, a, b, c, alpha, beta) -> tuple:
        """The first call of a signature on device ``index``, through torch views on this kind's
        stream: (whether it ran, the bound launch or None)."""
        import torch
        device = torch.device("cuda", index)
        A, B, C = to_torch(a, self.kind), to_torch(b, self.kind), to_torch(c, self.kind)
        if C.data_ptr() != self.ptr(c) or A.data_ptr() != self.ptr(a) or B.data_ptr() != self.ptr(b):
            return False, None          # copied by the conversion (a layout torch cannot view)
        # CuPy's current stream (its null stream: torch's default stream, never ExternalStream(0), a pool stream)
        stream = _adapter.torch_stream(self.stream(), device) if self.kind == "cupy" else \
            torch.cuda.default_stream(device)
        with torch.cuda.device(device), torch.cuda.stream(stream):
            fn = dispatcher.resolved(A, B, C, self.precision, alpha, beta)
            go = fastlaunch.replay(fn, A, B, C, alpha=alpha, beta=beta)
        return True, go


def numba_empty(index: int, dtype):
    """numba's ``device_array`` for the short path's outputs, but from torch's caching allocator:
    numba's own allocates with ``cuMemAlloc`` on every call and frees in batches with
    ``cuMemFree``, which waits for the whole device. The array owns the tensor it views."""
    import torch

    from ..._backend import numba_cuda
    numba_empty_ = numba_cuda().device_array
    make = _adapter.numba_array_maker(index)
    if make is None:
        return numba_empty_
    tdtype = torch.from_numpy(np.empty(0, dtype)).dtype
    device = torch.device("cuda", index)
    size = dtype.itemsize
    raw_stream = _adapter.raw_stream_getter()

    def empty(shape, dtype=None):
        if raw_stream(index):           # torch's blocks belong to its current stream: the kernels run on
            return numba_empty_(shape, dtype=dtype)    # the default stream, so only then are they safe
        t = torch.empty(shape, dtype=tdtype, device=device)
        strides, step = [], size
        for n in reversed(shape):
            strides.append(step)
            step *= n
        return make(shape, tuple(strides[::-1]), dtype, t.data_ptr(), step, t)
    return empty


def _extent(shape, strides) -> int:
    """How far an array's last element lies from its first, in its strides' unit (non-negative strides)."""
    return sum((n - 1) * s for n, s in zip(shape, strides))


def _span_overlap(x, px: int, y, py: int) -> bool:
    """Whether two arrays' byte ranges (from their own strides) intersect."""
    def end(t, p):
        return p + _extent(t.shape, map(abs, t.strides)) + t.dtype.itemsize
    return px < end(y, py) and py < end(x, px)


def fast_plan(kind: str, a, precision: str | None):
    """The KernelSpec hook: a short-path plan for arrays of ``kind`` like ``a``, or None where the
    family has none (emulation, host arrays, other kinds, ranks other than 2 and 3)."""
    from ..._backend import emulating
    if emulating() or kind not in ("torch", "cupy", "numba") or len(a.shape) not in (2, 3):
        return None
    if kind == "torch":
        return TorchPlan(a, precision) if a.device.type == "cuda" else None
    return PointerPlan(kind, a, precision)
