"""Multi-GPU GEMM on torch.distributed (issue 13; serves issue 14 with more GPUs).

  torchrun --nproc_per_node 2 scripts/bench_distributed.py [--quick] [--out $OUT]

Cases (sizes scale with the number of GPUs W):
  SUMMA bf16 S^3 (S = 32768; quick 8192) vs one GPU's time with the same local kernel
      (target: speed-up >= 1.95 on 2 GPUs; efficiency = speed-up / W)
  all-gather-matmul, per-rank A m x k and B k x n (8192 each; quick 2048), bf16,
      chunks 1/2/4, local GEMM cuBLAS and tiledmm, vs NCCL all-gather + the same GEMM
      (target: >= 1.2x faster with cuBLAS)
  matmul-reduce-scatter, per-rank A (W*m) x k, B k x n, bf16, vs GEMM + NCCL reduce-scatter
Every result is checked against float64 first (sampled rows for the big ones), then timed
with tiledmm.timing.time_calls (same call count on every rank, slowest rank's median).
A timeline (CUDA events on the compute and comm streams) of each case goes to
$OUT/bench_distributed.json; the scaling table is printed last.
"""
from __future__ import annotations

import os

from tiledmm.cli_dist import FORCED_ENV

os.environ.update(FORCED_ENV)          # NVLink multicast off, before NCCL starts

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import tiledmm  # noqa: E402,F401
from tiledmm.cli_dist import run_case  # noqa: E402


def overlap(r):
    """Fraction of the communication time hidden under compute (from the timeline)."""
    comp, comm, span = r.get("compute_ms"), r.get("comm_ms"), r.get("span_ms")
    if not comp or not comm or not span:
        return None
    return max(0.0, min(1.0, (comp + comm - span) / comm))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--summa", type=int, default=None, help="SUMMA size S (S^3)")
    ap.add_argument("--per-rank", type=int, default=None, help="per-rank m = k = n for the TP patterns")
    ap.add_argument("--gemm", default="tiledmm", help="local GEMM for SUMMA: tiledmm, torch or a kernel name")
    ap.add_argument("--skip", action="append", default=[], help="summa, summa-torch (SUMMA's torch-GEMM comparison), allgather, reducescatter")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    w, rank = dist.get_world_size(), dist.get_rank()
    S = args.summa or (8192 if args.quick else 32768)
    P = args.per_rank or (2048 if args.quick else 8192)
    say = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)
    p = torch.cuda.get_device_properties(local)
    env = {"date": datetime.date.today().isoformat(), "device": p.name, "gpus": w, "torch": torch.__version__,
           "nccl": ".".join(map(str, torch.cuda.nccl.version())), "cuda": torch.version.cuda,
           **{k: os.environ.get(k) for k in FORCED_ENV}}
    say(json.dumps(env))
    cases = []
    if "summa" not in args.skip:
        cases.append(dict(algo="summa", shape=(S, S, S), dtype="bfloat16", gemm=args.gemm, target=1.95 if w == 2 else 0.9 * w))
        if args.gemm != "torch" and "summa-torch" not in args.skip:
            cases.append(dict(algo="summa", shape=(S, S, S), dtype="bfloat16", gemm="torch", target=None))
    if "allgather" not in args.skip:
        for g in ("torch", "tiledmm"):
            for ch in (1, 2, 4):
                cases.append(dict(algo="allgather", shape=(P * w, P, P * w), dtype="bfloat16", gemm=g, chunks=ch,
                                  target=1.2 if g == "torch" else None))
    if "reducescatter" not in args.skip:
        for g in ("torch", "tiledmm"):
            for ch in (2, 4):
                cases.append(dict(algo="reducescatter", shape=(P * w, P * w, P), dtype="bfloat16", gemm=g, chunks=ch,
                                  target=None))
    results = []
    t0 = time.perf_counter()
    for c in cases:
        target = c.pop("target")
        big = c["shape"][0] * c["shape"][1] * c["shape"][2] > 2 ** 36
        r = run_case(**c, time_it=True, baseline=True, timeline=True, sample_rows=256 if big else None, seed=7)
        r["target"] = target
        r["overlap"] = overlap(r)
        r["chunks"] = c.get("chunks")
        results.append(r)
        say(f"{r['algo']:<13} {r['gemm']:<8} {'x'.join(map(str, r['shape'])):<18} chunks={r['chunks']} "
            f"check {r['checked']}: rel err {r['rel_err']:.2e} {'ok' if r['ok'] else 'WRONG'}; {r['ms']:.3f} ms "
            f"vs {r['baseline']} {r['baseline_ms']:.3f} ms -> x{r['speedup']:.3f}; compute {r['compute_ms'] or 0:.2f} ms, "
            f"comm {r['comm_ms'] or 0:.2f} ms, span {r['span_ms'] or 0:.2f} ms, comm hidden "
            f"{'-' if r['overlap'] is None else format(r['overlap'], '.0%')}  [{time.perf_counter() - t0:.0f} s]")
    if rank == 0:
        import tiledmm.kernels.block.matmul as block_matmul
        say("local GEMM launches chosen:", block_matmul.plans())
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "bench_distributed.json"), "w") as f:
            json.dump({"environment": env, "results": results}, f, indent=1)
        say("\nscaling table (ms: slowest rank's median; TFLOP/s per GPU; efficiency = speed-up / GPUs for SUMMA)")
        say(f"{'GPUs':>4} {'algo':<14} {'gemm':<8} {'shape':<18} {'dtype':<9} {'ms':>9} {'TFLOP/s/GPU':>11} "
            f"{'eff':>5} {'baseline':<22} {'base ms':>9} {'speed-up':>8} {'target':>6} {'met':<4} {'rel err':>8}")
        for r in results:
            eff = r.get("efficiency")
            tgt = r["target"]
            met = "-" if tgt is None else ("yes" if r["speedup"] >= tgt else "no")
            algo = r["algo"] + (f" c{r['chunks']}" if r["algo"] != "summa" else f" {r['grid'][0]}x{r['grid'][1]}")
            say(f"{w:>4} {algo:<14} {r['gemm']:<8} {'x'.join(map(str, r['shape'])):<18} {r['dtype']:<9} "
                f"{r['ms']:>9.3f} {r['tflops_per_gpu']:>11.1f} {'-' if eff is None else format(eff, '.3f'):>5} "
                f"{r['baseline']:<22} {r['baseline_ms']:>9.3f} {r['speedup']:>8.3f} {'-' if tgt is None else tgt:>6} "
                f"{met:<4} {r['rel_err']:>8.1e}")
    ok = all(r["ok"] for r in results)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
