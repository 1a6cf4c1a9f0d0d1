"""Out-of-core GEMM on one GPU (issue 13): host operands larger than the GPU.

  float32  N x N @ N x N from numpy (default N = 90000: 97 GB of A, B, C) vs the in-core
           SGEMM rate (cuBLAS, TF32 off) measured in the same run   -> target >= 0.85x
  bfloat16 N x N (default 65536) from pinned torch tensors, forced 16 GiB device budget,
           vs the in-core bf16 rate                                  -> target >= 0.70x

Each result is checked first (C NaN-poisoned; sampled rows incl. block edges x sampled
columns against float64), then timed with tiledmm.timing.time_calls (1 warm-up run, which
also autotunes the block shapes). Prints the plan and where the time went (per-stream
busy/idle from CUDA events). `--quick` runs small sizes with forced budgets first.

  python3 scripts/bench_outofcore.py --quick --out $OUT
  python3 scripts/bench_outofcore.py --gemm both --out $OUT
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

import tiledmm
from tiledmm.outofcore import matmul_out_of_core, tiledmm_gemm, torch_gemm
from tiledmm.timing import time_calls

GiB = 1 << 30


def log(*a):
    print(*a, flush=True)


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def peak_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def rows_split(n, parts):
    return [(i * n // parts, (i + 1) * n // parts) for i in range(parts)]


def fill_numpy(x: np.ndarray, seed: int, threads: int, nan=False):
    def work(args):
        i, (r0, r1) = args
        if nan:
            x[r0:r1] = np.nan
        else:
            np.random.default_rng([seed, i]).standard_normal(out=x[r0:r1], dtype=np.float32)
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(work, enumerate(rows_split(x.shape[0], threads * 4))))


def fill_torch(x: torch.Tensor, seed: int, threads: int, nan=False):
    def work(args):
        i, (r0, r1) = args
        if nan:
            x[r0:r1].fill_(float("nan"))
        else:
            x[r0:r1].normal_(generator=torch.Generator().manual_seed(seed * 1000 + i))
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(work, enumerate(rows_split(x.shape[0], threads * 4))))


def pinned_empty(shape, dtype):
    """Page-locked host tensor without the caching host allocator's power-of-two rounding."""
    t = torch.empty(shape, dtype=dtype)
    err = torch.cuda.cudart().cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0)
    if int(err) != 0:
        log(f"  cudaHostRegister failed ({err}); using pin_memory()")
        return t.pin_memory(), False
    return t, True


def incore_rate(n, dtype, gemm_name):
    a = torch.randn(n, n, device="cuda").to(dtype)
    b = torch.randn(n, n, device="cuda").to(dtype)
    c = torch.empty(n, n, device="cuda", dtype=dtype)
    g = torch_gemm if gemm_name == "torch" else tiledmm_gemm()
    g(a, b, c, 1.0, 0.0)
    ref = a.double() @ b.double()
    rel = float((c.double() - ref).norm() / ref.norm())
    del ref
    ms = time_calls(lambda: g(a, b, c, 1.0, 0.0), batches=5)
    del a, b, c
    torch.cuda.empty_cache()
    return 2.0 * n ** 3 / (ms * 1e-3) / 1e12, ms, rel


def sample_index(n, block, count, rng):
    """About ``count`` sorted indices below n: the ends, block edges (spread), the rest random."""
    edges = {0, n - 1}
    for e in range(block, n, block):
        edges.update({e - 1, e})
    edges = sorted(edges)
    if len(edges) > count // 2:
        edges = [edges[i] for i in np.linspace(0, len(edges) - 1, count // 2).astype(int)]
    rest = rng.choice(n, size=min(n, max(0, count - len(edges))), replace=False)
    return np.unique(np.concatenate([np.array(edges, dtype=np.int64), rest.astype(np.int64)]))


def check(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, plan: dict, rows: int, cols: int, seed: int):
    """Rel. Frobenius error of sampled rows x columns (block edges included) vs float64."""
    rng = np.random.default_rng(seed)
    m, n = c.shape
    bm, bn = (plan["bn"], plan["bm"]) if plan["transposed"] else (plan["bm"], plan["bn"])
    ri = torch.from_numpy(sample_index(m, bm, rows, rng))
    ci = torch.from_numpy(sample_index(n, bn, cols, rng))
    dev = "cuda"
    A = a.index_select(0, ri).to(dev).double()
    ref = None
    for k0 in range(0, a.shape[1], 8192):          # B's sampled columns, a K-slab at a time
        part = A[:, k0:k0 + 8192] @ b[k0:k0 + 8192].index_select(1, ci).to(dev).double()
        ref = part if ref is None else ref.add_(part)
    got = c.index_select(0, ri).index_select(1, ci).to(dev).double()
    nan = bool(torch.isnan(got).any())
    rel = float((got - ref).norm() / ref.norm())
    return (float("inf") if nan else rel), len(ri), len(ci)


def run_case(name, a, b, c, *, gemm_name, budget, acc, batches, check_rows, check_cols, incore, tol, target, seed):
    gemm = torch_gemm if gemm_name == "torch" else tiledmm_gemm()
    stats = {}
    box = {}

    def call():
        st = {}
        matmul_out_of_core(a, b, c, max_device_bytes=budget, gemm=gemm, stats=st, acc_dtype=acc)
        box["stats"] = st
    log(f"[{name}] gemm={gemm_name}: warm-up run (autotunes block shapes), then {batches} timed")
    ms = time_calls(call, batches=batches, per_batch=1, warmup=1)
    stats = box["stats"]
    log(f"  plan: {stats['plan_text']}")
    rel, nr, nc = check(a, b, c, stats["plan"], check_rows, check_cols, seed)
    m, k = a.shape
    n = b.shape[1]
    tf = 2.0 * m * n * k / (ms * 1e-3) / 1e12
    span = stats["device_span_ms"]
    log(f"  check: {nr} rows x {nc} cols vs float64: rel err {rel:.2e} (tol {tol:.0e}) -> "
        f"{'ok' if rel <= tol else 'WRONG'}")
    log(f"  time {ms / 1e3:.3f} s = {tf:.1f} TFLOP/s; in-core cuBLAS {incore['torch'][0]:.1f} TFLOP/s -> "
        f"{tf / incore['torch'][0]:.3f}x (target {target}x)"
        + (f"; in-core tiledmm {incore['tiledmm'][0]:.1f} -> {tf / incore['tiledmm'][0]:.3f}x"
           if 'tiledmm' in incore else ""))
    log(f"  streams over {span:.0f} ms (last run): copy-in busy {stats['copy_in_ms']:.0f} ms, compute busy "
        f"{stats['compute_ms']:.0f} ms (idle {stats['compute_idle_ms']:.0f} ms), copy-out busy "
        f"{stats['copy_out_ms']:.0f} ms; host: {stats['host']}; bytes {stats['bytes']}; "
        f"{stats['gemm_calls']} GEMMs, memcpy2d={stats['memcpy2d']}, threads={stats['threads']}")
    tl = stats.pop("timeline")
    return {"case": name, "gemm": gemm_name, "shape": [m, k, n], "dtype": str(a.dtype).replace("torch.", ""),
            "budget": budget, "ms": ms, "tflops": tf, "incore_cublas_tflops": incore["torch"][0],
            "x_incore_cublas": tf / incore["torch"][0],
            "x_incore_same_kernel": tf / incore[gemm_name][0] if gemm_name in incore else None,
            "target": target, "rel_err": rel, "ok": rel <= tol, "stats": stats, "timeline_head": tl[:400]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=90000, help="float32 size (N x N @ N x N)")
    ap.add_argument("--budget-gib", type=float, default=None, help="float32 device budget (default: free memory)")
    ap.add_argument("--bf16-n", type=int, default=65536)
    ap.add_argument("--bf16-budget-gib", type=float, default=16.0)
    ap.add_argument("--incore-n", type=int, default=16384)
    ap.add_argument("--gemm", choices=("tiledmm", "torch", "both"), default="tiledmm")
    ap.add_argument("--skip-fp32", action="store_true")
    ap.add_argument("--skip-bf16", action="store_true")
    ap.add_argument("--quick", action="store_true", help="N=24000 fp32 (6 GiB budget), 16384 bf16 (1 GiB budget)")
    ap.add_argument("--threads", type=int, default=min(16, os.cpu_count() or 4))
    ap.add_argument("--check-rows", type=int, default=64)
    ap.add_argument("--check-cols", type=int, default=2048)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    if args.quick:
        args.n, args.budget_gib, args.bf16_n, args.bf16_budget_gib, args.incore_n = 24000, 6.0, 16384, 1.0, 8192
    if tiledmm.emulating():
        sys.exit("needs a GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gemms = ["tiledmm", "torch"] if args.gemm == "both" else [args.gemm]
    p = torch.cuda.get_device_properties(0)
    env = {"date": datetime.date.today().isoformat(), "device": p.name, "torch": torch.__version__,
           "numpy": np.__version__, "cuda": torch.version.cuda, "host_mem_available_gb": mem_available() / 1e9,
           "cpus": os.cpu_count(), "gpu_free_gb": torch.cuda.mem_get_info()[0] / 1e9}
    log(json.dumps(env))
    results = []
    T0 = time.perf_counter()
    # ---------------- float32 from numpy
    if not args.skip_fp32:
        n = args.n
        need = 3 * n * n * 4
        log(f"[fp32] {n}^3 from numpy: operands {need / 1e9:.1f} GB; host available {mem_available() / 1e9:.1f} GB")
        if need > 0.92 * mem_available():
            sys.exit(f"not enough host memory for {need / 1e9:.1f} GB of operands")
        incore = {g: incore_rate(args.incore_n, torch.float32, g) for g in ["torch"] + [g for g in gemms if g != "torch"]}
        for g, (tf, ms, rel) in incore.items():
            log(f"  in-core {g} fp32 {args.incore_n}^3: {ms:.2f} ms = {tf:.1f} TFLOP/s (rel err {rel:.1e})")
        t = time.perf_counter()
        A = np.empty((n, n), np.float32)
        B = np.empty((n, n), np.float32)
        C = np.empty((n, n), np.float32)
        fill_numpy(A, 1, args.threads)
        fill_numpy(B, 2, args.threads)
        fill_numpy(C, 0, args.threads, nan=True)
        log(f"  fill (threads={args.threads}): {time.perf_counter() - t:.1f} s; peak RSS {peak_rss() / 1e9:.1f} GB")
        budget = int(args.budget_gib * GiB) if args.budget_gib else None
        for g in gemms:
            if g != gemms[0]:
                fill_numpy(C, 0, args.threads, nan=True)
            results.append(run_case("fp32 numpy", torch.from_numpy(A), torch.from_numpy(B), torch.from_numpy(C),
                                    gemm_name=g, budget=budget, acc=None, batches=1, check_rows=args.check_rows,
                                    check_cols=args.check_cols, incore=incore, tol=1e-4, target=0.85, seed=3))
        log(f"  peak RSS {peak_rss() / 1e9:.1f} GB; elapsed {time.perf_counter() - T0:.0f} s")
        del A, B, C
        gc.collect()
    # ---------------- bfloat16, pinned torch tensors, forced budget
    if not args.skip_bf16:
        n = args.bf16_n
        log(f"[bf16] {n}^3 pinned, budget {args.bf16_budget_gib} GiB: operands {3 * n * n * 2 / 1e9:.1f} GB")
        incore = {g: incore_rate(args.incore_n, torch.bfloat16, g) for g in ["torch"] + [g for g in gemms if g != "torch"]}
        for g, (tf, ms, rel) in incore.items():
            log(f"  in-core {g} bf16 {args.incore_n}^3: {ms:.2f} ms = {tf:.1f} TFLOP/s (rel err {rel:.1e})")
        t = time.perf_counter()
        (A, ra), (B, rb), (C, rc) = (pinned_empty((n, n), torch.bfloat16) for _ in range(3))
        fill_torch(A, 1, args.threads)
        fill_torch(B, 2, args.threads)
        fill_torch(C, 0, args.threads, nan=True)
        log(f"  allocate+pin+fill: {time.perf_counter() - t:.1f} s; pinned: {A.is_pinned()}, {B.is_pinned()}")
        for g in gemms:
            if g != gemms[0]:
                fill_torch(C, 0, args.threads, nan=True)
            results.append(run_case("bf16 pinned", A, B, C, gemm_name=g, budget=int(args.bf16_budget_gib * GiB),
                                    acc=torch.float32 if g == "tiledmm" else None, batches=3,
                                    check_rows=args.check_rows, check_cols=args.check_cols, incore=incore,
                                    tol=1.5e-2, target=0.70, seed=4))
        for t_, r_ in ((A, ra), (B, rb), (C, rc)):
            if r_:
                torch.cuda.cudart().cudaHostUnregister(t_.data_ptr())
        del A, B, C
    # ---------------- table
    log(f"\npeak RSS {peak_rss() / 1e9:.1f} GB; total {time.perf_counter() - T0:.0f} s")
    hdr = f"{'case':<12} {'gemm':<8} {'shape':<20} {'budget GiB':>10} {'s':>8} {'TFLOP/s':>8} {'x cuBLAS':>8} " \
          f"{'x same':>7} {'target':>6} {'rel err':>9} check"
    log(hdr)
    for r in results:
        log(f"{r['case']:<12} {r['gemm']:<8} {'x'.join(map(str, r['shape'])):<20} "
            f"{(r['budget'] or r['stats']['plan']['budget']) / GiB:>10.1f} {r['ms'] / 1e3:>8.3f} {r['tflops']:>8.1f} "
            f"{r['x_incore_cublas']:>8.3f} {r['x_incore_same_kernel'] or float('nan'):>7.3f} {r['target']:>6} "
            f"{r['rel_err']:>9.2e} {'ok' if r['ok'] else 'WRONG'}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_outofcore.json"), "w") as f:
        json.dump({"environment": env, "results": results}, f, indent=1, default=str)
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
