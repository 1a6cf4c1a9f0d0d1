"""The Gluon kernel's tail split (config TAIL, issue 24): right, and does it pay? H100 only:

    PYTHONPATH=src python3 scripts/bench_gluon_tail.py [--checks-only]

A TAIL config runs the tiles of whole waves whole and splits each tile of the last, partial wave along K
(``gluon_gemm.tail_plan``), the split units sharing the fix-up. First every 16-bit tile with TAIL is
checked against float64 (ragged, alpha/beta, transposed, twice each: the counters must come back to
zero) and two tf32 tiles in three layouts; then the bf16 middle shapes are timed with
scripts/bench_gluon.py's method (CUDA graph, inputs rotated past L2): GPU time x torch, plain -> TAIL.
"""
import sys

import torch

sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
import bench_gluon as BG  # noqa: E402

from tiledmm.kernels.block import gluon_gemm as G  # noqa: E402

c = G._c
T16 = [c(128, 256, 64, 8, 4, group=16, epi=2), c(128, 128, 64, 8, 4), c(64, 256, 64, 4, 4), c(64, 128, 64, 4, 6),
       c(64, 64, 64, 4, 8)]
T16t = [dict(x, TAIL=1) for x in T16]


def main() -> int:
    bad = 0
    checks = [(1100, 4096, 4096, torch.bfloat16, {}), (777, 1000, 1000, torch.bfloat16, {}), (300, 520, 136, torch.float16, {}),
              (1100, 1000, 520, torch.bfloat16, dict(alpha=0.5, beta=0.7)), (600, 4096, 1024, torch.bfloat16, dict(a_t=True, b_t=True)),
              (70, 3000, 2048, torch.bfloat16, {})]
    for M, N, K, dt, kw in checks:
        for cfg in T16t:
            for rep in range(2):      # twice: the counters must be back at zero
                r = BG.check(M, N, K, dt, cfg, **kw)
                if not r.startswith("ok") and not r.startswith("not applicable"):
                    bad += 1
                if not r.startswith("ok") or rep == 0 and cfg is T16t[0]:
                    print(M, N, K, dt, kw, BG.config_name(cfg), G.tail_plan(G.cdiv(M, cfg["BLOCK_M"]) * G.cdiv(N, cfg["BLOCK_N"]), G.cdiv(K, 64), 132), r, flush=True)
    for cfg in [c(128, 128, 32, 8, 4, tail=1), c(256, 128, 32, 8, 3, epi=2, tail=1)]:
        for kw in ({}, dict(b_t=True), dict(a_t=True, b_t=True)):
            r = BG.check(1100, 2000, 1000, torch.float32, cfg, **kw)
            if not r.startswith("ok") and not r.startswith("not applicable"):
                bad += 1
            print("tf32", BG.config_name(cfg), kw, r, flush=True)
    print("tail checks: failures", bad, flush=True)
    if "--checks-only" in sys.argv:
        return 1 if bad else 0
    shapes = [(160, 4096, 4096), (300, 4096, 4096), (600, 4096, 4096), (1100, 4096, 4096), (1280, 4096, 4096), (1536, 4096, 4096),
              (256, 4096, 4096), (512, 11008, 4096), (2048, 11008, 4096), (1024, 8192, 8192), (3000, 2000, 4000)]
    print("\nshape            torch_us | " + " | ".join(BG.config_name(x) for x in T16), flush=True)
    for M, N, K in shapes:
        row = BG.bench(M, N, K, torch.bfloat16, T16 + T16t)
        cf = row["configs"]
        cells = []
        for a, b in zip(T16, T16t):
            x, y = cf[BG.config_name(a)], cf[BG.config_name(b)]
            cells.append(f"{x.get('x_torch', 0):.2f}->{y.get('x_torch', 0):.2f}" if "ms" in x and "ms" in y else f"{x.get('error', '')[:30]}/{y.get('error', '')[:30]}")
        print(f"{M}x{N}x{K:<6} {row['torch_ms'] * 1e3:7.1f} | " + " | ".join(cells), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
