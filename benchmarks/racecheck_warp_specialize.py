#!/usr/bin/env python3
"""Does compute-sanitizer's racecheck report a hazard in *any* Gluon ``warp_specialize`` kernel?

The gluon-ws kernel's one racecheck report (benchmarks/sanitize.sh block) is a read and a write at
the kernel's own ``def`` line: code with no source line of ours, i.e. what Triton generates around
``gl.warp_specialize`` (the worker warps' switch loop reads a state word and the partitions'
captures from shared memory, the default warps write them; they meet at ``barrier.sync 1``). This
script builds the smallest warp-specialised kernels -- a default partition and a one-warp worker that
each write their own global output and touch no shared memory -- runs them, checks their results,
and is run under racecheck by::

    compute-sanitizer --tool racecheck python3 benchmarks/racecheck_warp_specialize.py

A hazard reported here, at the ``def`` line, is in the code Triton generates, not in tiledmm's.
Case "plain": no captures (kernel arguments are rematerialised in each partition); case
"captured": the worker takes a value loaded at run time (passed through shared memory).
GPU only (Triton 3.6's Gluon on sm_90).
"""
from __future__ import annotations

import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

BLOCK = 128


@gluon.jit
def _default(x_ptr, n, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    offs = gl.arange(0, BLOCK, layout=layout)
    gl.store(x_ptr + offs, gl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


@gluon.jit
def _worker(y_ptr, n, v, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    offs = gl.arange(0, BLOCK, layout=layout)
    gl.store(y_ptr + offs, offs.to(gl.float32) + v, mask=offs < n)


@gluon.jit
def ws_plain(x_ptr, y_ptr, n, BLOCK: gl.constexpr):
    gl.warp_specialize([(_default, (x_ptr, n, BLOCK)), (_worker, (y_ptr, n, 0.0, BLOCK))], [1], [24])


@gluon.jit
def ws_captured(x_ptr, y_ptr, v_ptr, n, BLOCK: gl.constexpr):
    v = gl.load(v_ptr)                       # a run-time value: captured through shared memory
    gl.warp_specialize([(_default, (x_ptr, n, BLOCK)), (_worker, (y_ptr, n, v, BLOCK))], [1], [24])


def main() -> int:
    if not torch.cuda.is_available():
        print("racecheck_warp_specialize: no GPU", file=sys.stderr)
        return 2
    n = 100
    bad = 0
    for name in ("plain", "captured"):
        x = torch.zeros(n, device="cuda")
        y = torch.full((n,), float("nan"), device="cuda")
        v = torch.tensor([5.0], device="cuda")
        if name == "plain":
            ws_plain[(1,)](x, y, n, BLOCK, num_warps=4)
        else:
            ws_captured[(1,)](x, y, v, n, BLOCK, num_warps=4)
        torch.cuda.synchronize()
        want_y = torch.arange(n, device="cuda", dtype=torch.float32) + (5.0 if name == "captured" else 0.0)
        ok = bool((y == want_y).all()) and bool((x >= 1).all())
        bad += not ok
        print(f"ws {name}: {'ok' if ok else 'WRONG'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
