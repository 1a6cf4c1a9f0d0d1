#!/usr/bin/env python3
"""Build a shipped per-GPU table of timed choices (kernels/block/shipped.py) on the GPU at hand.

    PYTHONPATH=src python3 scripts/build_tables.py --out TABLE.json
        [--suites square,irregular,transformer,llm,models] [--dtypes bf16,tf32,fp16,fp32]
        [--jobs 14] [--compile-s 150] [--budget-s 540]

1. Compile ahead: --jobs worker processes (this script, --worker) launch every candidate
   (variant, config) of their share of the classes once, so Triton's disk cache holds every
   kernel the tuner will time (Triton compiles one kernel at a time per process).
2. Tune: for each (dtype, layout, suite) one ``tiledmm tune SHAPES --table TABLE.json`` in a
   fresh process with an empty tiledmm store, so every class is timed on this GPU; each run
   merges its entries into the table (a run cut short by --budget-s keeps the earlier ones).
3. Print, per entry, the timed choice against the model's pick in the same timing: the
   model's ms / the timed ms is what the no-timing default lost on that class before the table.

Suites: tiledmm.bench.SUITES (row-major operands, "nn"), and "models": GPT-2 small's and
issue 23's Linear products at M = 8192 tokens in the three layouts a training step calls
(nn: dX = dY W; nt: Y = X Wᵀ; tn: dW = dYᵀ X). fp32 (exact) is tuned on square, irregular,
transformer and llm (llm since session 22: its timing takes ~2 minutes on the H100; without its
entries M = 16 took a neighbour class's 32-row split-K tile, 0.64-0.85 of the timed pick).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DTYPES = {"bf16": ("bfloat16", None), "fp16": ("float16", None), "tf32": ("float32", "tf32"),
          "fp32": ("float32", "ieee")}
MODELS = [(8192, 768, 2304), (8192, 768, 768), (8192, 768, 3072), (8192, 3072, 768), (8192, 768, 50257),
          (8192, 4096, 16384), (8192, 16384, 4096)]
FP32_SUITES = ("square", "irregular", "transformer", "llm")


def jobs(suites: list[str], dtypes: list[str]) -> list[tuple[str, str, str, list]]:
    """(dtype label, layout, suite, shapes (m, k, n) or (batch, m, k, n)) to tune."""
    from tiledmm.bench import SUITES
    out = []
    for d in dtypes:
        for s in suites:
            if d == "fp32" and s not in FP32_SUITES:
                continue
            if s == "models":
                for layout in ("nn", "nt", "tn"):
                    out.append((d, layout, s, [tuple(x) for x in MODELS]))
            else:
                out.append((d, "nn", s, [tuple(x) for x in SUITES[s]]))
    return out


def _operand(torch, batch, rows, cols, transposed, dt):
    shape = ((batch,) if batch > 1 else ()) + ((cols, rows) if transposed else (rows, cols))
    t = torch.randn(shape, device="cuda", dtype=dt)
    return t.transpose(-1, -2) if transposed else t


def worker(args) -> None:
    """Launch every candidate of this worker's share of the classes once (compiles them)."""
    import torch
    from tiledmm.kernels.block import dispatch as BM
    points = [(d, lay, sh) for d, lay, _, shapes in jobs(args.suites.split(","), args.dtypes.split(","))
              for sh in shapes]
    for i, (d, lay, sh) in enumerate(points):
        if i % args.jobs != args.shard:
            continue
        name, prec = DTYPES[d]
        dt = getattr(torch, name)
        b, m, k, n = sh if len(sh) == 4 else (1, *sh)
        a = _operand(torch, b, m, k, lay[0] == "t", dt)
        bb = _operand(torch, b, k, n, lay[1] == "t", dt)
        c = torch.empty(*((b,) if b > 1 else ()), m, n, device="cuda", dtype=dt)
        precision = BM.check_precision(name, prec)
        for cd in BM.candidates(a, bb, c, precision, 1.0, 0.0):
            try:
                BM._bind(cd.variant, precision, cd.config)(a, bb, c, alpha=1.0, beta=0.0)
            except Exception as e:   # noqa: BLE001  the tuner skips a candidate that fails: so does this
                print(f"worker {args.shard}: {d} {lay} {sh} {cd.name}: {type(e).__name__}", file=sys.stderr)
        torch.cuda.synchronize()
        del a, bb, c


def precompile(args) -> float:
    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", "--shard", str(i), "--jobs", str(args.jobs),
                               "--suites", args.suites, "--dtypes", args.dtypes],
                              env=dict(os.environ, TILEDMM_CACHE_DIR=tempfile.mkdtemp(prefix="tiledmm-w-")))
             for i in range(args.jobs)]
    for p in procs:
        try:
            p.wait(timeout=max(5.0, args.compile_s - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
    return time.time() - t0


def tune(args, started: float) -> list[str]:
    notes = []
    store = tempfile.mkdtemp(prefix="tiledmm-table-store-")
    for d, layout, suite, shapes in jobs(args.suites.split(","), args.dtypes.split(",")):
        left = args.budget_s - (time.time() - started)
        if left < 10:
            notes.append(f"{d} {layout} {suite}: not tuned (--budget-s spent)")
            continue
        name, prec = DTYPES[d]
        cmd = [sys.executable, "-m", "tiledmm", "tune", *["x".join(map(str, s)) for s in shapes], "--dtype", name,
               "--layout", layout, "--table", args.out] + (["--precision", prec] if prec else [])
        t0 = time.time()
        try:
            r = subprocess.run(cmd, env=dict(os.environ, TILEDMM_CACHE_DIR=store, COLUMNS="200"),
                               capture_output=True, text=True, timeout=left)
            ok = r.returncode == 0
            tail = (r.stdout + r.stderr)[-600:]
        except subprocess.TimeoutExpired:
            ok, tail = False, "timed out"
        notes.append(f"{d} {layout} {suite}: {len(shapes)} shapes, {time.time() - t0:.0f} s" +
                     ("" if ok else f", FAILED: {tail}"))
        print(notes[-1], flush=True)
    return notes


def summary(path: str) -> list[str]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return [f"no table at {path}"]
    rows, ratios = [], {}
    for e in doc["entries"]:
        f = e["layout"].split("|")
        label = f"{f[0].replace('torch.', '')}/{f[2]} {'n' if f[5] == 'True' else 't'}{'n' if f[6] == 'True' else 't'}"
        cls = "x".join(str(2 ** x) for x in e["class"])
        r = e["model_ms"] / e["timed_ms"] if e.get("model_ms") and e.get("timed_ms") else None
        ratios.setdefault(label.split()[0], []).append(r)
        rows.append(f"{label:22s} {cls:>18s}  {e['variant']:>15s} {e['timed_ms'] or 0:9.4f} ms   model "
                    f"{(e['model'] or '-').split(':')[0]:>15s} {e['model_ms'] or 0:9.4f} ms   "
                    f"{'' if r is None else f'{1 / r:.3f}'}")
    out = [f"{doc['gpu']}: {len(doc['entries'])} entries; last column: timed ms / model-pick ms (1.0: the model "
           "already picked the fastest)"] + rows
    for k, rs in ratios.items():
        rs = [x for x in rs if x]
        if rs:
            g = math.exp(sum(math.log(1 / x) for x in rs) / len(rs))
            out.append(f"{k}: timed/model geomean {g:.3f} over {len(rs)} classes, worst {min(1 / x for x in rs):.3f}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=False, default=None)
    ap.add_argument("--suites", default="square,irregular,transformer,llm,models")
    ap.add_argument("--dtypes", default="bf16,tf32,fp16,fp32")
    ap.add_argument("--jobs", type=int, default=14)
    ap.add_argument("--compile-s", type=float, default=150.0)
    ap.add_argument("--budget-s", type=float, default=540.0)
    ap.add_argument("--summary-only", action="store_true", help="print the table at --out and stop")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shard", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if not args.out:
        ap.error("--out TABLE.json is required")
    if args.summary_only:
        print("\n".join(summary(args.out)))
        return 0
    started = time.time()
    notes = []
    if args.jobs > 1:
        notes.append(f"compile ahead: {precompile(args):.0f} s with {args.jobs} workers")
        print(notes[-1], flush=True)
    notes += tune(args, started)
    print("\n".join(summary(args.out) + notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
