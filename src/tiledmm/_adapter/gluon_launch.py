"""The adapter's part for Gluon kernels: launching a compiled kernel that takes host-side TMA descriptors
through its C launch (Triton 3.6's ``wrap_handle_tensordesc``), and making a device's context current in a
new thread. See the package's docstring for the versions checked and the fallback."""
from __future__ import annotations

import inspect
from typing import Callable

from .. import _adapter as A
from .launch import BoundLaunch

# -- Triton: the launcher of a kernel with host-side TMA descriptors (Gluon) ------------------------------
#
# Triton 3.6 wraps the C launch of such a kernel (``wrap_handle_tensordesc``): every call turns each
# descriptor argument into (tensor map, *shape, *strides) with ``make_tensordesc_arg``, which fills a fresh
# 128-byte CUtensorMap (``cuTensorMapEncodeTiled``). A caller that keeps the expanded arguments per
# (pointer, shape, strides) can call the C launch under the wrapper itself. Used only where the
# wrapper's body is the one below (compared as source) and Triton's own expansion of the call's real
# descriptors agrees with the stand-in's (``tensordesc_launch``); any other case: None, and the caller
# launches through ``kernel[grid](...)``.

_KNOWN_WRAPPER = ("def inner(*args): final_args = list(args[:_BASE_ARGS_FORMAT_LEN]) tensordesc_idx = 0 "
                  "for i, arg in enumerate(args[_BASE_ARGS_FORMAT_LEN:]): if i in tensordesc_indices: "
                  "final_args.extend(make_tensordesc_arg(arg, tensordesc_meta[tensordesc_idx])) "
                  "tensordesc_idx += 1 else: final_args.append(arg) return launcher(*final_args)")


class _Base:
    """The base tensor's pointer, as ``make_tensordesc_arg`` reads it (``.data_ptr()``)."""
    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr

    def data_ptr(self) -> int:
        return self.ptr


class _Desc:
    """What ``make_tensordesc_arg`` reads of a descriptor (no tensor kept alive)."""
    __slots__ = ("base", "shape", "strides", "padding")

    def __init__(self, ptr: int, shape, strides):
        self.base, self.shape, self.strides, self.padding = _Base(ptr), list(shape), list(strides), "zero"


class TensorDescLaunch(BoundLaunch):
    """How to launch one compiled kernel with host TMA descriptors without Triton's Python launcher: a
    ``BoundLaunch`` of the C launch under Triton's wrapper (no global scratch), called with every
    descriptor argument replaced by ``expand(i, ptr, shape, strides)``: (tensor map, *shape, *strides)
    of descriptor parameter ``i`` over memory at ``ptr`` (zero padding), as Triton's wrapper computes
    it. ``metadata``: each descriptor parameter's tensor-map metadata (swizzle, element type, block:
    what ``expand`` depends on besides its arguments); ``params``: the kernel's parameter names in
    order, as compiled. Immutable."""

    __slots__ = ("expand", "metadata", "params")

    def __init__(self, launch, cooperative: bool, pdl: bool, function, packed, expand: Callable, metadata: list,
                 params: tuple):
        super().__init__(launch, cooperative, pdl, function, packed, 0)
        for name, value in (("expand", expand), ("metadata", metadata), ("params", params)):
            object.__setattr__(self, name, value)


def tensordesc_launch(ck, descs) -> TensorDescLaunch | None:
    """The ``TensorDescLaunch`` of CompiledKernel ``ck`` whose descriptor arguments, in order, were
    ``descs`` (Gluon's TensorDescriptor objects of a call just made through ``kernel[grid]``), or
    None: where direct launches are off, the kernel needs global or profiling scratch, or anything
    differs from Triton 3.6's form (the caller launches through ``kernel[grid](...)``). ``descs``
    None: the stand-ins' expansion is not compared again -- for a kernel from the index whose entry
    notes that it was bound in an earlier process (the comparison depends only on Triton's files and
    the kernel's tensor-map metadata, both in the index key)."""
    bound = A.bind_compiled(ck)
    if bound is None or bound.scratch_bytes:
        return None
    inner = bound.launch
    try:
        code = inner.__code__
        body = " ".join(" ".join(inspect.getsource(inner).split("\n")).split())
        if body != _KNOWN_WRAPPER:
            return None
        cells = dict(zip(code.co_freevars, (c.cell_contents for c in inner.__closure__)))
        raw, metas, make = cells["launcher"], list(cells["tensordesc_meta"]), inner.__globals__["make_tensordesc_arg"]
        if (descs is not None and len(metas) != len(descs)) or any(m is None for m in metas):
            return None                 # descriptors not lowered to tensor maps: another expansion

        def expand(i: int, ptr: int, shape, strides) -> list:
            return make(_Desc(ptr, shape, strides), metas[i])

        for i, d in enumerate(descs or ()):     # the stand-in's expansion is Triton's for the real descriptor
            real, mine = make(d, metas[i]), expand(i, d.base.data_ptr(), d.shape, d.strides)
            if len(real) != len(mine) or type(real[0]) is not type(mine[0]) or \
                    [int(x) for x in real[1:]] != [int(x) for x in mine[1:]]:
                return None
        return TensorDescLaunch(raw, bound.cooperative, bound.pdl, bound.function, bound.packed, expand,
                                [dict(m) for m in metas], tuple(ck.src.signature))
    except Exception:   # noqa: BLE001  a changed Triton: the public launch
        return None


def ensure_context(index: int) -> bool:
    """Make device ``index``'s primary CUDA context current in this thread where none is (a thread
    that has not touched CUDA yet: Triton's launcher makes it current itself, its tensor-map filler
    does not). True where it made one current. (CUDA's driver API, through ctypes.)"""
    import ctypes
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    ctx, dev = ctypes.c_void_p(), ctypes.c_int()
    if lib.cuCtxGetCurrent(ctypes.byref(ctx)) != 0 or ctx.value:
        return False
    if lib.cuDeviceGet(ctypes.byref(dev), index) != 0 or lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) != 0:
        return False
    return lib.cuCtxSetCurrent(ctx) == 0
