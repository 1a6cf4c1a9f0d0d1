"""Out of core on one GPU: host operands larger than the GPU, through tiledmm.matmul's out-of-core runner.

  float32  N x N @ N x N from numpy (default N = 90000: 97 GB of A, B, C) vs the in-core
           SGEMM rate (cuBLAS, TF32 off) measured in the same run   -> target >= 0.85x
  bfloat16 N x N (default 65536) from pinned torch tensors, forced 16 GiB device budget,
           vs the in-core bf16 rate                                  -> target >= 0.70x

Each result is checked first (C NaN-poisoned; sampled rows incl. block edges x sampled
columns against float64), then timed with tiledmm.timing.time_calls (1 warm-up run, which
also compiles the block shapes' kernels, and tunes them under TILEDMM_TUNE=on). Prints the plan and where the time went (per-stream
busy/idle from CUDA events). `--quick` runs small sizes with forced budgets first.

  PYTHONPATH=src python3 benchmarks/outofcore.py --quick --out $OUT
  PYTHONPATH=src python3 benchmarks/outofcore.py --gemm both --out $OUT

`--first-call` (the target: a first call within 1.3x a repeated call) measures
instead, each case in a fresh process with the default settings (TILEDMM_TUNE unset, an empty
tiledmm cache): tiledmm.matmul on numpy N x N float32 (default 16384) with a 2 GiB budget (out
of core) and without one (in core), the first call and then repeats, with the out-of-core
runner's host phases of each call (and its threads' seconds making pinned buffers, alloc_s, and
the MiB it made, pinned_new_MiB: a process's first call makes them, later calls reuse them;
and preload_s: seconds from the first call's start until the kernel family's import, which
tiledmm.matmul runs in a thread for host operands, ended). The
CUDA context is made before the first call (and its time reported apart): a program calling
tiledmm on the GPU has one already. Triton's kernel cache is left as it is (the first case warms
it), or a fresh empty one per case with --cold-triton.

  PYTHONPATH=src python3 benchmarks/outofcore.py --first-call --out $OUT

Needs a GPU and, for the full sizes, host memory for A, B and C (97 GB at N = 90000). The environment
(benchmarks/_common.py: device, versions, commit, date) heads the JSON written to --out.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

import tiledmm
from _common import environment, log, table
from tiledmm.outofcore import (check_sampled, fill_random, matmul_out_of_core, plan_out_of_core, tiledmm_gemm,
                               torch_gemm, warm_out_of_core)
from tiledmm.timing import time_calls

GiB = 1 << 30


def mem_available() -> int:
    """The CLI's reading of MemAvailable (``tiledmm.cli._app.mem_available``), 0 where unknown."""
    from tiledmm.cli._app import mem_available as available
    return available() or 0


def peak_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def pin(t: torch.Tensor):
    """Page-lock a (filled) host tensor in place, without the caching host allocator's power-of-two rounding."""
    err = torch.cuda.cudart().cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0)
    if int(err) != 0:
        log(f"  cudaHostRegister failed ({err}); using pin_memory()")
        return t.pin_memory(), False
    return t, True


def where_time_went(st: dict) -> dict:
    """From the CUDA-event timeline: per-stream busy and idle, the compute stream's idle split into
    start (before the first GEMM), tail (after the last) and gaps between GEMMs."""
    span = st["device_span_ms"]
    tl = st["timeline"]
    comp = sorted((a, b) for s_, k, a, b in tl if s_ == "compute")
    out = {"span_ms": span}
    for s_ in ("copy_in", "compute", "copy_out"):
        out[f"{s_}_busy_ms"] = st[f"{s_}_ms"]
        out[f"{s_}_idle_ms"] = st[f"{s_}_idle_ms"]
    if comp:
        out["compute_start_ms"] = comp[0][0]
        out["compute_tail_ms"] = max(0.0, span - comp[-1][1])
        out["compute_gaps_ms"] = max(0.0, st["compute_idle_ms"] - out["compute_start_ms"] - out["compute_tail_ms"])
    out["host_outside_streams_ms"] = st["wall_s"] * 1e3 - span
    return out


def fmt_time(w: dict, st: dict) -> str:
    return (f"streams over {w['span_ms']:.0f} ms: copy-in busy {w['copy_in_busy_ms']:.0f} (idle {w['copy_in_idle_ms']:.0f}), "
            f"compute busy {w['compute_busy_ms']:.0f} (idle {w['compute_idle_ms']:.0f} = start {w.get('compute_start_ms', 0):.0f}"
            f" + gaps {w.get('compute_gaps_ms', 0):.0f} + tail {w.get('compute_tail_ms', 0):.0f}), copy-out busy "
            f"{w['copy_out_busy_ms']:.0f} (idle {w['copy_out_idle_ms']:.0f}); call wall {st['wall_s'] * 1e3:.0f} ms, "
            f"outside the streams {w['host_outside_streams_ms']:.0f} ms; phases {st.get('phases')}")


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


def run_case(name, a, b, c, *, gemm_name, budget, acc, batches, check_rows, check_cols, incore, tol, target, seed,
             warmup="run", rates=None, blocks=None, check_it=True):
    gemm = torch_gemm if gemm_name == "torch" else tiledmm_gemm()
    box = {}
    m, k = a.shape
    n = b.shape[1]
    plan = None
    if blocks:
        plan = plan_out_of_core(m, n, k, a.dtype, c_dtype=c.dtype, acc_dtype=acc, max_device_bytes=budget,
                                direct=(a.is_pinned(), b.is_pinned(), c.is_pinned()), rates=rates, blocks=blocks)
    runs = []

    def call():
        st = {}
        t = time.perf_counter()
        matmul_out_of_core(a, b, c, max_device_bytes=budget, gemm=gemm, stats=st, acc_dtype=acc, rates=rates, plan=plan)
        st["call_s"] = time.perf_counter() - t
        box["stats"] = st
        runs.append(st["wall_s"])
    t = time.perf_counter()
    if warmup == "plan":      # the GEMM once per block shape of the plan (compiles; tunes if tuning is on), no product
        p = warm_out_of_core(a, b, c, max_device_bytes=budget, gemm=gemm, acc_dtype=acc, rates=rates, plan=plan)
        log(f"[{name}] gemm={gemm_name}: warmed the GEMM on the plan's block shapes in {time.perf_counter() - t:.1f} s"
            f" ({p.describe()}); {batches} timed run(s)")
        ms = time_calls(call, batches=batches, per_batch=1, warmup=0)
        log(f"  timed calls took {time.perf_counter() - t:.1f} s with the warm-up; walls {[round(x, 3) for x in runs]}")
    else:
        log(f"[{name}] gemm={gemm_name}: warm-up run (compiles the block shapes' kernels), then {batches} timed")
        ms = time_calls(call, batches=batches, per_batch=1, warmup=1)
        del runs[:max(0, len(runs) - batches)]            # the warm-up run
        log(f"  warm-up + timed calls took {time.perf_counter() - t:.1f} s; timed walls {[round(x, 3) for x in runs]}")
    stats = box["stats"]
    log(f"  plan: {stats['plan_text']}")
    if check_it:
        rel, nr, nc = check_sampled(a, b, c, stats["plan"], check_rows, check_cols, seed)
        log(f"  check: {nr} rows x {nc} cols vs float64: rel err {rel:.2e} (tol {tol:.0e}) -> "
            f"{'ok' if rel <= tol else 'WRONG'}")
    else:
        rel = float("nan")
    tf = 2.0 * m * n * k / (ms * 1e-3) / 1e12
    log(f"  time {ms / 1e3:.3f} s = {tf:.1f} TFLOP/s; in-core cuBLAS {incore['torch'][0]:.1f} TFLOP/s -> "
        f"{tf / incore['torch'][0]:.3f}x (target {target}x)"
        + (f"; in-core tiledmm {incore['tiledmm'][0]:.1f} -> {tf / incore['tiledmm'][0]:.3f}x"
           if 'tiledmm' in incore else ""))
    w = where_time_went(stats)
    log(f"  last run: {fmt_time(w, stats)}")
    log(f"  host: {stats['host']}; bytes {stats['bytes']}; {stats['gemm_calls']} GEMMs, memcpy2d={stats['memcpy2d']}, "
        f"threads={stats['threads']}; model {stats['plan']['est_s']:.3f} s")
    tl = stats.pop("timeline")
    return {"case": name, "gemm": gemm_name, "shape": [m, k, n], "dtype": str(a.dtype).replace("torch.", ""),
            "budget": budget, "ms": ms, "tflops": tf, "incore_cublas_tflops": incore["torch"][0],
            "x_incore_cublas": tf / incore["torch"][0],
            "x_incore_same_kernel": tf / incore[gemm_name][0] if gemm_name in incore else None,
            "target": target, "rel_err": rel, "ok": (rel <= tol) if check_it else True, "stats": stats,
            "where": w, "walls": runs, "timeline": tl if len(tl) <= 4000 else tl[:4000]}


def parse_blocks(text):
    return [tuple(int(v) for v in item.split("x")) for item in text.split(",") if item] if text else []


def first_call_worker(n: int, budget: int | None, repeats: int) -> None:
    """In a fresh process: tiledmm.matmul(A, B[, max_device_bytes=budget]) on numpy float32 operands,
    the first call and ``repeats`` more; prints one JSON line (FIRSTCALL ...)."""
    from tiledmm.outofcore import runner
    phases = []
    execute = runner._Run.execute

    def spy(self):
        execute(self)
        phases.append(dict(self.phases, steps=len(self.steps), alloc_s=self.host["alloc_s"],
                           pinned_new_MiB=self.bytes["pinned_new"] / (1 << 20)))
    runner._Run.execute = spy
    from tiledmm import registry
    preload, ends = registry.get("triton").preload, []
    if preload is not None:             # when the kernel family's import, in its thread, ends
        def timed():
            try:
                return preload()
            finally:
                ends.append(time.perf_counter())
        registry.amend("triton", preload=timed)
    A, B = np.empty((n, n), np.float32), np.empty((n, n), np.float32)
    fill_random(torch.from_numpy(A), 1)
    fill_random(torch.from_numpy(B), 2)
    kw = {} if budget is None else {"max_device_bytes": budget}
    t = time.perf_counter()
    torch.zeros(1, device="cuda")          # the CUDA context: a program calling tiledmm has one already
    torch.cuda.synchronize()
    cuda_init_s = time.perf_counter() - t
    walls, starts = [], []
    for _ in range(1 + repeats):
        t = time.perf_counter()
        starts.append(t)
        C = tiledmm.matmul(A, B, **kw)
        walls.append(time.perf_counter() - t)
    if ends and phases:         # seconds from the first call's start to the end of the family's import
        phases[0]["preload_s"] = ends[0] - starts[0]
    rows = np.random.default_rng(0).choice(n, min(n, 64), replace=False)
    ref = A[rows].astype(np.float64) @ B
    rel = float(np.linalg.norm(C[rows] - ref) / np.linalg.norm(ref))
    print("FIRSTCALL " + json.dumps({"n": n, "budget": budget, "walls": walls, "phases": phases, "rel_err": rel,
                                     "cuda_init_s": cuda_init_s}), flush=True)


def first_call(args) -> list:
    """Each case in a fresh process (default settings, empty tiledmm cache); returns the results."""
    env = {k: v for k, v in os.environ.items() if k != "TILEDMM_TUNE"}
    results = []
    for name, budget in ((f"out of core, {args.first_call_budget_gib:g} GiB", int(args.first_call_budget_gib * GiB)),
                         ("in core", None)):
        with tempfile.TemporaryDirectory(prefix="tiledmm-first-") as cache:
            env["TILEDMM_CACHE_DIR"] = cache
            if args.cold_triton:
                env["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
            cmd = [sys.executable, os.path.abspath(__file__), "--first-call-worker", "--n", str(args.first_call_n),
                   "--repeats", str(args.repeats)] + ([] if budget is None else ["--budget-bytes", str(budget)])
            t = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, env=env)
            line = next((x for x in p.stdout.splitlines() if x.startswith("FIRSTCALL ")), None)
            if p.returncode != 0 or line is None:
                log(f"[first call] {name}: worker failed (rc {p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-4000:]}")
                results.append({"case": name, "ok": False})
                continue
            r = json.loads(line[len("FIRSTCALL "):])
        first, rep = r["walls"][0], float(np.median(r["walls"][1:]))
        r.update(case=name, first_s=first, repeat_s=rep, ratio=first / rep, process_s=time.perf_counter() - t,
                 ok=r["rel_err"] < 1e-4, triton_cache="cold" if args.cold_triton else "as found")
        log(f"[first call] {name} {args.first_call_n}^3 float32 numpy: first {first:.3f} s, repeat {rep:.3f} s "
            f"(walls {[round(w, 3) for w in r['walls']]}) -> {first / rep:.2f}x (target <= 1.3x); rel err "
            f"{r['rel_err']:.1e}; Triton cache {r['triton_cache']}; CUDA context made before, in "
            f"{r['cuda_init_s']:.2f} s")
        for i, ph in enumerate(r["phases"][:2]):
            log(f"  runner phases, call {i + 1}: " + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                                               for k, v in ph.items()))
        results.append(r)
    ok = [r for r in results if r.get("ok")]
    log("\n" + table(f"first call vs repeat, {args.first_call_n}^3 float32 from numpy, fresh process (s)",
                      [("case", ""), ("first", ".3f"), ("repeat", ".3f"), ("x repeat", ".2f"), ("target", ""),
                       ("rel err", ".1e")],
                      [(r["case"], r["first_s"], r["repeat_s"], r["ratio"], "<= 1.3", r["rel_err"]) for r in ok]))
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=90000, help="float32 size (N x N @ N x N)")
    ap.add_argument("--budget-gib", type=float, default=None, help="float32 device budget (default: free memory)")
    ap.add_argument("--bf16-n", type=int, default=65536)
    ap.add_argument("--bf16-budget-gib", type=float, default=16.0)
    ap.add_argument("--incore-n", type=int, default=16384)
    ap.add_argument("--gemm", default="tiledmm", help="tiledmm, torch, both (= tiledmm,torch) or a comma list, in order")
    ap.add_argument("--skip-fp32", action="store_true")
    ap.add_argument("--skip-bf16", action="store_true")
    ap.add_argument("--quick", action="store_true", help="N=24000 fp32 (6 GiB budget), 16384 bf16 (1 GiB budget)")
    ap.add_argument("--also-quick", action="store_true", help="the --quick cases first, then the full ones")
    ap.add_argument("--fp32-warmup", choices=("run", "plan"), default="plan",
                    help="plan: the GEMM once on each block shape of the plan (default); run: a whole untimed run")
    ap.add_argument("--bf16-batches", type=int, default=3)
    ap.add_argument("--no-rates", action="store_true", help="plan with the default GEMM rate, not the measured in-core one")
    ap.add_argument("--fp32-blocks", default="", help="force the fp32 block shape, BMxBNxBK")
    ap.add_argument("--bf16-blocks", default="", help="force the bf16 block shape, BMxBNxBK")
    ap.add_argument("--bf16-sweep", default="", help="after the bf16 runs: these block shapes (BMxBNxBK,...), torch GEMM, "
                                                     "timed without a check")
    ap.add_argument("--check-rows", type=int, default=64)
    ap.add_argument("--check-cols", type=int, default=2048)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--first-call", action="store_true", help="only the first-call vs repeat-call measurement")
    ap.add_argument("--first-call-n", type=int, default=16384)
    ap.add_argument("--first-call-budget-gib", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3, help="--first-call: repeat calls after the first")
    ap.add_argument("--cold-triton", action="store_true", help="--first-call: a fresh empty Triton cache per case")
    ap.add_argument("--first-call-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--budget-bytes", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if tiledmm.emulating():
        sys.exit("needs a GPU")
    if args.first_call_worker:
        return first_call_worker(args.n, args.budget_bytes, args.repeats)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gemms = ["tiledmm", "torch"] if args.gemm == "both" else args.gemm.split(",")
    if not gemms or set(gemms) - {"tiledmm", "torch"}:
        sys.exit(f"--gemm: tiledmm, torch, both or a comma list of them; got {args.gemm!r}")
    env = dict(environment(), numpy=np.__version__, host_mem_available_gb=mem_available() / 1e9,
               cpus=os.cpu_count(), gpu_free_gb=torch.cuda.mem_get_info()[0] / 1e9)
    log(json.dumps(env))
    if args.first_call:
        results = first_call(args)
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "outofcore_first_call.json"), "w") as f:
            json.dump({"environment": env, "results": results}, f, indent=1)
        sys.exit(0 if all(r["ok"] for r in results) else 1)
    results = []
    T0 = time.perf_counter()
    configs = []
    if args.quick or args.also_quick:
        configs.append(dict(n=24000, budget_gib=6.0, bf16_n=16384, bf16_budget_gib=1.0, incore_n=8192, quick=True))
    if not args.quick:
        configs.append(dict(n=args.n, budget_gib=args.budget_gib, bf16_n=args.bf16_n,
                            bf16_budget_gib=args.bf16_budget_gib, incore_n=args.incore_n, quick=False))
    for cfg in configs:
        tag = " (quick)" if cfg["quick"] else ""
        # ---------------- float32 from numpy
        if not args.skip_fp32:
            n = cfg["n"]
            need = 3 * n * n * 4
            log(f"[fp32{tag}] {n}^3 from numpy: operands {need / 1e9:.1f} GB; host available {mem_available() / 1e9:.1f} GB")
            if need > 0.92 * mem_available():
                sys.exit(f"not enough host memory for {need / 1e9:.1f} GB of operands")
            incore = {g: incore_rate(cfg["incore_n"], torch.float32, g) for g in ["torch"] + [g for g in gemms if g != "torch"]}
            for g, (tf, ms, rel) in incore.items():
                log(f"  in-core {g} fp32 {cfg['incore_n']}^3: {ms:.2f} ms = {tf:.1f} TFLOP/s (rel err {rel:.1e})")
            t = time.perf_counter()
            A = np.empty((n, n), np.float32)
            B = np.empty((n, n), np.float32)
            C = np.empty((n, n), np.float32)
            fill_random(torch.from_numpy(A), 1)
            fill_random(torch.from_numpy(B), 2)
            fill_random(torch.from_numpy(C), 0, nan=True)
            log(f"  fill: {time.perf_counter() - t:.1f} s; peak RSS {peak_rss() / 1e9:.1f} GB")
            budget = int(cfg["budget_gib"] * GiB) if cfg["budget_gib"] else None
            blocks = parse_blocks(args.fp32_blocks)
            for g in gemms:
                if g != gemms[0]:
                    fill_random(torch.from_numpy(C), 0, nan=True)
                rates = None if args.no_rates else {"gemm": incore[g][0] * 1e12}
                results.append(run_case(f"fp32 numpy{tag}", torch.from_numpy(A), torch.from_numpy(B), torch.from_numpy(C),
                                        gemm_name=g, budget=budget, acc=None, batches=1, check_rows=args.check_rows,
                                        check_cols=args.check_cols, incore=incore, tol=1e-4, target=0.85, seed=3,
                                        warmup="run" if cfg["quick"] else args.fp32_warmup, rates=rates,
                                        blocks=blocks[0] if blocks and not cfg["quick"] else None))
            log(f"  peak RSS {peak_rss() / 1e9:.1f} GB; elapsed {time.perf_counter() - T0:.0f} s")
            del A, B, C
            gc.collect()
        # ---------------- bfloat16, pinned torch tensors, forced budget
        if not args.skip_bf16:
            n = cfg["bf16_n"]
            log(f"[bf16{tag}] {n}^3 pinned, budget {cfg['bf16_budget_gib']} GiB: operands {3 * n * n * 2 / 1e9:.1f} GB")
            incore = {g: incore_rate(cfg["incore_n"], torch.bfloat16, g) for g in ["torch"] + [g for g in gemms if g != "torch"]}
            for g, (tf, ms, rel) in incore.items():
                log(f"  in-core {g} bf16 {cfg['incore_n']}^3: {ms:.2f} ms = {tf:.1f} TFLOP/s (rel err {rel:.1e})")
            t = time.perf_counter()
            A, B, C = (torch.empty((n, n), dtype=torch.bfloat16) for _ in range(3))
            fill_random(A, 1)
            fill_random(B, 2)
            fill_random(C, 0, nan=True)
            t1 = time.perf_counter()
            (A, ra), (B, rb), (C, rc) = (pin(x) for x in (A, B, C))
            log(f"  allocate+fill {t1 - t:.1f} s, pin {time.perf_counter() - t1:.1f} s; pinned: {A.is_pinned()}, "
                f"{B.is_pinned()}, {C.is_pinned()}")
            budget = int(cfg["bf16_budget_gib"] * GiB)
            blocks = parse_blocks(args.bf16_blocks)
            for g in gemms:
                if g != gemms[0]:
                    fill_random(C, 0, nan=True)
                rates = None if args.no_rates else {"gemm": incore[g][0] * 1e12}
                results.append(run_case(f"bf16 pinned{tag}", A, B, C, gemm_name=g, budget=budget,
                                        acc=torch.float32 if g == "tiledmm" else None, batches=args.bf16_batches,
                                        check_rows=args.check_rows, check_cols=args.check_cols, incore=incore,
                                        tol=1.5e-2, target=0.70, seed=4, rates=rates,
                                        blocks=blocks[0] if blocks and not cfg["quick"] else None))
            if not cfg["quick"]:
                for bl in parse_blocks(args.bf16_sweep):
                    try:
                        results.append(run_case(f"bf16 sweep {'x'.join(map(str, bl))}", A, B, C, gemm_name="torch",
                                                budget=budget, acc=None, batches=2, check_rows=0, check_cols=0,
                                                incore=incore, tol=1.5e-2, target=0.70, seed=4,
                                                rates={"gemm": incore["torch"][0] * 1e12}, blocks=bl, check_it=False))
                    except Exception as e:  # noqa: BLE001 -- a shape that does not fit: say so, go on
                        log(f"  sweep {bl}: {type(e).__name__}: {e}")
            for t_, r_ in ((A, ra), (B, rb), (C, rc)):
                if r_:
                    torch.cuda.cudart().cudaHostUnregister(t_.data_ptr())
            del A, B, C
            gc.collect()
    # ---------------- table
    log(f"\npeak RSS {peak_rss() / 1e9:.1f} GB; total {time.perf_counter() - T0:.0f} s")
    hdr = f"{'case':<26} {'gemm':<8} {'shape':<20} {'budget GiB':>10} {'s':>8} {'TFLOP/s':>8} {'x cuBLAS':>8} " \
          f"{'x same':>7} {'target':>6} {'rel err':>9} check  in/comp/out busy, comp idle (ms)"
    log(hdr)
    for r in results:
        w = r["where"]
        log(f"{r['case']:<26} {r['gemm']:<8} {'x'.join(map(str, r['shape'])):<20} "
            f"{(r['budget'] or r['stats']['plan']['budget']) / GiB:>10.1f} {r['ms'] / 1e3:>8.3f} {r['tflops']:>8.1f} "
            f"{r['x_incore_cublas']:>8.3f} {r['x_incore_same_kernel'] or float('nan'):>7.3f} {r['target']:>6} "
            f"{r['rel_err']:>9.2e} {'ok' if r['ok'] else 'WRONG'}  {w['copy_in_busy_ms']:.0f}/{w['compute_busy_ms']:.0f}/"
            f"{w['copy_out_busy_ms']:.0f}, {w['compute_idle_ms']:.0f}  [{r['stats']['plan']['bm']}x{r['stats']['plan']['bn']}"
            f"x{r['stats']['plan']['bk']}]")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "outofcore.json"), "w") as f:
        json.dump({"environment": env, "results": results}, f, indent=1, default=str)
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
