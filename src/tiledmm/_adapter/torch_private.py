"""The adapter's part for torch's private interfaces (see the package's docstring for the versions)."""
from __future__ import annotations

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


def torch_stream(handle: int, device):
    """torch's Stream over the raw CUDA stream ``handle`` on ``device`` (public interfaces, one quirk):
    handles 0 (the default stream) and 1 (``cudaStreamLegacy``) are ``torch.cuda.default_stream(device)``.
    ``torch.cuda.ExternalStream(0)`` is not the default stream: torch's Stream constructor reads a zero
    ``stream_ptr`` as "none given" and hands out a stream from its pool (torch/csrc/cuda/Stream.cpp,
    torch 2.11 / 2.13) -- a non-blocking stream, so work launched there is ordered neither after the
    default stream's work nor before it (a CuPy array's first call read unwritten under load);
    ``ExternalStream(1)`` fails torch's stream-id check."""
    import torch
    if handle in (0, 1):
        return torch.cuda.default_stream(device)
    return torch.cuda.ExternalStream(handle, device=device)


def device_getter():
    """``f() -> int``: torch's current CUDA device index (private ``_cuda_getDevice``: no Python
    wrapper; public fallback ``torch.cuda.current_device``)."""
    import torch
    if not torch.backends.cuda.is_built():
        return lambda: 0            # a CPU build of torch: the CPU stands in for one device (emulation)
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


def symmetric_memory():
    """torch's symmetric memory (``torch.distributed._symmetric_memory``: ``empty``, ``rendezvous``, the
    handle's buffers and barriers; torch 2.11), for ``tiledmm.distributed``'s copy-engine engine. Raises
    ImportError where this torch has none (the engine is then skipped with the reason)."""
    import torch.distributed._symmetric_memory as symm_mem
    return symm_mem
