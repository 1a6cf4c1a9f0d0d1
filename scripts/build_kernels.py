#!/usr/bin/env python3
"""Build the compiled Triton kernels tiledmm ships (``src/tiledmm/kernels/block/prebuilt/``), on a GPU.

    PYTHONPATH=src python3 scripts/build_kernels.py [--jobs 8] [--budget-s 420]
        [--parts table,suites,rows,linear,invariant,classes] [--merge] [--out DIR] [--plan] [--collect-only]

A new process looks a kernel it has not compiled up in the package's store, by a key that is the same on
every machine with this tiledmm and this Triton version (``_adapter.IndexKey.shipped``): a hit compiles
nothing. This script fills the store for the installed Triton version and this GPU's target (sm_90 on an
H100 or H200): it runs the calls below through tiledmm's public API with an empty Triton cache and
kernel index (``TILEDMM_PREBUILT=off``, ``TILEDMM_TUNE`` off: the default picks), in ``--jobs`` worker
processes that share that cache, then copies every kernel the index recorded
into the store (``_adapter.export_compiled``: metadata and cubin, each distinct file once, gzipped) and
prints the size report. The store is keyed by the kernels' sources: build it from the code you ship.

The calls (``--plan`` lists their number per part without a GPU):

* table: one call per entry of this GPU's shipped table (``kernels/block/tables``), synthesised to the
  entry's layout key and shape class (2^class sizes, adjusted to its alignment flags; a misaligned
  layout with a one-element offset), so every tabled choice is compiled; and one per entry of every other
  table of this GPU's target (``about.target``: the H200's on an H100), its variant and config forced;
* suites: the bench suites (square, irregular, transformer, llm) in bf16, fp16, tf32 and fp32, with B
  row-major and transposed (x @ W.T);
* rows: the llm suite's (N, K) at every M class 1 .. 8192 (the random-M loop's classes), M a power of two
  and one more (Triton's two specialisations of M: divisible by 16 or not), bf16 / fp16 / tf32 / fp32, B
  row-major and transposed;
* linear: ``tiledmm.nn.functional.linear`` (bias; none, gelu, silu) at M 16, 512, 4096 in bf16 and fp16,
  and a forward + backward at M 4096 (the backward products' layouts);
* invariant: the same llm shapes in batch-invariant mode (its own picks) at M 1 and 4096;
* classes: M, N, K each of 768, 1536, 3072, 6144 (between the suites' powers of two, where the model's picks
  differ), and M one less (another specialisation), every dtype, B row-major and transposed.

``--collect-only``: run nothing; export what the current Triton cache's index holds (after your own
runs). ``--merge``: keep the store's entries for this Triton version (default: replace them). Kernels of
other shapes' specialisations (another divisibility of N or K by 16, other strides) compile on first use.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

PARTS = ("table", "suites", "rows", "linear", "invariant", "classes")     # (tiledmm.kernels.block.build_calls.PARTS)


def worker(points: list[dict], shard: int, jobs: int) -> None:
    """Run this shard's share of the points (every ``jobs``-th from ``shard``); a failure is printed and
    the next point goes on."""
    import torch

    import tiledmm
    from tiledmm.kernels.block.build_calls import run_point
    for p in points[shard::jobs]:
        for attempt in range(4):        # workers share a GPU: out of memory is waited out, then reported
            try:
                why = run_point(torch, tiledmm, p)
                torch.cuda.synchronize()
                if why:
                    print(f"[worker {shard}] table layout {p['layout']} {p['cls']} synthesised as {why}", flush=True)
                break
            except Exception as e:  # noqa: BLE001
                if "out of memory" in str(e) and attempt < 3:
                    torch.cuda.empty_cache()
                    time.sleep(2.0 * (attempt + 1))
                    continue
                print(f"[worker {shard}] {p}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                break


def _visible(i: int, gpus: int) -> str:
    """Worker ``i``'s GPU, as CUDA_VISIBLE_DEVICES names it (within the caller's own visible set)."""
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = seen.split(",") if seen else [str(g) for g in range(gpus)]
    return ids[i % len(ids)]


def run_workers(args, seconds: float) -> None:
    """``args.jobs`` copies of this script as workers on the shared Triton cache, for at most ``seconds``."""
    import subprocess
    t0 = time.time()
    import torch
    gpus = max(1, torch.cuda.device_count())      # workers spread over every GPU: one GPU's memory held 32 too few
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", "--shard", str(i), "--jobs", str(args.jobs),
                               "--parts", args.parts, "--triton-cache", args.triton_cache],
                              env=dict(os.environ, CUDA_VISIBLE_DEVICES=_visible(i, gpus)) if gpus > 1 else None)
             for i in range(args.jobs)]
    for pr in procs:
        try:
            pr.wait(timeout=max(10.0, seconds - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            pr.kill()
            pr.wait()
            print("# a worker ran out of time (killed): its remaining calls compile on first use", flush=True)
    print(f"# calls run in {time.time() - t0:.1f} s by {args.jobs} workers", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--out", default=None, help="the store (default: the package's)")
    ap.add_argument("--merge", action="store_true", help="keep this Triton version's entries already there")
    ap.add_argument("--plan", action="store_true", help="print the number of calls per part and exit (no GPU)")
    ap.add_argument("--collect-only", action="store_true", help="run nothing: export the current index")
    ap.add_argument("--jobs", type=int, default=8, help="worker processes (they share the GPU and Triton's cache)")
    ap.add_argument("--triton-cache", default=None, help=argparse.SUPPRESS)   # the workers' shared cache
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shard", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    parts = [x for x in args.parts.split(",") if x]

    if not args.collect_only and not args.plan:
        # an empty Triton cache and index shared with the workers, the defaults' picks, the store not read
        if args.triton_cache is None:
            args.triton_cache = tempfile.mkdtemp(prefix="tiledmm-build-triton-")
        os.environ["TRITON_CACHE_DIR"] = args.triton_cache
        os.environ.setdefault("TILEDMM_CACHE_DIR", args.triton_cache + "-tiledmm")
        os.environ["TILEDMM_PREBUILT"] = "off"
        os.environ["TILEDMM_TUNE"] = "off"
        os.environ.pop("TILEDMM_BATCH_INVARIANT", None)
    import tiledmm
    from tiledmm import _adapter
    from tiledmm.analysis.device import properties
    from tiledmm.kernels.block import shipped
    from tiledmm.kernels.block.build_calls import H100, plan
    if args.plan or tiledmm.emulating():
        table, target = shipped.table_for(H100, 132), shipped.target((9, 0))
    else:
        pr = properties(0)
        table, target = shipped.table_for(pr.name, pr.num_sms), shipped.target(pr.capability)
    # the other GPUs' tables of this target: their choices compiled here too (one cubin serves every such GPU)
    others = [t for t in shipped.tables() if t["gpu"] != (table or {}).get("gpu") and t["target"] == target]
    points = plan(parts, table, others)
    if args.plan:
        for part in parts:
            print(f"{part:10s} {sum(p['part'] == part for p in points)}")
        print(f"{len(points)} calls planned")
        return 0
    if tiledmm.emulating():
        print("build_kernels: needs a CUDA GPU (--plan runs without one)", file=sys.stderr)
        return 2
    if args.worker:
        worker(points, args.shard, args.jobs)
        return 0
    t0 = time.time()
    if not args.collect_only:
        if args.jobs <= 1:
            worker(points, 0, 1)
        else:
            run_workers(args, args.budget_s - 60)
    from triton import knobs
    index = Path(knobs.cache.dir) / "tiledmm-index"
    report = _adapter.export_compiled(args.out, index=index, fresh=not args.merge and not args.collect_only)
    import torch
    report.update(gpu=torch.cuda.get_device_name(), calls=len(points), parts=parts,
                  seconds=round(time.time() - t0, 1), index=str(index))
    print(json.dumps(report, indent=1))
    mb = 1 << 20
    print(f"\ncompiled kernels for Triton {report['triton']} on {report['gpu']} (targets {report['targets']}): "
          f"{report['kernels']} kernels, {report['cubins']} distinct cubins, {report['raw_bytes'] / mb:.1f} MB raw, "
          f"{report['stored_bytes'] / mb:.1f} MB in the package; {len(points)} calls in {report['seconds']} s")
    return 0 if report["kernels"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
