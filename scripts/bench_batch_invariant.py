#!/usr/bin/env python3
"""What batch-invariant mode costs: ``tiledmm.matmul`` in the mode against the normal mode and
``torch.matmul``, in one process, over the bench suites' shapes (issue 46's target: cost <= 10 %
geomean), with each product checked first.

    PYTHONPATH=src python3 scripts/bench_batch_invariant.py [--dtypes bf16,tf32,fp32]
        [--suites square,irregular,transformer,llm] [--quick] [--budget-s 240] [--probe] [--out F.json]

Per shape and dtype (float32 is "ieee" unless named tf32; torch's TF32 set to match):

* correctness: the mode's and the normal mode's result, each into an ``out`` poisoned with NaN,
  against float64 (relative Frobenius error under the harness's bound); in the mode, a few row
  prefixes ``a[:m]`` (m = 1, M // 2 + 1) against the full product's rows, bitwise;
* time: ``timing.time_calls`` (CUDA events around batches of queued calls, operand sets rotated past
  L2 -- ``harness.rotation_for`` -- median of batches) of torch.matmul, tiledmm.matmul and
  tiledmm.matmul inside ``tiledmm.batch_invariant()``, in that order, shape after shape;
* the mode's pick (``kernels/block/invariant.choices``).

``--probe``: whether configs that share a variant and a K step give the same bits for the same rows
(bf16 and tf32, 4096^3 and 64 x 4096^2, each TMA / Gluon config forced): if they all do, a later mode
could let the tile follow M. Printed, not asserted. ``--quick``: every other shape. ``--budget-s``: the
whole run's time; shapes past it are skipped (and counted). A short table is printed last: per dtype
and suite the geomean of normal / torch, mode / torch and mode / normal (the cost), the worst shape,
and the bitwise and correctness failures (there should be none).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

DTYPES = {"bf16": ("bfloat16", None), "fp16": ("float16", None), "tf32": ("float32", "tf32"),
          "fp32": ("float32", "ieee")}
SUITES = ("square", "irregular", "transformer", "llm")


def geomean(xs) -> float:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def _operands(torch, shape, dt, n: int, seed: int, dev: str):
    *batch, m, k, nn = shape
    g = torch.Generator(device=dev).manual_seed(seed)
    return [(torch.randn(*batch, m, k, device=dev, generator=g).to(dt),
             torch.randn(*batch, k, nn, device=dev, generator=g).to(dt)) for _ in range(n)]


def _rel(torch, got, a, b) -> float:
    ref = a.double() @ b.double()
    return float((got.double() - ref).norm() / ref.norm())


def run_shape(torch, tiledmm, shape, label: str, dtype: str, precision, timing, dev: str) -> dict:
    from tiledmm.harness import rotation_for, tolerance
    from tiledmm.kernels.block import invariant
    dt = getattr(torch, dtype)
    sets = _operands(torch, shape, dt, rotation_for(tuple(shape), dtype), zlib.crc32(repr((label, shape)).encode()),
                     dev)
    a, b = sets[0]
    tol = tolerance(dtype, precision)
    row = {"dtype": label, "shape": "x".join(map(str, shape))}
    # correctness, both modes, into poisoned outputs
    errs = {}
    for mode in ("normal", "invariant"):
        out = torch.full((*a.shape[:-1], b.shape[-1]), float("nan"), device=dev, dtype=dt)
        with tiledmm.batch_invariant(mode == "invariant"):
            tiledmm.matmul(a, b, out=out, precision=precision)
        errs[mode] = _rel(torch, out, a, b)
    row["err"] = errs
    row["correct"] = all(e < tol for e in errs.values())
    # bitwise: row prefixes in the mode
    bad = []
    with tiledmm.batch_invariant():
        full = tiledmm.matmul(a, b, precision=precision)
        M = a.shape[-2]
        for m in sorted({1, M // 2 + 1} - {M}):
            if not torch.equal(tiledmm.matmul(a[..., :m, :], b, precision=precision), full[..., :m, :]):
                bad.append(m)
        pick = [ch for ch in invariant.choices().values() if (ch["K"], ch["N"]) == (a.shape[-1], b.shape[-1])]
    row["bitwise_failures"] = bad
    row["pick"] = f"{pick[-1]['variant']}:" + "x".join(str(pick[-1]["config"].get(k)) for k in
                                                       ("BLOCK_M", "BLOCK_N", "BLOCK_K")) if pick else "?"
    # time: torch, normal, mode
    calls_t = [lambda x=x, y=y: torch.matmul(x, y) for x, y in sets]
    calls_n = [lambda x=x, y=y: tiledmm.matmul(x, y, precision=precision) for x, y in sets]
    row["torch_ms"] = timing(calls_t)
    row["normal_ms"] = timing(calls_n)
    with tiledmm.batch_invariant():
        row["invariant_ms"] = timing(calls_n)
    row["normal_vs_torch"] = row["torch_ms"] / row["normal_ms"]
    row["invariant_vs_torch"] = row["torch_ms"] / row["invariant_ms"]
    row["cost"] = row["invariant_ms"] / row["normal_ms"]
    return row


def probe(torch, tiledmm) -> list[dict]:
    """Bits of the same rows under each config of one variant and K step (forced)."""
    from tiledmm.kernels.block import variants as V
    out = []
    for label, (dtype, precision) in (("bf16", DTYPES["bf16"]), ("tf32", DTYPES["tf32"])):
        kind = "16bit" if precision is None else precision
        dt = getattr(torch, dtype)
        for M in (64, 4096):
            torch.manual_seed(0)
            a = torch.randn(M, 4096, device="cuda", dtype=dt)
            b = torch.randn(4096, 4096, device="cuda", dtype=dt)
            if precision == "tf32":
                b = b.T.contiguous().T          # K-major B: the TMA kernel's tf32 layout
            for v in (V.TMA, V.GLUON):
                by_k: dict = {}
                for cfg in v.invariant(v.configs(kind)):
                    try:
                        c = tiledmm.matmul(a, b, precision=precision, variant=v.name, config=cfg)
                    except Exception as e:  # noqa: BLE001 -- a config this GPU cannot build: recorded
                        out.append({"dtype": label, "M": M, "variant": v.name, "config": cfg, "error": str(e)[:120]})
                        continue
                    ref = by_k.setdefault(cfg["BLOCK_K"], c)
                    out.append({"dtype": label, "M": M, "variant": v.name, "tile": f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}",
                                "BLOCK_K": cfg["BLOCK_K"], "differing": int((c != ref).sum())})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtypes", default="bf16,tf32,fp32")
    ap.add_argument("--suites", default=",".join(SUITES))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--probe", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--emulate", action="store_true", help="toy shapes in emulation (no GPU): the script's own test")
    args = ap.parse_args()
    if args.emulate:
        os.environ["TILEDMM_EMULATE"] = "1"

    import torch

    import tiledmm
    from tiledmm.bench import SUITES as SHAPES
    from tiledmm.timing import time_calls
    emulating = tiledmm.emulating()
    if emulating and not args.emulate:
        print("bench_batch_invariant: needs a CUDA GPU (--emulate: toy shapes on the CPU)", file=sys.stderr)
        return 2
    dev = "cpu" if emulating else "cuda"

    def timing(calls):
        return time_calls(calls, batches=3, warmup=2, batch_ms=5.0)

    t0 = time.perf_counter()
    rows, skipped = [], 0
    labels = [d for d in args.dtypes.split(",") if d]
    for label in labels:
        dtype, precision = DTYPES[label]
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        if emulating and precision == "tf32":
            continue            # (no tf32 in the interpreter)
        for suite in (["emulation"] if emulating else args.suites.split(",")):
            shapes = SHAPES[suite][::2] if args.quick else SHAPES[suite]
            for shape in shapes:
                if time.perf_counter() - t0 > args.budget_s:
                    skipped += 1
                    continue
                r = run_shape(torch, tiledmm, shape, label, dtype, precision, timing, dev)
                r["suite"] = suite
                rows.append(r)
                print(f"{label:5s} {suite:11s} {r['shape']:>20s}  torch {r['torch_ms']:8.4f} ms  normal "
                      f"{r['normal_vs_torch']:5.2f}x  mode {r['invariant_vs_torch']:5.2f}x  cost {r['cost']:5.2f}  "
                      f"{r['pick']}{'' if r['correct'] else '  WRONG ' + str(r['err'])}"
                      f"{'  BITWISE ' + str(r['bitwise_failures']) if r['bitwise_failures'] else ''}", flush=True)
    probed = probe(torch, tiledmm) if args.probe and not emulating else []
    env = {"gpu": "emulation" if emulating else torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": __import__("triton").__version__, "seconds": round(time.perf_counter() - t0, 1)}
    if args.out:
        Path(args.out).write_text(json.dumps({"env": env, "rows": rows, "probe": probed, "skipped": skipped},
                                             indent=1, default=str))
    if probed:
        print("\nprobe: elements differing from the first config of the same variant and BLOCK_K")
        for p in probed:
            print(f"  {p['dtype']} M={p['M']:5d} {p['variant']:9s} {p.get('tile', '')} BK={p.get('BLOCK_K', '')} "
                  f"{p.get('differing', p.get('error'))}")
    print(f"\nbatch-invariant mode on {env['gpu']} (torch {env['torch']}, triton {env['triton']}), "
          f"{env['seconds']} s, {skipped} shapes skipped (budget)")
    print(f"{'dtype':5s} {'suite':11s} {'n':>3s} {'normal/torch':>12s} {'mode/torch':>10s} {'cost':>6s} "
          f"{'worst cost (shape)':>30s} {'bitwise':>7s} {'wrong':>5s}")
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["dtype"], r["suite"]), []).append(r)
        groups.setdefault((r["dtype"], "all"), []).append(r)
    for (label, suite), rs in groups.items():
        worst = max(rs, key=lambda r: r["cost"])
        print(f"{label:5s} {suite:11s} {len(rs):3d} {geomean(r['normal_vs_torch'] for r in rs):12.3f} "
              f"{geomean(r['invariant_vs_torch'] for r in rs):10.3f} {geomean(r['cost'] for r in rs):6.3f} "
              f"{worst['cost']:8.2f} ({worst['shape']:>18s}) {sum(bool(r['bitwise_failures']) for r in rs):7d} "
              f"{sum(not r['correct'] for r in rs):5d}")
    print(f"{'all':5s} {'all':11s} {len(rows):3d} {geomean(r['normal_vs_torch'] for r in rows):12.3f} "
          f"{geomean(r['invariant_vs_torch'] for r in rows):10.3f} {geomean(r['cost'] for r in rows):6.3f}"
          "   (target: cost <= 1.10)")
    return 0 if all(r["correct"] and not r["bitwise_failures"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
