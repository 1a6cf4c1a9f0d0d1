"""Does the Gluon kernel's one-kernel split-K pay over more than one wave on the middle shapes (issue 24)?
H100 only:

    PYTHONPATH=src python3 scripts/bench_gluon_split.py [--shapes 256x11008x4096,...]   (MxNxK)

Per shape (bf16, A and B row-major): the heuristic's config, every unsplit 16-bit config, and the
128x256 / 128x128 / 64x256 tiles split 2, 3 and 4 ways (SPLIT_K units per tile, adjacent, so the
M-tiles of a column read the same K-range of B together); each split config checked against float64
first (ragged, repeated launches), then timed with scripts/bench_gluon.py's method (a CUDA graph of
queued launches, inputs rotated over > 2x L2, median of batches): GPU time, x torch.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gluon as BG  # noqa: E402

from tiledmm.kernels.block import gluon_gemm as G  # noqa: E402

SHAPES = "256x11008x4096,256x4096x11008,512x4096x4096,512x4096x11008,512x11008x4096,256x8192x8192,256x28672x8192"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES)
    args = ap.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("needs a Hopper GPU (sm_90)", file=sys.stderr)
        return 2
    base = G.CONFIGS["16bit"]
    split = [dict(c, SPLIT_K=s) for c in (base[0], base[2], base[3]) for s in (2, 3, 4)]
    bad = 0
    for cfg in split:
        for _ in range(2):
            r = BG.check(777, 1000, 1000, torch.bfloat16, cfg)
            if not r.startswith("ok"):
                bad += 1
                print(f"{r} {BG.config_name(cfg)}", flush=True)
    print(f"split configs checked: {bad} failures", flush=True)
    rows = []
    for s in args.shapes.split(","):
        M, N, K = map(int, s.split("x"))
        pick = G.heuristic(M, N, K, "16bit", 132, 2)
        cfgs = base + split
        row = BG.bench(M, N, K, torch.bfloat16, cfgs)
        t = {BG.config_name(c): v.get("ms") for c, v in zip(cfgs, row["configs"].values())}
        torch_ms = row["torch_ms"]
        best_plain = min((v, k) for k, v in t.items() if v and k.endswith("k1"))
        best_split = min((v, k) for k, v in t.items() if v and not k.endswith("k1"))
        rows.append((s, BG.config_name(pick), torch_ms / t[BG.config_name(pick)], best_plain, best_split, torch_ms))
        print(s, " ".join(f"{k}={1e3 * v:.1f}" for k, v in t.items() if v), f"torch={1e3 * torch_ms:.1f} us", flush=True)
    print("\nMxNxK             pick x   best unsplit x      best split x       (GPU time x torch)")
    for s, pname, px, (bp, bpn), (bs, bsn), tt in rows:
        print(f"{s:17} {pname:16} {px:5.2f}  {bpn:16} {tt / bp:5.2f}  {bsn:16} {tt / bs:5.2f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
