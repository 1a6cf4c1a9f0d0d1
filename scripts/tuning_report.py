"""Each candidate the dispatcher times for a shape's first call, with its time (or why it failed):
tiledmm.matmul once per (shape, precision) with TILEDMM_TUNING_DEBUG=1 and a fresh tuning cache.

    python scripts/tuning_report.py --shapes 127x8191x127,32x5120x13824 --precisions bf16,tf32
Shapes are MxKxN.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
os.environ["TILEDMM_TUNING_DEBUG"] = "1"
os.environ.setdefault("TILEDMM_CACHE_DIR", tempfile.mkdtemp(prefix="tiledmm-tuning-"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--precisions", default="bf16,tf32")
    args = ap.parse_args()
    import torch
    import tiledmm
    for s in args.shapes.split(","):
        m, k, n = (int(x) for x in s.split("x"))
        for p in args.precisions.split(","):
            dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[p]
            a = torch.randn(m, k, device="cuda").to(dt)
            b = torch.randn(k, n, device="cuda").to(dt)
            print(f"== {s} {p}", file=sys.stderr, flush=True)
            c = tiledmm.matmul(a, b, precision="tf32" if p == "tf32" else None)
            ref = a.double() @ b.double()
            print(f"   rel err {((c.double() - ref).norm() / ref.norm()).item():.2e}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
