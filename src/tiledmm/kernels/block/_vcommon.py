"""Small helpers shared by the variant modules (tma_persistent, splitk, kmajor_cache).

Each variant module exposes NAME, applicable(), CONFIGS, heuristic() and launch(); the
dispatcher in kernels/block plugs them in. Nothing here launches a kernel.
"""
from __future__ import annotations

import functools

from .fastlaunch import current_stream  # noqa: F401  (one home for the raw-stream lookup)

from ..._backend import emulating, mode

mode()  # decide GPU or emulation (TRITON_INTERPRET) before triton is imported
import triton  # noqa: E402

KINDS = ("16bit", "tf32", "ieee")


def kind_of(precision: str) -> str:
    """Precision option -> config family: 'none' (bf16/fp16) -> '16bit'."""
    return "16bit" if precision in (None, "none") else precision


def tl_precision(precision: str) -> str:
    return "none" if precision in (None, "none") else precision


@functools.lru_cache(maxsize=None)
def num_sms() -> int:
    if emulating():
        return 4   # the interpreter stands in for a small GPU
    import torch
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


@functools.lru_cache(maxsize=None)
def capability() -> tuple:
    import torch
    if emulating() or not torch.cuda.is_available():
        return (0, 0)
    return torch.cuda.get_device_capability()


_allocator_set = False


def ensure_allocator() -> None:
    """Device-side descriptors and some pipelined kernels need scratch memory from the caller;
    torch.empty on the current stream keeps it graph-capturable."""
    global _allocator_set
    if not _allocator_set:
        import torch
        triton.set_allocator(lambda size, align, stream: torch.empty(size, device="cuda", dtype=torch.int8))
        _allocator_set = True


def mark_written(t) -> None:
    """Bump torch's version counter of an output written by a Triton kernel (torch only sees
    its own in-place ops), so version-keyed caches (kmajor_cache) notice the write."""
    try:
        import torch
        torch.autograd.graph.increment_version(t)
    except Exception:  # noqa: BLE001  (inference tensors and old torch: nothing to bump)
        pass


def tma_ok(*tensors) -> bool:
    """The copy engine's rules for a 2-D tensor: unit inner stride, 16-byte aligned base and
    row stride."""
    for t in tensors:
        if t.dim() != 2 or t.stride(1) != 1 or t.data_ptr() % 16 or (t.stride(0) * t.element_size()) % 16:
            return False
        if t.shape[0] > 1 and t.stride(0) < t.shape[1]:
            return False
    return True


def cfg(bm, bn, bk, warps, stages, **extra) -> dict:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, **extra, "num_warps": warps, "num_stages": stages}


def split_meta(config: dict) -> tuple[dict, int, int]:
    meta = dict(config)
    return meta, meta.pop("num_warps", 4), meta.pop("num_stages", 3)


def _int_key(v: int) -> int:
    big = 0 if -2 ** 31 <= v < 2 ** 31 else 4
    return big + (1 if v == 1 else (2 if v % 16 == 0 else 0))


def _arg_key(a):
    if type(a) is int:
        return _int_key(a)
    if type(a) is float or type(a) is bool:
        return None
    base = getattr(a, "base", None)
    if base is not None and hasattr(a, "block_shape"):   # a host TensorDescriptor
        return ("desc", base.dtype, tuple(a.block_shape))
    if hasattr(a, "data_ptr"):
        return (a.dtype, a.data_ptr() % 16 == 0)
    return type(a)


class Launcher:
    """``fn[grid](*args, **meta)`` without Triton's per-call Python work after the first launch
    of each specialisation: the CompiledKernel is remembered under the keys Triton specialises
    on (ints equal to 1 / divisible by 16 / 64-bit, pointer dtype and 16-byte alignment, a host
    descriptor's dtype and block shape) plus the meta-parameters, and its launcher is called
    directly on torch's current stream. Any failure of the direct call falls back to Triton's
    own launch for good (another Triton version's launcher signature)."""

    def __init__(self, fn):
        import inspect
        self.fn = fn
        self.params = [p.name for p in inspect.signature(fn.fn).parameters.values()]
        self.cache: dict = {}
        self.direct = not emulating()
        self.last = None

    def __call__(self, grid, args: tuple, meta: dict, num_warps: int, num_stages: int):
        if not self.direct:
            self.last = self.fn[grid](*args, **meta, num_warps=num_warps, num_stages=num_stages)
            return self.last
        key = (tuple(meta.items()), num_warps, num_stages, tuple(_arg_key(a) for a in args))
        hit = self.cache.get(key)
        if hit is None:
            ck = self.fn[grid](*args, **meta, num_warps=num_warps, num_stages=num_stages)
            n = len(args)
            full_names = self.params
            self.cache[key] = (ck, [meta[name] if i >= n else None for i, name in enumerate(full_names)])
            self.last = ck
            return ck
        ck, tail = hit
        full = list(args) + tail[len(args):]
        try:
            ck.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, current_stream(),
                   ck.function, ck.packed_metadata, None, None, None, *full)
        except (TypeError, AttributeError, SystemError, ValueError):
            self.direct = False
            self.last = self.fn[grid](*args, **meta, num_warps=num_warps, num_stages=num_stages)
        return ck


