"""The one launcher every SIMT (numba-cuda) kernel shares.

A rung file supplies ``make(tile, dtype) -> kernel`` (compiled once per tile and
dtype: TILE_WIDTH is a compile-time constant, as in the lectures) and, if its
threads do not map one-to-one onto a TILE x TILE patch of P, ``config``. This
module does the host program the lectures describe -- launch configuration, launch --
on the operands the API hands it (torch tensors already on the device), on the
caller's CUDA stream. The GEMM form (alpha, beta) and batches are the API's: it runs
a SIMT kernel on each 2-D slice and finishes with the shared epilogue.
"""
from __future__ import annotations

import contextlib
import math
import threading
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from ..._backend import emulating, numba_cuda
from ... import _adapter, invariance, tuning
from .. import simt_cache as _diskcache
from ..._arrays import TiledmmError
from ...registry import KernelSpec, register, shape_class
from ...timing import time_calls

SIMT_DTYPES = ("float32", "float64")
LECTURE_TILES = (2, 4, 8, 16, 32)   # 2 and 4 for the slides' toy examples; 32*32 = 1024 threads is the block limit
SIMT_EMULATION_LIMIT = 64 ** 3
GRID_LIMITS = (2 ** 31 - 1, 65535)    # gridDim.x, gridDim.y


def lecture_config(tile: int, J: int, K: int, L: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """dimGrid(ceil(L/TILE), ceil(J/TILE)), dimBlock(TILE, TILE): x runs along columns of P."""
    return (math.ceil(L / tile), math.ceil(J / tile)), (tile, tile)


def numba_type(dtype: str):
    from numba import from_dtype
    return from_dtype(np.dtype(dtype))


def dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


@dataclass(frozen=True)
class Choice:
    """What to launch: a compiled kernel and its launch configuration (tile, J, K, L) -> (grid, block)."""
    kernel: Any
    config: Callable
    tile: int | None = None


def prepare_launch(make: Callable, config: Callable, a, b, out, tile: int | None) -> Choice:
    """The kernel for ``out``'s dtype and ``tile`` (a, b, out: the torch tensors of one launch)."""
    return Choice(make(tile, dtype_name(out)), config, tile)


# -- running a choice on torch tensors -----------------------------------------------------------

_streams: dict[tuple, Any] = {}     # (device, raw stream) -> numba's stream (numba's are per context)
_simulator_lock = threading.Lock()
# numba-cuda loads a kernel's module on its first launch (per signature and device) with no lock of its own: two
# threads launching one new kernel at once both load it, and its module dictionary refuses the second ("key
# already in dictionary: <CUlibrary ...>"). The lectures' kernels are not launched from many threads for speed:
# one launch at a time.
_launch_lock = threading.Lock()


def _numba_stream(cuda):
    """numba's handle on torch's current stream (cached per raw stream)."""
    import torch
    ptr = torch.cuda.current_stream().cuda_stream
    key = (torch.cuda.current_device(), ptr)
    s = _streams.get(key)
    if s is None:
        s = _streams[key] = cuda.external_stream(ptr) if ptr else cuda.default_stream()
    return s


def _view(cuda, t):
    if emulating():        # CPU tensors; the simulator copies (contiguous) numpy arguments in and back out
        return np.ascontiguousarray(t.numpy())
    return cuda.as_cuda_array(t.detach())


def _chunks(config: Callable, tile, J: int, K: int, L: int) -> list[tuple[int, int, int, int]]:
    """Row and column ranges small enough that each launch's grid fits CUDA's limits."""
    cj, cl = J, L
    while cj > 1 and any(g > lim for g, lim in zip(config(tile, cj, K, 1)[0], GRID_LIMITS)):
        cj = (cj + 1) // 2
    while cl > 1 and any(g > lim for g, lim in zip(config(tile, 1, K, cl)[0], GRID_LIMITS)):
        cl = (cl + 1) // 2
    return [(r, min(r + cj, J), c, min(c + cl, L)) for r in range(0, J, cj) for c in range(0, L, cl)]


@contextlib.contextmanager
def _ieee_quietly():
    """In the simulator the kernels' arithmetic is numpy scalars', which warns where a GPU computes
    NaN or Inf silently (IEEE, as the contract says): those warnings are not shown. A warnings filter,
    not np.errstate, because the simulator's threads do not inherit the launching thread's errstate."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"(invalid value|overflow|divide by zero) encountered", RuntimeWarning)
        yield


def run_choice(choice: Choice, a, b, c) -> None:
    """Launch P = a @ b into c (2-D torch tensors on the kernels' device) on the current stream."""
    cuda = numba_cuda()
    J, K = a.shape
    L = b.shape[1]
    stream = None if emulating() else _numba_stream(cuda)
    for r0, r1, c0, c1 in _chunks(choice.config, choice.tile, J, K, L):
        whole = (r0, r1, c0, c1) == (0, J, 0, L)
        aa, bb, cc = (a, b, c) if whole else (a[r0:r1], b[:, c0:c1], c[r0:r1, c0:c1])
        grid, block = choice.config(choice.tile, r1 - r0, K, c1 - c0)
        args = (_view(cuda, aa), _view(cuda, bb), _view(cuda, cc))
        if stream is None:
            _adapter.numba_sim_block_runner()
            with _simulator_lock, _ieee_quietly():   # the simulator swaps module globals per launch: one at a time
                choice.kernel[grid, block](*args)
            if not cc.is_contiguous():   # the simulator wrote into a contiguous copy of P
                cc.copy_(__import__("torch").from_numpy(args[2]))
        else:
            with _launch_lock:
                choice.kernel[grid, block, stream](*args)


def tuned(kernel: str, a, b, out, opts, candidates: dict, parse: Callable, choice: Callable, chosen: dict):
    """The configuration a tuned rung (10, 11) runs: ``config=`` if given; else, per dtype and shape
    class, the fastest of ``candidates[dtype]`` timed on the caller's own operands (``tuning.choose``:
    once per class, remembered on disk, key ``simt-<kernel>``); in emulation, with tuning off or while
    a CUDA graph is captured, the first. ``parse(text, dtype)`` reads a configuration,
    ``choice(config, a, b, out)`` makes its launch, ``chosen`` is the rung's memory per key."""
    dtype = dtype_name(out)
    if opts.get("config"):
        try:
            return parse(str(opts["config"]), dtype)
        except ValueError as e:
            raise TiledmmError(f"kernel {kernel!r}: {e}") from None
    cands = candidates[dtype]
    if invariance.get():      # batch-invariant mode: one configuration for every shape (tiledmm.invariance)
        return cands[0]
    key = tuning.key_of("simt-" + kernel, dtype, shape_class(a.shape[0], b.shape[1], a.shape[1]))
    if key in chosen:
        return chosen[key]

    def timer(cfg):
        def run():
            import torch
            scratch = torch.empty_like(out)
            ch = choice(cfg, a, b, scratch)
            return time_calls(lambda: run_choice(ch, a, b, scratch), batches=3, warmup=2)
        return run
    capturing = False
    if not emulating():
        import torch
        capturing = torch.cuda.is_current_stream_capturing()
    name = tuning.choose(key, {c.name: timer(c) for c in cands}, cands[0].name, timeable=not capturing)
    chosen[key] = parse(name, dtype)
    return chosen[key]


def register_simt(name: str, summary: str, make: Callable, *, order: int,
                  config: Callable = lecture_config, tiles=LECTURE_TILES, default_tile: int | None = 16,
                  dtypes=SIMT_DTYPES, prepare: Callable | None = None, options=(),
                  block_tile: Callable | None = None, barriers_per_phase: int = 2) -> KernelSpec:
    """``make``/``config`` serve the launch and the analysis tools; ``prepare(a, b, out, tile, opts)
    -> Choice`` replaces them for the launch where a kernel picks its own code per call (rung 10's
    autotuner). ``block_tile(tile) -> (BM, BN)``: the P tile a block computes (traffic model)."""
    def made(tile, dtype):
        """``make``'s kernel, its compiled code kept on disk (``kernels/simt_cache.py``: a new process loads it)."""
        return _diskcache.cached(make(tile, dtype), name, tile, dtype)
    cached = lru_cache(maxsize=None)(made)

    def launch(a, b, c, *, tile, opts):
        choice = prepare(a, b, c, tile, opts) if prepare else prepare_launch(cached, config, a, b, c, tile)
        run_choice(choice, a, b, c)

    return register(KernelSpec(
        name=name, family="simt", summary=summary, dtypes=tuple(dtypes), launch=launch,
        tiles=tuple(tiles), default_tile=default_tile, emulation_limit=SIMT_EMULATION_LIMIT,
        order=order, options=tuple(options), make=cached, launch_config=config,
        block_tile=block_tile or (lambda tile: (tile, tile)), barriers_per_phase=barriers_per_phase))
