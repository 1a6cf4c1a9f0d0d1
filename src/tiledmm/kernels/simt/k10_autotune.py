"""Rung 10, the tuned kernel: rung 9 unrolled, register-capped, and autotuned over
block / warp / lane tiles.

Rung 9's compiled inner loop is 64 FFMA in 85 instructions (75 %), 124 registers.
* Unrolling. LLVM unrolls each k-step's small loops but not the loop over k itself
  (its body is over its threshold, and numba has no ``#pragma unroll``), so the kernel
  calls the per-k step four times by hand (``make_shape(..., unroll=4)``): 256 FFMA in
  ~290 instructions.
* A register cap. Unrolled, the kernel wants 130 registers, and 136 x 256 threads
  leaves room for one block per SM; ``launch_bounds=(NT, 512 // NT)`` caps it at 128
  (two blocks of 256 threads).
* Autotuning. Which block / warp / lane tile is fastest depends on the problem (a
  128 x 128 block leaves most of 132 SMs idle on a 512 x 512 product), on the dtype
  (float64 needs half the lane tile to stay in registers) and on the compiler, so, as
  Triton's autotuner does, the first call for a dtype and shape class (log2 buckets of
  J, L, K) times every candidate on the caller's own operands and keeps the fastest,
  remembered on disk (``tiledmm.tuning``) so that a new process does not time again.
  ``config=`` forces one (the tests run every candidate that way); in emulation, with
  no clock worth trusting, the first candidate is used.
"""
from __future__ import annotations

from ... import tuning
from ._launch import prepare_launch, register_simt, tuned
from .k09_unsigned import Shape, make_shape, shape_config

UNROLL = 4


def make_tuned(sh: Shape, dtype: str):
    return make_shape(sh, dtype, unroll=UNROLL, cap=True)


def parse(text: str) -> Shape:
    sh = Shape.parse(text)
    if sh.BK % UNROLL:
        raise ValueError(f"tile shape {text!r}: BK must be a multiple of {UNROLL}")
    return sh


CANDIDATES = {
    "float32": tuple(parse(s) for s in (
        "128x128x32-w32x64-t8x8",    # 256 threads, 8 x 8 per lane, a quarter of rung 9's barriers per FMA
        "128x128x16-w32x64-t8x8",
        "64x128x32-w32x64-t8x8",     # 128 threads: twice the blocks
        "128x128x8-w32x64-t8x8",     # rung 9's preset (a BK of 64 would pass 48 KB of static shared memory)
        "128x64x32-w32x32-t8x4",
        "64x64x32-w32x32-t8x4",      # small problems: 4x the blocks of 128 x 128
        "256x128x16-w64x32-t8x8",    # 512 threads, lanes 8 x 4
    )),
    "float64": tuple(parse(s) for s in (
        "64x64x8-w32x32-t8x4",
        "128x64x8-w32x32-t8x4",
        "64x64x16-w32x32-t8x4",
    )),
}
ANALYSED = CANDIDATES["float32"][0]   # what `tiledmm occupancy/trace -k autotuned` look at


def _choice(sh: Shape, a, b, out):
    return prepare_launch(lambda tile, dtype: make_tuned(sh, dtype), shape_config(sh), a, b, out, None)


def choose(a, b, out, opts) -> Shape:
    """``config=`` if given, else the tuned candidate for this dtype and shape class (``_launch.tuned``)."""
    return tuned("autotuned", a, b, out, opts, CANDIDATES, lambda text, dtype: parse(text), _choice, _chosen)


_chosen: dict[str, Shape] = {}
tuning.on_mode_change(_chosen.clear)   # a model pick made with tuning off is chosen again


def prepare(a, b, out, tile, opts):
    return _choice(choose(a, b, out, opts), a, b, out)


SPEC = register_simt("autotuned", "rung 10: rung 9 unrolled by 4 and capped at 128 registers; block/warp/lane "
                     "tiles chosen by timing per dtype and shape class",
                     lambda tile, dtype: make_tuned(ANALYSED, dtype), order=100,
                     config=shape_config(ANALYSED), tiles=(), default_tile=None, prepare=prepare,
                     options=("config",), block_tile=lambda tile: (ANALYSED.BM, ANALYSED.BN))
