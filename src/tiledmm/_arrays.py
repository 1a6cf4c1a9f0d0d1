"""Accepting the array kinds users hold, and giving back the kind they gave.

Kinds: numpy arrays, torch tensors (CPU or CUDA), CuPy arrays and numba device
arrays. Device arrays are used in place through ``__cuda_array_interface__``
(no copy); host arrays are copied to the device once per call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# dtype names used throughout tiledmm (numpy spelling; bfloat16 exists only in torch)
SUPPORTED_DTYPES = ("float64", "float32", "float16", "bfloat16")


class TiledmmError(ValueError):
    """Bad input to tiledmm: the message names the shapes, dtypes or choices involved."""


def _torch():
    import torch
    return torch


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
    return np.dtype(x.dtype).name


def device_name(x: Any, kind: str) -> str:
    if kind == "numpy":
        return "cpu"
    if kind == "torch":
        return "cpu" if x.device.type == "cpu" else f"cuda:{x.device.index or 0}"
    if kind == "numba" and type(x).__name__ == "FakeCUDAArray":
        return "cuda:0 (simulated)"
    if kind == "cupy":
        return f"cuda:{x.device.id}"
    return "cuda:0"


@dataclass
class Operand:
    """One array as given, with what tiledmm needs to know about it."""
    obj: Any
    name: str
    kind: str
    shape: tuple
    dtype: str
    device: str

    @classmethod
    def of(cls, x: Any, name: str) -> "Operand":
        kind = kind_of(x)
        return cls(x, name, kind, tuple(int(s) for s in x.shape), dtype_name(x, kind), device_name(x, kind))

    @property
    def on_host(self) -> bool:
        return self.device == "cpu"

    def describe(self) -> str:
        return f"{self.name}: {self.kind} {'x'.join(map(str, self.shape)) or 'scalar'} {self.dtype} on {self.device}"

    # -- views for the kernel families -------------------------------------------------
    def host_numpy(self) -> np.ndarray:
        """A numpy view (host kinds only)."""
        return self.obj.detach().numpy() if self.kind == "torch" else self.obj

    def assign_from_torch(self, t) -> None:
        """Copy a torch tensor's values into this (host) operand."""
        if self.kind == "torch":
            self.obj.copy_(t)
        else:
            self.obj[...] = t.cpu().numpy()

    def numba_view(self, cuda, *, copy_in: bool = True):
        """A numba device array over this operand: the same memory for device kinds,
        a fresh device copy for host kinds (copied in only when ``copy_in``)."""
        if self.kind == "numba":
            return self.obj
        if self.on_host:
            host = np.ascontiguousarray(self.host_numpy())
            return cuda.to_device(host) if copy_in else cuda.device_array(host.shape, host.dtype)
        obj = self.obj.detach() if self.kind == "torch" else self.obj
        return cuda.as_cuda_array(obj)

    def torch_view(self, device: str):
        """A torch tensor over this operand on ``device`` (no copy where it already is)."""
        torch = _torch()
        if self.kind == "torch":
            t = self.obj.detach()
        elif self.kind == "numpy":
            t = torch.from_numpy(self.obj)
        else:  # cupy, numba, any __cuda_array_interface__ object
            t = torch.as_tensor(self.obj, device="cuda")
        return t if str(t.device).startswith(device) else t.to(device)


def empty_like_kind(like: Operand, shape: tuple, dtype: str):
    """A new (uninitialised) array of ``like``'s kind and device."""
    if like.kind == "numpy":
        return np.empty(shape, dtype=dtype)
    if like.kind == "torch":
        torch = _torch()
        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.obj.device)
    if like.kind == "cupy":
        import cupy
        with cupy.cuda.Device(like.obj.device.id):
            return cupy.empty(shape, dtype=dtype)
    from ._backend import numba_cuda
    return numba_cuda().device_array(shape, dtype=dtype)


def fill(op: Operand, value: float) -> None:
    """Set every element of ``op`` (any kind) to ``value``."""
    if op.kind in ("numpy", "torch", "cupy"):
        op.obj[...] = value
    else:  # numba device array: build on host and copy in
        host = np.full(op.shape, value, dtype=op.dtype)
        op.obj.copy_to_device(host)
