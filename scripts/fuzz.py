#!/usr/bin/env python3
"""A randomized checker of ``tiledmm.matmul``'s contract (README, "The contract").

    python3 scripts/fuzz.py --cases 10000 --seed 0 [--out DIR] [--max-dim N]
    python3 scripts/fuzz.py --seed 0 --only 123,456 -v      # re-run (repro) single cases

The cases and checks live in ``tiledmm.testing`` (its docstring says what a case draws and what is
checked); this script runs many of them, in ``--jobs`` worker processes on a GPU, prints the table
of outcomes and the failing cases, and writes fuzz.json to ``--out``. Exit status 1 if any case is
wrong, refused or crashed. Tuning is off unless ``--tune``; tuned choices go to a throw-away folder.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TILEDMM_QUIET", "1")     # before tiledmm is imported

from tiledmm.testing import DEFAULT_TEMPLATES, Env, Summary, draw_case, run, setup_env  # noqa: E402


# -- several processes on one GPU: Triton and numba compile on the CPU, one kernel at a time per
#    process, and a first run meets hundreds of specialisations; N processes compile N at a time

_WORKER: dict = {}


def _worker_init(tune: bool, max_dim: int | None, templates: int | None) -> None:
    setup_env(tune)
    _WORKER["env"] = Env.detect(max_dim, templates)
    import torch
    torch.set_num_threads(2)


def _worker_chunk(seed: int, indices: list, verbose: bool, deadline: float | None):
    env = _WORKER["env"]
    records: list = []
    left = None if deadline is None else max(0.0, deadline - time.time())
    if left == 0.0:
        return records, f"time limit reached before case {indices[0]}"
    s = run(env, seed, indices, verbose=verbose, time_limit=left, records=records,
            log=lambda m: print(m, flush=True))
    return records, s.stopped


def _affinity(env: Env, seed: int, i: int, jobs: int) -> int:
    """The worker for case ``i``: a SIMT kernel's cases (numba compiles per process, with no shared
    cache) all go to one worker per (kernel, dtype); the rest round-robin (Triton's compiled kernels
    are shared through its on-disk cache)."""
    try:
        c = draw_case(env, seed, i)
    except Exception:   # noqa: BLE001
        return i % jobs
    spec = env.specs.get(c.resolved)
    if spec is not None and spec.family == "simt" and not c.invalid:
        import zlib
        return zlib.crc32(f"{c.resolved}/{c.dtype}".encode()) % jobs
    return i % jobs


def run_parallel(env: Env, seed: int, indices: list, jobs: int, *, tune: bool, max_dim: int | None,
                 verbose: bool, time_limit: float | None, chunk: int = 20) -> Summary:
    """``run`` spread over ``jobs`` worker processes (spawned: CUDA does not survive a fork), one
    GPU; the cases are the same, only the order differs."""
    import concurrent.futures as cf
    import multiprocessing as mp
    s = Summary(seed)
    t0 = time.perf_counter()
    deadline = None if time_limit is None else time.time() + time_limit
    mine: list[list[int]] = [[] for _ in range(jobs)]
    for i in indices:
        mine[_affinity(env, seed, i, jobs)].append(i)
    stopped = []
    ctx = mp.get_context("spawn")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):   # many processes: few threads each
        os.environ.setdefault(var, "2")
    pools = [cf.ProcessPoolExecutor(1, mp_context=ctx, initializer=_worker_init,
                                    initargs=(tune, max_dim, env.templates)) for _ in range(jobs)]
    try:
        futures = {}
        for pool, idx in zip(pools, mine):
            for k in range(0, len(idx), chunk):
                c = idx[k:k + chunk]
                futures[pool.submit(_worker_chunk, seed, c, verbose, deadline)] = c
        for f in cf.as_completed(futures):
            c = futures[f]
            try:
                records, why = f.result()
            except Exception as e:   # noqa: BLE001  (a worker died: a segfault, the CUDA context, ...)
                stopped.append(f"cases {c[0]}..{c[-1]}: worker failed: {type(e).__name__}: {e}")
                continue
            for r in records:
                s.add_record(*r)
            if why:
                stopped.append(why)
    finally:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)
    s.failures.sort(key=lambda e: e["case"])
    s.by_design.sort(key=lambda e: e["case"])
    broken = [w for w in stopped if "CUDA context" in w or "worker failed" in w]
    limit = [w for w in stopped if "time limit" in w]
    s.stopped = "; ".join(broken[:3] + ([f"time limit {time_limit} s reached"] if limit else []))
    s.elapsed_s = time.perf_counter() - t0
    return s


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="folder for fuzz.json (the table, every non-ok case)")
    p.add_argument("--max-dim", type=int, default=None, help="largest size of the rare big cases "
                   "(default 2048 on a GPU, 24 in emulation)")
    p.add_argument("--only", help="comma-separated case indices to run (repro)")
    p.add_argument("--start", type=int, default=0, help="first case index")
    p.add_argument("--time-limit", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--tune", action="store_true", help="keep first-call tuning on (slow: times candidates)")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: on a GPU min(12, CPUs - 4), "
                   "in emulation 1); they share the GPU and compile kernels side by side")
    p.add_argument("--templates", type=int, default=None, help="structures per run (default: "
                   f"{DEFAULT_TEMPLATES} on a GPU, 0 in emulation; 0 = every case its own, slower on a GPU)")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    args = p.parse_args(argv)
    setup_env(args.tune)
    env = Env.detect(args.max_dim, args.templates)
    indices = [int(x) for x in args.only.split(",")] if args.only else range(args.start, args.start + args.cases)
    print(f"tiledmm fuzz: {'GPU' if env.gpu else 'emulation'}, seed {args.seed}, "
          f"{len(indices)} cases, kinds {[k for k, _ in env.kinds]}, max dim {env.max_dim}, "
          f"templates {env.templates or 'off (every case its own structure)'}", flush=True)
    jobs = args.jobs if args.jobs is not None else (min(12, max(1, (os.cpu_count() or 2) - 4)) if env.gpu else 1)
    if len(indices) < 50:
        jobs = 1
    print(f"{jobs} process(es)", flush=True)
    if jobs > 1:
        s = run_parallel(env, args.seed, list(indices), jobs, tune=args.tune, max_dim=args.max_dim,
                         verbose=args.verbose, time_limit=args.time_limit)
    else:
        s = run(env, args.seed, indices, verbose=args.verbose, time_limit=args.time_limit,
                log=lambda m: print(m, flush=True))
    if s.by_design:
        print(f"\nrefused by design (a forced variant that cannot run the call): {len(s.by_design)} cases")
    if s.failures:
        print(f"\n{len(s.failures)} failing case(s) (repro: --seed {args.seed} --only INDEX -v):")
        for f in s.failures[:50]:
            print(f"  [{f['category']}] case {f['case']}: {f['description']}\n      {f['reason']}")
    print()
    print(s.table())
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "fuzz.json"), "w") as fh:
            json.dump(s.to_json(), fh, indent=1, default=str)
        print(f"wrote {os.path.join(args.out, 'fuzz.json')}")
    return 1 if s.bad() or s.stopped.startswith("the CUDA") else 0


if __name__ == "__main__":
    sys.exit(main())
