"""Launching a compiled Triton kernel without Triton's per-call Python work.

``kernel[grid](*args, **meta)`` binds every argument, computes the specialisation key,
looks the compiled kernel up, builds launch metadata and calls the hooks: tens of
microseconds, which is the whole run time of a small GEMM. ``FastKernel`` does the
first launch of each specialisation that way, remembers the ``CompiledKernel`` it
returned, and afterwards calls its launcher directly.

Triton specialises a kernel on its runtime arguments: integers equal to 1, integers
divisible by 16, 32- or 64-bit integers, and tensors' dtypes and 16-byte alignment.
``FastKernel`` keys its cache on exactly those properties, so a kernel is never reused
where Triton would have compiled another one. If the direct call fails (a Triton
version whose launcher takes other arguments) it falls back to the ordinary launch
for good.
"""
from __future__ import annotations

import inspect
import threading
from typing import Any

from ..._backend import emulating


def _int_key(v: int) -> int:
    big = 0 if -2 ** 31 <= v < 2 ** 31 else 4
    return big + (1 if v == 1 else (2 if v % 16 == 0 else 0))


class FastKernel:
    """One JIT function with its meta-parameters (constexprs, num_warps, num_stages) fixed."""

    def __init__(self, fn, meta: dict, num_warps: int, num_stages: int):
        self.fn = fn
        self.meta = dict(meta)
        self.num_warps, self.num_stages = num_warps, num_stages
        params = list(inspect.signature(fn.fn).parameters.values())
        self.names = [p.name for p in params if p.name not in self.meta]
        self.constexpr_at = {i: p.name for i, p in enumerate(params) if p.name in self.meta}
        self.defaults = {p.name: p.default for p in params}
        self.n_params = len(params)
        self.cache: dict[tuple, Any] = {}
        self.direct = not emulating()
        self._template: list | None = None
        self._slots: list[int] = []

    def _full(self, args: tuple) -> list:
        """Every parameter in signature order: the runtime ``args`` with the constexprs between."""
        if self._template is None:
            self._template = [self.meta.get(self.constexpr_at.get(i)) for i in range(self.n_params)]
            self._slots = [i for i in range(self.n_params) if i not in self.constexpr_at]
        full = self._template[:]
        for i, v in zip(self._slots, args):
            full[i] = v
        return full

    def __call__(self, grid: tuple, *args) -> None:
        """Launch on torch's current stream; ``args`` are the runtime arguments in order."""
        if not self.direct:
            if emulating():
                with _interpreter_lock:     # Triton's interpreter patches module state per launch
                    self._slow(grid, args)
            else:
                self._slow(grid, args)
            return
        key = tuple((a.dtype, a.data_ptr() % 16 == 0) if hasattr(a, "data_ptr")
                    else (_int_key(a) if type(a) is int else None) for a in args)
        ck = self.cache.get(key)
        if ck is None:
            self.cache[key] = self._slow(grid, args)
            return
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        try:
            ck.run(grid[0], g1, g2, current_stream(), ck.function, ck.packed_metadata, None, None, None,
                   *self._full(args))
        except (TypeError, AttributeError, SystemError):   # a launcher of another shape: never again
            self.direct = False
            self._slow(grid, args)

    def _slow(self, grid: tuple, args: tuple):
        """Triton's own launch (compiles on first use); returns the CompiledKernel."""
        return self.fn[grid](*self._full(args), num_warps=self.num_warps, num_stages=self.num_stages)


_raw_stream = None
_interpreter_lock = threading.Lock()


def current_stream() -> int:
    """torch's current raw CUDA stream on the current device (cheap: no Stream object)."""
    global _raw_stream
    if _raw_stream is None:
        import torch
        get = torch._C._cuda_getCurrentRawStream
        dev = torch.cuda.current_device
        _raw_stream = lambda: get(dev())  # noqa: E731
    return _raw_stream()
