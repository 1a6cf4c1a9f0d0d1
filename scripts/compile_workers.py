"""Compile ahead in parallel, for the block benchmarks (block_variants_bench.py, block_probe.py).

Triton compiles on the CPU, one kernel at a time per process, and such a benchmark launches
hundreds of (variant, config, shape) specialisations. So it first runs ``--jobs`` copies of itself
as workers (``--worker --shard i --jobs N``), each launching its share of the points once into the
shared Triton cache; the main process then finds every kernel compiled and times without waiting.
Not a script: the benchmarks import it (``from compile_workers import ...``, scripts/ being their
``sys.path[0]``).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from typing import Callable, Sequence


def add_args(ap: argparse.ArgumentParser, *, jobs: int = 12, compile_s: float = 120.0) -> None:
    """--jobs and --compile-s for the user; --worker and --shard for the workers."""
    ap.add_argument("--jobs", type=int, default=jobs, help="compile worker processes (1: compile while timing)")
    ap.add_argument("--compile-s", type=float, default=compile_s, help="seconds the compile workers may take")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shard", type=int, default=0, help=argparse.SUPPRESS)


def precompile(script: str, args: argparse.Namespace, extra: Sequence[str], say: Callable = print) -> float:
    """Run ``args.jobs`` workers of ``script`` (with ``extra`` arguments: the same points as this
    process plans), wait for them until ``args.compile_s`` has passed, kill any left; seconds taken."""
    t0 = time.time()
    if args.jobs <= 1:
        return 0.0
    say(f"# compiling with {args.jobs} workers")
    procs = [subprocess.Popen([sys.executable, script, "--worker", "--shard", str(i), "--jobs", str(args.jobs),
                               *extra]) for i in range(args.jobs)]
    for pr in procs:
        try:
            pr.wait(timeout=max(10.0, args.compile_s - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            pr.kill()
            pr.wait()
            say("# a compile worker ran out of time (killed)")
    say(f"# compiled in {time.time() - t0:.1f} s")
    return time.time() - t0


def compile_shard(points: Sequence, args: argparse.Namespace, launch: Callable, sync: Callable) -> None:
    """In a worker: ``launch(point)`` once for this shard's share of ``points``, then ``sync()``; a
    failure is printed and the next point goes on (the main process checks and reports every point)."""
    for pt in list(points)[args.shard::args.jobs]:
        try:
            launch(pt)
            sync()
        except Exception as e:  # noqa: BLE001
            print(f"[worker {args.shard}] {pt}: {type(e).__name__}: {str(e)[:200]}", flush=True)
