"""Accepting the array kinds users hold, and giving back the kind they gave.

Kinds: numpy arrays, torch tensors (CPU or CUDA), CuPy arrays, numba device arrays
and any object with ``__cuda_array_interface__``. Internally every operand is a torch
tensor: device arrays are viewed in place (no copy, strides kept), host arrays through
``torch.from_numpy``. Layouts torch cannot view -- negative strides, byte strides that
are not whole elements -- are first copied to a contiguous array by the array's own
library, so they give the right answer instead of an error or a crash.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from . import _adapter
from ._errors import TiledmmError  # noqa: F401  (tiledmm.TiledmmError; here for the modules that take it from here)

# dtype names used throughout tiledmm (numpy spelling; bfloat16 exists only in torch)
SUPPORTED_DTYPES = ("float64", "float32", "float16", "bfloat16")


def kind_of(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return "numpy"
    mod = type(x).__module__
    if mod.startswith("torch"):
        return "torch"
    if mod.startswith("cupy"):
        return "cupy"
    if mod.startswith("numba"):
        return "numba"
    if hasattr(x, "__cuda_array_interface__"):
        return "cuda_array"
    raise TiledmmError(
        f"unsupported input type {type(x).__module__}.{type(x).__name__}: "
        "expected a numpy array, torch tensor, CuPy array or numba device array")


def dtype_name(x: Any, kind: str) -> str:
    if kind == "torch":
        return str(x.dtype).replace("torch.", "")
    try:
        return np.dtype(x.dtype).name
    except TypeError:
        return str(x.dtype)


def _simulated(x: Any) -> bool:
    return _adapter.numba_is_sim_array(x)


def device_name(x: Any, kind: str) -> str:
    if kind == "numpy":
        return "cpu"
    if kind == "torch":
        return "cpu" if x.device.type == "cpu" else f"cuda:{x.device.index or 0}"
    if _simulated(x):
        return "cuda:0 (simulated)"
    if kind == "cupy":
        return f"cuda:{x.device.id}"
    import torch
    return f"cuda:{torch.cuda.current_device()}"


def on_host(x: Any, kind: str) -> bool:
    return kind == "numpy" or (kind == "torch" and x.device.type == "cpu")


def shape_str(shape) -> str:
    return "x".join(map(str, shape)) or "scalar"


def describe(x: Any, name: str, kind: str | None = None) -> str:
    kind = kind or kind_of(x)
    return f"{name}: {kind} {shape_str(tuple(x.shape))} {dtype_name(x, kind)} on {device_name(x, kind)}"


def overlaps(x, y) -> bool:
    """Whether two torch tensors' memory ranges intersect (conservative: interleaved views count)."""
    if x.device != y.device or x.numel() == 0 or y.numel() == 0:
        return False

    def span(t):
        lo = t.data_ptr()
        return lo, lo + (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()
    (a0, a1), (b0, b1) = span(x), span(y)
    return a0 < b1 and b0 < a1


def _negative(strides) -> bool:
    return any(s < 0 for s in strides)


def to_torch(x: Any, kind: str):
    """A torch tensor over x: the same memory where torch can view it, else a contiguous copy."""
    import torch
    if kind == "torch":
        return x.detach()
    if kind == "numpy":
        if _negative(x.strides) or any(s % x.itemsize for s in x.strides):
            # (an empty array counts as contiguous, so ascontiguousarray would keep its strides)
            x = np.ascontiguousarray(x) if x.size else np.empty(x.shape, x.dtype)
        with warnings.catch_warnings():   # read-only arrays (np.broadcast_to): tiledmm never writes inputs
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(x)
    if _simulated(x):                     # numba's simulator: a host array underneath
        return torch.from_numpy(np.ascontiguousarray(x.copy_to_host()))
    if kind == "cupy":
        if _negative(x.strides):
            import cupy
            with _cupy_stream(torch):
                x = cupy.ascontiguousarray(x) if x.size else cupy.empty(x.shape, x.dtype)
        return torch.from_dlpack(x)
    return _device_view(x, torch)


def _cupy_stream(torch):
    """CuPy's work inside a call on torch's current stream (the caller's stream for the call)."""
    import cupy
    return cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)


class _Interface:
    def __init__(self, cai: dict):
        self.__cuda_array_interface__ = cai


def _positive_view(x: Any, torch):
    """(view, dims): a torch view of a numba (or other ``__cuda_array_interface__``) device
    array over its own bytes with the array's own strides made positive, and the dimensions
    whose strides were negative (the view flipped along them is the array). The array's own
    ``strides`` are used: numba's interface says ``strides: None`` ("contiguous") for some
    zero-stride views."""
    cai = dict(x.__cuda_array_interface__)
    shape = tuple(cai["shape"])
    strides = tuple(getattr(x, "strides", None) or cai.get("strides") or ())
    device = f"cuda:{torch.cuda.current_device()}"
    if not strides or not shape or 0 in shape:
        return torch.as_tensor(_Interface(cai), device=device), []
    ptr = int(cai["data"][0])
    lo = ptr + sum((n - 1) * st for n, st in zip(shape, strides) if st < 0)
    cai.update(data=(lo, cai["data"][1]), strides=tuple(abs(st) for st in strides))
    return torch.as_tensor(_Interface(cai), device=device), [i for i, st in enumerate(strides) if st < 0]


def _device_view(x: Any, torch):
    """The array as a torch tensor: a view, or (negative strides) a flipped copy on the device."""
    view, flip = _positive_view(x, torch)
    return view.flip(flip) if flip else view


def writable_view(x: Any, kind: str):
    """(tensor, exact): a torch tensor to write the result into, and whether writes into it land
    in ``x`` itself (False: the caller must copy the tensor back with ``write_back``)."""
    if kind == "numpy" and not x.flags.writeable:
        raise TiledmmError("out is a read-only numpy array; pass a writable one")
    if kind in ("torch", "cuda_array") or (kind == "numpy" and not _negative(x.strides)
                                            and not any(s % x.itemsize for s in x.strides)) \
            or (kind == "cupy" and not _negative(x.strides)) \
            or (kind == "numba" and not _simulated(x) and not _negative(x.strides)):
        return to_torch(x, kind), True
    return to_torch(x, kind).clone(), False


def write_back(x: Any, kind: str, t) -> None:
    """Copy tensor ``t`` into array ``x`` (for outs that ``writable_view`` could not view)."""
    if kind == "numpy":
        x[...] = t.cpu().numpy()
    elif kind == "cupy":
        import cupy
        import torch
        with _cupy_stream(torch):
            x[...] = cupy.from_dlpack(t.contiguous())
    else:   # numba (simulated or negative strides)
        if _simulated(x):               # the simulator's array wraps a numpy array: assign through it
            x[...] = t.cpu().numpy()
        else:                           # negative strides: write through the positive view, flipped
            import torch
            view, flip = _positive_view(x, torch)
            view.copy_(t.flip(flip) if flip else t)


def from_torch(t, kind: str, like: Any):
    """The result as the caller's kind (no copy for device kinds)."""
    if kind == "torch":
        return t
    if kind == "numpy":
        return t.cpu().numpy()
    if kind == "cupy":
        import cupy
        with cupy.cuda.Device(like.device.id):
            return cupy.from_dlpack(t)
    from ._backend import numba_cuda
    cuda = numba_cuda()
    if _simulated(like):
        return cuda.to_device(t.cpu().numpy())
    return cuda.as_cuda_array(t)
