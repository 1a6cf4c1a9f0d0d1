"""The one launcher every SIMT (numba-cuda) kernel shares.

A rung file supplies ``make(tile, dtype) -> kernel`` (compiled once per tile and
dtype: TILE_WIDTH is a compile-time constant, as in the lectures) and, if its
threads do not map one-to-one onto a TILE x TILE patch of P, ``config``. This
module does the host program the lectures describe: copy in, launch
configuration, copy out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from ..._arrays import Operand
from ..._backend import numba_cuda
from ...registry import KernelSpec, register

SIMT_DTYPES = ("float32", "float64")
LECTURE_TILES = (2, 4, 8, 16, 32)   # 2 and 4 for the slides' toy examples; 32*32 = 1024 threads is the block limit
SIMT_EMULATION_LIMIT = 64 ** 3


def lecture_config(tile: int, J: int, K: int, L: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """dimGrid(ceil(L/TILE), ceil(J/TILE)), dimBlock(TILE, TILE): x runs along columns of P."""
    return (math.ceil(L / tile), math.ceil(J / tile)), (tile, tile)


def numba_type(dtype: str):
    from numba import from_dtype
    return from_dtype(np.dtype(dtype))


@dataclass
class SimtLaunch:
    kernel: Any
    grid: tuple
    block: tuple
    args: tuple
    host_out: np.ndarray | None
    dP: Any

    def run(self) -> None:
        self.kernel[self.grid, self.block](*self.args)

    def finish(self) -> None:
        if self.host_out is not None:
            self.host_out[...] = self.dP.copy_to_host()


def prepare_launch(make: Callable, config: Callable, a: Operand, b: Operand, out: Operand,
                   tile: int) -> SimtLaunch:
    """Device views of M, N and P (P carries the caller's poison when it lives on the host)."""
    cuda = numba_cuda()
    dM, dN = a.numba_view(cuda), b.numba_view(cuda)
    host_out = out.host_numpy() if out.on_host else None
    dP = cuda.to_device(np.ascontiguousarray(host_out)) if out.on_host else out.numba_view(cuda)
    J, K = a.shape
    L = b.shape[1]
    grid, block = config(tile, J, K, L)
    return SimtLaunch(make(tile, out.dtype), grid, block, (dM, dN, dP), host_out, dP)


MAKERS: dict[str, Callable] = {}    # kernel name -> make(tile, dtype), for the analysis tools
CONFIGS: dict[str, Callable] = {}   # kernel name -> launch configuration


def register_simt(name: str, summary: str, make: Callable, *, order: int,
                  config: Callable = lecture_config, tiles=LECTURE_TILES, default_tile: int | None = 16,
                  dtypes=SIMT_DTYPES, prepare: Callable | None = None, options=()) -> KernelSpec:
    """``make``/``config`` serve the analysis tools (and the launch, unless ``prepare`` is
    given: a kernel that picks its own code per call, like rung 10's autotuner)."""
    cached = lru_cache(maxsize=None)(make)
    MAKERS[name], CONFIGS[name] = cached, config

    def prepare_default(a, b, out, tile, opts):
        return prepare_launch(cached, config, a, b, out, tile)

    return register(KernelSpec(
        name=name, family="simt", summary=summary, dtypes=tuple(dtypes), prepare=prepare or prepare_default,
        tiles=tuple(tiles), default_tile=default_tile, emulation_limit=SIMT_EMULATION_LIMIT,
        order=order, options=tuple(options)))
