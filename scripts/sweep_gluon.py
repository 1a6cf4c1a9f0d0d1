"""Every 16-bit Gluon config, plain and TAIL, timed on the bench suites' shapes: the data the no-timing
pick's model (``gluon_gemm.heuristic``) is fitted to and checked against (issues 22 and 24). H100 only:

    PYTHONPATH=src python3 scripts/sweep_gluon.py [--suites llm,square,irregular,transformer,loop] [--out DIR]

Per shape (bf16, A and B row-major, the bench's layout) and config: GPU ms (scripts/bench_gluon.py's method:
a CUDA graph of queued launches, inputs rotated past L2, median of batches) and torch.matmul's, in one JSON
(``sweep.json`` under --out) and a line per shape: torch us, the fastest config x torch, the heuristic's
pick x torch. Shapes the kernel cannot take (misaligned rows, batched) and M <= 16 are left out. Each
config is checked against float64 once, on a ragged shape, before any timing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gluon as BG  # noqa: E402

from tiledmm.bench import SUITES  # noqa: E402
from tiledmm.kernels.block import gluon_gemm as G  # noqa: E402

# the random-M loop's N = K = 4096 at the Ms where its passes lose (session 12's bench_loop_m)
LOOP = [(m, 4096, 4096) for m in (96, 192, 320, 384, 600, 768, 900, 1100, 1280, 1536, 1792)]


def configs() -> list[dict]:
    plain = [dict(c, TAIL=0) for c in G.CONFIGS["16bit"]]
    return plain + [dict(c, TAIL=1) for c in plain if c["SPLIT_K"] == 1]


def shapes(suites: str) -> list[tuple]:
    out = []
    for s in suites.split(","):
        rows = LOOP if s == "loop" else [(m, n, k) for (m, k, n, *rest) in SUITES[s] if not rest]
        for m, n, k in rows:
            if m > 16 and (m * 2) % 16 == 0 and (n * 2) % 16 == 0 and (k * 2) % 16 == 0 and (m, n, k) not in out:
                out.append((m, n, k))
    return sorted(out, key=lambda s: s[0] * s[1] * s[2])     # light first: the budget cuts the heaviest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suites", default="llm,square,irregular,transformer,loop")
    ap.add_argument("--out", default=None)
    ap.add_argument("--budget-s", type=float, default=540.0, help="stop timing new shapes after this long")
    args = ap.parse_args()
    t0 = time.time()
    cfgs = configs()
    bad = 0
    for cfg in cfgs:
        r = BG.check(777, 1000, 1000, torch.bfloat16, cfg)
        bad += not r.startswith("ok")
        if not r.startswith("ok"):
            print("CHECK", BG.config_name(cfg), r, flush=True)
    print(f"checks: {len(cfgs)} configs, failures {bad}", flush=True)
    rows = []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for M, N, K in shapes(args.suites):
        if time.time() - t0 > args.budget_s:
            print(f"budget spent: stopped before {M}x{N}x{K}", flush=True)
            break
        row = BG.bench(M, N, K, torch.bfloat16, cfgs)
        rows.append(row)
        ok = {k: v for k, v in row["configs"].items() if "ms" in v}
        best = min(ok, key=lambda k: ok[k]["ms"])
        pick = BG.config_name(G.heuristic(M, N, K, "16bit", sms, 2))
        pk = ok.get(pick, {}).get("x_torch", float("nan"))
        print(f"{M}x{N}x{K:<6} torch {row['torch_ms'] * 1e3:8.1f} us  best {best} {ok[best]['x_torch']:.2f}  "
              f"pick {pick} {pk:.2f}", flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "sweep.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "sms": sms,
                       "rows": rows}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
