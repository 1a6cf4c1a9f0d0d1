"""Every private interface of Triton, torch and numba that tiledmm uses, in one place.

tiledmm's short path is a few microseconds because it skips the public launch machinery of
its libraries. Those shortcuts use interfaces the libraries do not promise to keep, so each is
here, next to the versions it was checked against, with a public fallback:

=====================================  =========================  ===================================
private interface                      checked against            fallback
=====================================  =========================  ===================================
``CompiledKernel.run(...)`` called     Triton 3.6.0 (CUDA)        ``kernel[grid](...)`` (public)
positionally (grid, stream, function,
packed metadata, three hooks, args);
its C ``launch`` called with the
cooperative/PDL flags and scratch
buffers, after comparing the source
of Triton's Python launcher;
``global_scratch_size/align``,
``profile_scratch_size``, ``num_ctas``
``torch._C._cuda_getCurrentRawStream``  torch 2.11 / 2.13          ``torch.cuda.current_stream()``
``torch._C._cuda_getDevice``            torch 2.11 / 2.13          ``torch.cuda.current_device()``
``torch._debug_has_internal_overlap``   torch 2.11 / 2.13          zero-stride test
``torch.cuda._sleep``                   torch 2.11 / 2.13          none needed (a GPU busy-wait)
``Tensor._version``, ``StorageWeakRef``  torch 2.11 / 2.13          (kmajor_cache: opt-in only)
numba ``DeviceNDArray`` over a foreign  numba-cuda 0.30.4          numba's ``device_array``
pointer (``MemoryPointer``, ``owner``)
=====================================  =========================  ===================================

Triton's launch shortcuts are used only after a *self-test* on first use: a tiny kernel is
launched through the public path and through both private forms, and its output checked. On a
Triton version not in ``TRITON_CHECKED``, or where the self-test fails, tiledmm warns once and
launches through ``kernel[grid](...)`` for the rest of the process (correct, some microseconds
slower per call). Nothing here imports Triton, torch or numba at import time.
"""
from __future__ import annotations

import inspect
import threading
import warnings

from . import _backend

TRITON_CHECKED = ("3.6.0",)      # Triton versions whose launcher the direct launch was checked against

# -- Triton: the compiled kernel's launcher -----------------------------------------------------------

_direct: bool | None = None      # None: not decided yet; then whether direct launches are in use
_direct_lock = threading.Lock()
_why_not: str = ""


def triton_direct() -> bool:
    """Whether tiledmm may launch compiled Triton kernels through their launcher directly (decided
    once per process: a checked Triton version on a GPU, and a passing self-test)."""
    global _direct
    if _direct is None:
        if _capturing():
            return False     # the self-test synchronises: not inside a CUDA graph capture (decided later)
        with _direct_lock:
            if _direct is None:
                _direct = _decide()
    return _direct


def _capturing() -> bool:
    if _backend.emulating():
        return False
    import torch
    return torch.cuda.is_current_stream_capturing()


def _decide() -> bool:
    global _why_not
    if _backend.emulating():
        _why_not = "emulation"
        return False         # the interpreter has no launcher to skip: nothing to warn about
    import triton
    if triton.__version__ not in TRITON_CHECKED:
        _why_not = f"Triton {triton.__version__} is not among the versions checked {list(TRITON_CHECKED)}"
    else:
        try:
            _why_not = _self_test()
        except Exception as e:   # noqa: BLE001  whatever a changed launcher raises, the public path stays
            _why_not = f"self-test raised {type(e).__name__}: {str(e)[:200]}"
    if _why_not:
        warnings.warn(f"tiledmm: {_why_not}; launching Triton kernels through kernel[grid](...) instead "
                      "(correct, a few microseconds slower per call)", RuntimeWarning, stacklevel=3)
        return False
    return True


def decided() -> bool:
    """Whether ``triton_direct`` has decided (it waits while a CUDA graph is being captured)."""
    return _direct is not None


def why_not_direct() -> str:
    """Why direct launches are off ("" where they are on or undecided)."""
    return _why_not


def _self_test() -> str:
    """Launch a probe kernel through the public path, ``CompiledKernel.run`` and the C launch;
    "" where all three wrote what they should, else what went wrong."""
    import torch

    from ._adapter_probe import probe_kernel
    n, block = 300, 64
    grid = -(-n // block)
    x = torch.zeros(3, n, dtype=torch.int32, device="cuda")
    ck = probe_kernel[(grid,)](x[0], n, 5, BLOCK=block)             # public; compiles
    stream = raw_stream(torch.cuda.current_device())
    run_compiled(ck, grid, 1, 1, stream, (x[1], n, 7, block))
    direct = c_launch(ck, checked=False)
    if direct is None:
        return "Triton's launcher has an unknown body"
    launch, coop, pdl, scratch = direct
    if scratch:
        return "the probe kernel asks for global scratch"
    launch(grid, 1, 1, stream, ck.function, coop, pdl, None, None, ck.packed_metadata, None, None, None,
           x[2].data_ptr(), n, 9, block)
    torch.cuda.synchronize()
    want = torch.arange(n, dtype=torch.int32, device="cuda")
    for row, value in enumerate((5, 7, 9)):
        if not torch.equal(x[row], want + value):
            return f"self-test launch {row} wrote wrong values"
    return ""


def run_compiled(ck, g0: int, g1: int, g2: int, stream: int, args) -> None:
    """Triton's Python launcher of a CompiledKernel, called positionally (no launch hooks):
    ``args`` every kernel parameter in signature order, constexprs included."""
    ck.run(g0, g1, g2, stream, ck.function, ck.packed_metadata, None, None, None, *args)


# The body of Triton's Python launcher (``CudaLauncher.__call__``, Triton 3.6) allocates the scratch
# buffers (None where the kernel needs none) and ends in this call, so a bound launch can call the
# compiled C ``launch`` itself (~3 us a call less, and no allocation). Any other body: Triton's call.
_KNOWN_TAIL = ("self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, "
               "self.launch_pdl, global_scratch, profile_scratch, *args)")
_known: dict[type, bool] = {}


def c_launch(ck, checked: bool = True):
    """(C launch, cooperative flag, PDL flag, global scratch bytes per program) of a CompiledKernel
    whose Python launcher has the body described above and needs no profiling scratch; else None
    (also where direct launches are off, unless ``checked`` is False: the self-test itself).
    The C launch takes (gridX, gridY, gridZ, stream, function, cooperative, pdl, global scratch,
    profile scratch, packed metadata, launch metadata, enter hook, exit hook, *args)."""
    if checked and not triton_direct():
        return None
    run = ck.run
    cls = type(run)
    known = _known.get(cls)
    if known is None:
        try:
            lines = inspect.getsource(cls.__call__).split("\n")
        except (OSError, TypeError):
            lines = []
        body = " ".join(" ".join(lines).split())
        known = _known[cls] = body.endswith(_KNOWN_TAIL) and body.count("self.launch(") == 1
    if not known or getattr(run, "profile_scratch_size", 1):
        return None
    try:
        scratch = run.global_scratch_size * getattr(run, "num_ctas", 1)
        if scratch and run.global_scratch_align > 256:      # torch's blocks are 512-byte aligned
            return None
        return run.launch, run.launch_cooperative_grid, run.launch_pdl, scratch
    except AttributeError:
        return None


# -- torch -----------------------------------------------------------------------------------------------

def raw_stream_getter():
    """``f(device_index) -> int``: torch's current raw CUDA stream on that device, without building
    a Stream object (private; public fallback ``torch.cuda.current_stream(i).cuda_stream``)."""
    import torch
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if get is None:
        return lambda index: torch.cuda.current_stream(index).cuda_stream
    return get


def raw_stream(index: int) -> int:
    return raw_stream_getter()(index)


def device_getter():
    """``f() -> int``: torch's current CUDA device index (private ``_cuda_getDevice``: no Python
    wrapper; public fallback ``torch.cuda.current_device``)."""
    import torch
    return getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def internal_overlap(t) -> bool:
    """Whether two positions of ``t`` surely share memory: torch's own test where it has one (it
    finds zero strides and strides smaller than the extent they step over, and answers "too
    hard" -- taken as no -- for some interleavings), else the zero-stride test."""
    import torch
    probe = getattr(torch, "_debug_has_internal_overlap", None)
    if probe is not None:
        return probe(t) == 1
    return any(s == 0 and n > 1 for n, s in zip(t.shape, t.stride()))


def gpu_sleep(cycles: int) -> None:
    """Keep the current stream busy for about ``cycles`` GPU clock cycles."""
    import torch
    torch.cuda._sleep(cycles)


def version_counter(t) -> int:
    """torch's version counter of ``t`` (moves with every in-place torch op on it or a view)."""
    return t._version


def storage_weakref(t):
    """A weak reference to ``t``'s storage (``.expired()`` once the memory is freed)."""
    from torch.multiprocessing.reductions import StorageWeakRef
    return StorageWeakRef(t.untyped_storage())


# -- numba ---------------------------------------------------------------------------------------------

def numba_array_maker(index: int):
    """``f(shape, strides, dtype, pointer, nbytes, owner)``: a numba DeviceNDArray over device memory
    that ``owner`` keeps alive (numba-cuda 0.30.4's ``MemoryPointer(context, pointer, size,
    owner=)``); None where numba has none of that (callers use numba's ``device_array``)."""
    try:
        from numba.cuda.cudadrv import devicearray, devices, driver   # (the caller has imported numba)
        context = devices.get_context(index)
        pointer, memory, array = driver.binding.CUdeviceptr, driver.MemoryPointer, devicearray.DeviceNDArray
    except (ImportError, AttributeError):
        return None

    def make(shape, strides, dtype, ptr: int, nbytes: int, owner):
        return array(shape, strides, dtype, gpu_data=memory(context, pointer(ptr), nbytes, owner=owner))
    return make


__all__ = ["TRITON_CHECKED", "triton_direct", "decided", "why_not_direct", "run_compiled", "c_launch", "raw_stream",
           "raw_stream_getter", "device_getter", "internal_overlap", "gpu_sleep", "version_counter",
           "storage_weakref", "numba_array_maker"]
