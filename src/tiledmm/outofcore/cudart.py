"""The CUDA side of out-of-core runs: the device (three streams, events, allocations) or the CPU
standing in for it; the CUDA runtime torch loaded, through ctypes: ``cudaMemcpy2DAsync`` (strided
pinned tiles straight to and from the GPU, without staging) and ``cudaHostRegister`` (page-locking
staging buffers); and the pool of staging buffers each device keeps for later runs.

Page-locking: ``cudaHostAlloc`` (torch's ``pin_memory=True``) faults in and pins a buffer on one
thread -- 0.53 s for the 832 MiB of staging buffers of an earlier runner on an H100 host. Here a
staging buffer is an anonymous mapping faulted in by the thread that asks for it (several threads
at once), then registered with ``cudaHostRegister``. TILEDMM_OOC_PIN picks the way: ``register``
(default), ``huge`` (the same with transparent huge pages advised: fewer faults, but a fault may
wait for the kernel to compact memory), ``torch`` (torch's pinned allocator; also the fallback
where registering fails). Registered buffers are unregistered at exit.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import mmap
import os
import threading
import time
from typing import Optional

import numpy as np
import torch

from .._arrays import TiledmmError


class _NoEvent:
    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


class Device:
    """The GPU (streams, events, async copies) or the CPU standing in for it, with its pool of
    staging buffers (``host_pool``)."""

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
        self.host_pool = HostPool(self)

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
        """A new host buffer of n elements: page-locked on a GPU (``pin_host``), plain on the CPU."""
        if not self.gpu:
            return torch.empty(n, dtype=dtype)
        nbytes = n * torch.empty((), dtype=dtype).element_size()
        return pin_host(nbytes, self.device).view(dtype)

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
_lib_lock = threading.Lock()
_lib = None
_lib_checked = False


def _cudart_lib():
    """The CUDA runtime torch loaded (found in /proc/self/maps, else by name) as a ctypes library,
    with the prototypes of the functions used here; None where none loads. Looked up once."""
    global _lib, _lib_checked
    with _lib_lock:
        if not _lib_checked:
            _lib_checked = True
            _lib = _open_cudart()
        return _lib


def _open_cudart():
    """The first libcudart that loads and has every function used here (prototypes set), else None."""
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
            protos = {"cudaMemcpy2DAsync": [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                            ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p],
                      "cudaHostRegister": [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint],
                      "cudaHostUnregister": [ctypes.c_void_p], "cudaGetLastError": []}
            for name, args in protos.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = ctypes.c_int, args
        except (OSError, AttributeError):
            continue
        return lib
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
                lib = _cudart_lib()
                _cudart_fn = lib.cudaMemcpy2DAsync if lib is not None else None
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


# ---- page-locked host buffers

HUGE = 2 << 20                  # a transparent huge page (x86-64, arm64 with 4 KiB pages)
_PAGE = mmap.PAGESIZE
_registered: dict = {}          # data pointer -> the registered tensor (kept alive until unregistered)
_registered_lock = threading.Lock()
_REGISTER_PORTABLE = 1          # cudaHostRegisterPortable: page-locked for every CUDA context


PIN_WAYS = ("register", "huge", "torch")


def pin_host(nbytes: int, device: torch.device, how: Optional[str] = None) -> torch.Tensor:
    """A new page-locked host buffer of nbytes (a uint8 tensor), made the way ``how`` says (default:
    TILEDMM_OOC_PIN, else ``register``; see the module's docstring); torch's pinned allocator where
    registering fails."""
    how = how or os.environ.get("TILEDMM_OOC_PIN") or "register"
    if how not in PIN_WAYS:
        raise TiledmmError(f"TILEDMM_OOC_PIN={how!r}: choose one of {list(PIN_WAYS)}")
    if how != "torch":
        t = _register_new(nbytes, device, huge=how == "huge")
        if t is not None:
            return t
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)


def _register_new(nbytes: int, device: torch.device, huge: bool) -> Optional[torch.Tensor]:
    """nbytes of an anonymous private mapping (aligned to a huge page; huge pages advised if ``huge``),
    every page faulted in by this thread (a strided numpy write: the kernel zero-fills the pages, and
    numpy releases the GIL, so threads fault their buffers in at once), then registered portable;
    None where the runtime or the call fails."""
    lib = _cudart_lib()
    if lib is None:
        return None
    mm = mmap.mmap(-1, nbytes + HUGE, flags=mmap.MAP_PRIVATE)
    if huge:
        with contextlib.suppress(AttributeError, OSError):      # no madvise, or THP off: small pages
            mm.madvise(mmap.MADV_HUGEPAGE)
    whole = np.frombuffer(mm, dtype=np.uint8)
    off = -whole.ctypes.data % HUGE
    arr = whole[off:off + nbytes]
    arr[::_PAGE] = 0
    with torch.cuda.device(device):
        err = lib.cudaHostRegister(arr.ctypes.data, nbytes, _REGISTER_PORTABLE)
        if err != 0:
            lib.cudaGetLastError()           # clear it: torch's next launch check must not see it
            return None
    t = torch.from_numpy(arr)
    with _registered_lock:
        if not _registered:
            atexit.register(_unregister_all)
        _registered[t.data_ptr()] = t
    return t


def release_host(t: torch.Tensor) -> None:
    """Let a buffer from ``pin_host`` go: unregistered first when registered (no copy may still use it)."""
    with _registered_lock:
        mine = _registered.pop(t.data_ptr(), None) is not None
    if mine:
        _cudart_lib().cudaHostUnregister(t.data_ptr())


def _unregister_all() -> None:
    """At exit: unregister every buffer still registered (the mappings go with the process)."""
    with _registered_lock:
        ptrs = list(_registered)
        _registered.clear()
    lib = _cudart_lib()
    for ptr in ptrs:
        with contextlib.suppress(Exception):
            lib.cudaHostUnregister(ptr)


def _pool_size(nbytes: int) -> int:
    """The size a pool buffer of at least nbytes gets: a power of two up to a huge page, whole huge
    pages above (so the next run's slightly different pieces fit the kept buffers)."""
    if nbytes <= HUGE:
        return 1 << max(12, (nbytes - 1).bit_length())
    return -(-nbytes // HUGE) * HUGE


class HostPool:
    """One device's staging buffers, kept for later runs (like torch's pinned cache, without its
    power-of-two rounding): ``take`` hands out a kept buffer big enough, else a new one
    (``Device.pinned``: page-locked on a GPU, plain memory on the CPU stand-in); ``give`` takes
    buffers back once no copy uses them. At most ``keep_bytes`` stay kept; the smallest go first.
    ``made`` and ``made_bytes`` count the buffers made (tests, the benchmark)."""

    keep_bytes = 1 << 30

    def __init__(self, dev: Device):
        self.dev = dev
        self._free: list = []           # uint8 tensors, smallest first
        self._lock = threading.Lock()
        self.made = self.made_bytes = 0

    def take(self, nbytes: int) -> tuple:
        """(a uint8 host tensor of at least nbytes, whether it was made for this call)."""
        with self._lock:
            for i, t in enumerate(self._free):
                if t.numel() >= nbytes:
                    return self._free.pop(i), False
        size = _pool_size(nbytes)
        t = self.dev.pinned(size, torch.uint8)
        with self._lock:
            self.made += 1
            self.made_bytes += size
        return t, True

    def give(self, bufs: list) -> None:
        """Keep these buffers for later runs (every copy that used them has finished)."""
        with self._lock:
            self._free = sorted(self._free + list(bufs), key=torch.Tensor.numel)
            kept, drop = sum(t.numel() for t in self._free), []
            while kept > self.keep_bytes:
                t = self._free.pop(0)
                kept -= t.numel()
                drop.append(t)
        for t in drop:
            release_host(t)

    def kept_bytes(self) -> int:
        with self._lock:
            return sum(t.numel() for t in self._free)
