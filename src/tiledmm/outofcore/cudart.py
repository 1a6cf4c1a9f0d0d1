"""The CUDA side of out-of-core runs: the device (three streams, events, allocations) or the CPU
standing in for it, and ``cudaMemcpy2DAsync`` from the CUDA runtime torch loaded (strided pinned
tiles straight to and from the GPU, without staging)."""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from typing import Optional

import torch


class _NoEvent:
    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


class Device:
    """The GPU (streams, events, async copies) or the CPU standing in for it."""

    def __init__(self, device: Optional[torch.device]):
        self.gpu = device is not None and device.type == "cuda"
        self.device = device if self.gpu else torch.device("cpu")
        if self.gpu:
            with torch.cuda.device(self.device):
                self.copy_in = torch.cuda.Stream(self.device)
                self.compute = torch.cuda.Stream(self.device)
                self.copy_out = torch.cuda.Stream(self.device)
        else:
            self.copy_in = self.compute = self.copy_out = None

    def event(self):
        return torch.cuda.Event(enable_timing=True) if self.gpu else _NoEvent()

    def record(self, ev, stream):
        ev.record(stream) if self.gpu else ev.record()

    def wait(self, stream, ev):
        if self.gpu and ev is not None:
            stream.wait_event(ev)

    def on(self, stream):
        return torch.cuda.stream(stream) if self.gpu else contextlib.nullcontext()

    def empty(self, n: int, dtype) -> torch.Tensor:
        return torch.empty(n, dtype=dtype, device=self.device)

    def pinned(self, n: int, dtype) -> torch.Tensor:
        return torch.empty(n, dtype=dtype, pin_memory=self.gpu)

    def sync(self):
        if self.gpu:
            torch.cuda.synchronize(self.device)


_devices: dict = {}
_devices_lock = threading.Lock()


def resolve_device(device) -> Device:
    """One Device (three streams) per GPU for the process; the CPU stand-in when emulating."""
    from .. import _backend
    if device is None:
        if _backend.emulating() or not torch.cuda.is_available():
            device = None
        else:
            device = torch.device("cuda", torch.cuda.current_device())
    if device is not None:
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device.type != "cuda":
            device = None
    with _devices_lock:
        d = _devices.get(device)
        if d is None:
            d = _devices[device] = Device(device)
    return d


_cudart_lock = threading.Lock()
_cudart_fn = None
_cudart_checked = False


def _find_cudart():
    paths = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1] if line.strip() else ""
                if "libcudart.so" in p and p not in paths:
                    paths.append(p)
    except OSError:
        pass
    for p in paths + ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]:
        try:
            lib = ctypes.CDLL(p)
            fn = lib.cudaMemcpy2DAsync
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                       ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        return fn
    return None


def memcpy2d(dst: torch.Tensor, src: torch.Tensor, kind: int, stream) -> None:
    """dst[:] = src for 2-D tensors with unit inner stride, same dtype (kind 1: H2D, 2: D2H)."""
    es = src.element_size()
    rows, cols = src.shape
    err = _cudart_fn(dst.data_ptr(), dst.stride(0) * es if rows > 1 else cols * es, src.data_ptr(),
                     src.stride(0) * es if rows > 1 else cols * es, cols * es, rows, kind, stream.cuda_stream)
    if err != 0:
        raise RuntimeError(f"cudaMemcpy2DAsync failed with error {err}")


def has_memcpy2d(dev: Device) -> bool:
    """Load cudaMemcpy2DAsync once and check it on a small strided pinned tile."""
    global _cudart_fn, _cudart_checked
    if not dev.gpu or os.environ.get("TILEDMM_OOC_NO_2D") == "1":
        return False
    with _cudart_lock:
        if not _cudart_checked:
            _cudart_checked = True
            try:
                _cudart_fn = _find_cudart()
                if _cudart_fn is not None:
                    src = torch.arange(8 * 16, dtype=torch.float32).reshape(8, 16).pin_memory()
                    d = torch.full((8, 8), float("nan"), device=dev.device)
                    s = torch.cuda.current_stream(dev.device)
                    memcpy2d(d, src[:, 3:11], 1, s)
                    back = torch.full((8, 16), -1.0).pin_memory()
                    memcpy2d(back[:, 5:13], d, 2, s)
                    s.synchronize()
                    if not (torch.equal(d.cpu(), src[:, 3:11]) and torch.equal(back[:, 5:13], src[:, 3:11])):
                        _cudart_fn = None
            except Exception:     # noqa: BLE001 -- any failure means: stage instead
                _cudart_fn = None
        return _cudart_fn is not None
