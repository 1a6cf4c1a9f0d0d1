"""Stream-K in the Gluon kernel (issue 24 item 2): right against float64, then timed against the
data-parallel configs and torch.matmul on the middle shapes it is for. H100 only:

    PYTHONPATH=src python3 scripts/bench_stream_k.py [--quick] [--no-time]

Correctness (every stream-K config, bf16/fp16, tf32 with its own): shapes whose tile counts cover
the schedule's cases -- fewer tiles than SMs (every tile shared, several runs a tile), between one
and two waves, more than two waves with a remainder (data-parallel tiles first), whole waves (no
stream-K at all), a K of a few steps (runs shorter than a tile's K), ragged edges -- each launched
three times in a row (the arrival counters must reset themselves), with alpha/beta, transposed
operands; output poisoned with NaN first. Timing: scripts/bench_gluon.py's method (a CUDA graph of
queued launches, inputs rotated over > 2x L2, median of batches): GPU time only.
Prints per shape the model's pick, the best data-parallel config, each stream-K config, torch.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gluon as BG  # noqa: E402

from tiledmm.kernels.block import gluon_gemm as G  # noqa: E402

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
# M, N, K: 8 tiles (128x256) on 132 SMs; 86 (one wave, shared); 172 128x128 tiles (1.3 waves);
# 512 tiles (3.9 waves: 264 data-parallel); 264 = 2 whole waves; K = 3 steps; ragged
CHECKS = [(128, 2048, 4096), (256, 11008, 4096), (256, 11008, 1000), (4096, 4096, 512), (1056, 8448, 1024),
          (300, 1000, 192), (777, 1000, 1000), (64, 512, 8192)]
SHAPES = [(64, 4096, 4096), (128, 4096, 4096), (256, 4096, 4096), (256, 11008, 4096), (256, 4096, 11008),
          (512, 4096, 4096), (512, 11008, 4096), (512, 8192, 28672), (512, 28672, 8192), (1024, 4096, 4096),
          (1024, 8192, 8192), (2048, 4096, 4096), (4096, 4096, 4096), (1000, 1000, 1000), (5056, 5056, 5056)]


def _name(cfg):
    return f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}{'sk' if G.stream_k(cfg) else ''}s{cfg['num_stages']}e{cfg['EPI_SPLIT']}"


def correctness(quick: bool) -> int:
    bad = 0
    sk16 = [c for c in G.CONFIGS["16bit"] if G.stream_k(c)]
    sk32 = [c for c in G.CONFIGS["tf32"] if G.stream_k(c)]
    for dtype, cfgs in ((BF16, sk16), (FP16, sk16[:1]), (FP32, sk32)):
        b_t = dtype == FP32
        for cfg in cfgs:
            for (M, N, K) in CHECKS[:4] if quick else CHECKS:
                for rep in range(3):
                    r = BG.check(M, N, K, dtype, cfg, b_t=b_t, seed=rep)
                    if not r.startswith("ok"):
                        bad += 1
                        print(f"{r} {dtype} {_name(cfg)} {M}x{N}x{K} rep {rep}", flush=True)
            for kw in ({"alpha": 0.5, "beta": 2.0}, {"a_t": True}, {"a_t": True, "b_t": True}):
                if dtype == FP32 and kw.get("a_t"):
                    continue
                r = BG.check(256, 11008, 1000, dtype, cfg, **{"b_t": b_t, **kw})
                if not r.startswith("ok"):
                    bad += 1
                    print(f"{r} {dtype} {_name(cfg)} 256x11008x1000 {kw}", flush=True)
            print(f"checked {dtype} {_name(cfg)}", flush=True)
    print(f"stream-K correctness: {bad} failures", flush=True)
    return bad


def timing(shapes) -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for dtype in (BF16,):
        kind = "16bit"
        dp = [c for c in G.CONFIGS[kind] if not G.stream_k(c)]
        sk = [c for c in G.CONFIGS[kind] if G.stream_k(c)]
        for (M, N, K) in shapes:
            pick = G.heuristic(M, N, K, kind, sms, 2)
            cfgs = dp + [c for c in sk if G.sk_fits(M, N, K, c, sms)]
            row = BG.bench(M, N, K, dtype, cfgs)
            t_torch = row["torch_ms"]
            by = {_name(c): v.get("ms") for c, v in zip(cfgs, row["configs"].values())}
            for k, v in row["configs"].items():
                if "error" in v:
                    print(f"  {k}: {v['error']}", flush=True)
            best_dp = min((by[_name(c)], _name(c)) for c in dp if by[_name(c)])
            sk_t = {_name(c): by[_name(c)] for c in sk}
            p = by[_name(pick)]
            model = {(_name(c)): G.model_us(M, N, K, c, kind, sms) for c in cfgs
                     if G.smem_bytes(c, 2, 2) <= G.SMEM_LIMIT}
            rows.append((M, N, K, _name(pick), p, best_dp, sk_t, t_torch, model))
            print(f"{M}x{N}x{K} bf16 pick {_name(pick)} {1e3 * p:.1f} us ({t_torch / p:.2f}x) | best dp "
                  f"{best_dp[1]} {1e3 * best_dp[0]:.1f} us ({t_torch / best_dp[0]:.2f}x) | "
                  + " ".join(f"{k} {1e3 * v:.1f} ({t_torch / v:.2f}x)" for k, v in sk_t.items() if v)
                  + f" | torch {1e3 * t_torch:.1f} us | model us: "
                  + " ".join(f"{k}={v:.0f}" for k, v in model.items()), flush=True)
    print("\nMxNxK               pick          pick x   best-dp x   best-sk x   (x torch, GPU time)")
    for M, N, K, pname, p, best_dp, sk_t, t_torch, _ in rows:
        best_sk = min((v, k) for k, v in sk_t.items() if v) if any(sk_t.values()) else (float("nan"), "-")
        print(f"{M}x{N}x{K:<8} {pname:14} {t_torch / p:6.2f} {t_torch / best_dp[0]:10.2f} "
              f"{t_torch / best_sk[0]:10.2f}  {best_sk[1]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-time", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("needs a Hopper GPU (sm_90)", file=sys.stderr)
        return 2
    bad = correctness(args.quick)
    if not args.no_time:
        timing(SHAPES[:6] if args.quick else SHAPES)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
