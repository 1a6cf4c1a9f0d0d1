#!/usr/bin/env python3
"""FP8 on the H100: every target of the FP8 issue, checked and timed through tiledmm's public API
against torch in the same process. Run on the GPU image (about 3-4 minutes on an H100):

    PYTHONPATH=src python3 scripts/bench_fp8.py [--no-sweep] [--quick] [--json out.json]

1. check: each recipe (per tensor, rowwise, blockwise; promoted and fast accumulation) at a ragged
   shape against float64 on the dequantised operands, output poisoned with NaN first, within the
   documented bound (tiledmm.fp8's docstring).
2. sweep (skipped with --no-sweep): every config of the FP8 family (fp8_kernels.CONFIGS) on a few
   shapes of each class and three modes (per tensor fast accumulation, rowwise promoted, blockwise),
   TFLOP/s, the fastest marked, next to the config ``choose`` picks: from one run the lead can
   change the CONFIGS or ``choose``.
3. per tensor and rowwise against ``torch._scaled_mm`` over 4096^3, 8192^3 and the Llama layers
   (M in 16..8192 x (N, K) in (4096, 4096), (14336, 4096), (4096, 14336)): promoted (torch's
   use_fast_accum=False) and fast accumulation, like against like; ratio per shape, geomean and min
   (target: geomean >= 1.00, min >= 0.90). ``check_scales=False`` (the scales come from
   quantize_fp8; the default reads them: one device sync a call, timed apart on one shape).
   Rows of M <= 128 also give the GPU's time per call apart from the host's (timing.device_and_host).
4. blockwise (1 x 128, 128 x 128) TFLOP/s at 4096 x 7168 x 16384 and 4096 x 4096 x 7168 (target
   >= 1250), and torch's blockwise path (torch.nn.functional.scaled_mm with explicit recipes) where
   this torch and CUDA have it.
5. accuracy: relative error against float64 at K = 1024 and K = 16384 (fp32 output), promoted and
   fast, ours and torch's (target: K = 16384 promoted within 2x of K = 1024).
6. training: an MLP block (d 4096, hidden 16384, GELU, 8192 tokens) forward + backward with
   tiledmm.nn.Linear(fp8="rowwise") against the same block in bf16 torch eager (target >= 1.3x).

Timing: tiledmm.timing.time_calls (CUDA events around batches of queued calls, three input sets
rotated, median of batches). The last lines are the summary table.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TILEDMM_CACHE_DIR", tempfile.mkdtemp(prefix="tiledmm-fp8-bench-"))

import torch  # noqa: E402

import tiledmm  # noqa: E402
from tiledmm import timing  # noqa: E402

E4M3, BF16, FP32 = torch.float8_e4m3fn, torch.bfloat16, torch.float32
LLAMA = [(m, n, k) for m in (16, 128, 512, 2048, 8192) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))]
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)] + LLAMA           # (M, N, K)
SWEEP_SHAPES = [(16, 4096, 4096), (128, 14336, 4096), (512, 4096, 14336), (2048, 14336, 4096), (4096, 4096, 4096),
                (8192, 8192, 8192)]
BLOCK_SHAPES = [(4096, 7168, 16384), (4096, 4096, 7168)]
ACC_K = (1024, 16384)
MLP = dict(tokens=8192, d=4096, hidden=16384)
SETS = 3
DEV = "cuda"


def smoke_sizes():
    """--smoke: the same steps at toy sizes on the CPU (Triton's interpreter): the script's logic only."""
    global SHAPES, SWEEP_SHAPES, BLOCK_SHAPES, ACC_K, MLP, SETS, DEV
    SHAPES = [(16, 64, 128), (40, 96, 256)]
    SWEEP_SHAPES = [(16, 64, 128), (96, 64, 256)]
    BLOCK_SHAPES = [(64, 64, 256)]
    ACC_K = (128, 512)
    MLP = dict(tokens=32, d=128, hidden=256)
    SETS, DEV = 2, "cpu"


def tflops(M, N, K, ms):
    return 2.0 * M * N * K / ms / 1e9


def operands(M, N, K, recipe, seed=0, sets=SETS):
    """``sets`` input sets (a8, b8 = w8.t() K-major, scale_a, scale_b) from random bf16 data."""
    out = []
    for i in range(sets):
        g = torch.Generator(device=DEV).manual_seed(seed * 100 + i)
        a = torch.randn(M, K, device=DEV, generator=g, dtype=BF16)
        w = torch.randn(N, K, device=DEV, generator=g, dtype=BF16)
        a8, sa = tiledmm.quantize_fp8(a, recipe)
        w8, sw = tiledmm.quantize_fp8(w, recipe, block=(128, 128))
        out.append((a8, w8.t(), sa, sw.t() if sw.dim() == 2 else sw))
    return out


def ref64(a8, b8, sa, sb):
    return tiledmm.dequantize_fp8(a8, sa, torch.float64) @ tiledmm.dequantize_fp8(b8, sb, torch.float64)


def relerr(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


def ours(ins, fast, config=None, check=False):
    return [lambda s=s: tiledmm.scaled_matmul(*s, use_fast_accum=fast, check_scales=check, config=config) for s in ins]


def torchs(ins, fast):
    return [lambda s=s: torch._scaled_mm(s[0], s[1], s[2], s[3], out_dtype=BF16, use_fast_accum=fast) for s in ins]


def ms(calls, batch_ms=8.0):
    return timing.time_calls(calls, batches=5, warmup=2, batch_ms=batch_ms)


def label(M, N, K):
    return f"{M}x{N}x{K}"


def section(title):
    print(f"\n== {title}", flush=True)


# -- 1. correctness ---------------------------------------------------------------------------------

def check(results):
    section("check against float64 (output poisoned with NaN; documented bound u(out) + 2^-11; fast: + 2^-8)")
    M, N, K = (300, 270, 1000) if DEV == "cuda" else (30, 27, 200)
    ok = True
    for recipe in ("tensorwise", "rowwise", "blockwise"):
        for fast in (False, True):
            a8, b8, sa, sb = operands(M, N, K, recipe, seed=1, sets=1)[0]
            want = ref64(a8, b8, sa, sb)
            for out_dtype, u in ((BF16, 2.0 ** -8), (FP32, 2.0 ** -24)):
                out = torch.full((M, N), float("nan"), device=DEV, dtype=out_dtype)
                tiledmm.scaled_matmul(a8, b8, sa, sb, out_dtype=out_dtype, use_fast_accum=fast, out=out)
                err = relerr(out, want)
                bound = u + (2.0 ** -11 if not fast or recipe == "blockwise" else 2.0 ** -8)
                good = err <= bound and not out.isnan().any().item()
                ok &= good
                print(f"  {recipe:10s} fast={fast!s:5s} out={str(out_dtype)[6:]:8s} relerr {err:.3e}  bound {bound:.3e}"
                      f"  {'ok' if good else 'FAIL'}")
    results["check_ok"] = ok
    return ok


# -- 2. per-config sweep ------------------------------------------------------------------------------

def sweep(results, budget_s):
    from tiledmm.kernels.block import fp8_kernels as K8
    from tiledmm.kernels.block._vcommon import num_sms
    section(f"per-config sweep, TFLOP/s (* fastest; 'pick' = fp8_kernels.choose; budget {budget_s:.0f} s)")
    t0 = time.time()
    rows = []
    modes = (("tensor-fast", "tensorwise", True), ("row-promoted", "rowwise", False), ("blockwise", "blockwise", False))
    for M, N, K in SWEEP_SHAPES:
        for mode, recipe, fast in modes:
            if time.time() - t0 > budget_s:
                print(f"  (budget spent: {label(M, N, K)} {mode} and later not swept)")
                results["sweep"] = rows
                return
            ins = operands(M, N, K, recipe, seed=2)
            promoted = not fast or recipe == "blockwise"
            pick = K8.choose(M, N, K, 1, promoted, num_sms(), recipe == "blockwise")
            small = M <= 64
            names = [n for n in K8.CONFIGS if (n.startswith(("swap", "64x", "tma64")) if small else
                                               not n.startswith("swap")) and not (promoted and n in K8.FAST_ONLY)
                     and not (recipe == "blockwise" and "p256" in n)]
            want = ref64(*ins[0])
            cells = {}
            for name in names:
                try:
                    got = tiledmm.scaled_matmul(*ins[0], use_fast_accum=fast, check_scales=False, config=name)
                    err = relerr(got, want)
                    if err > 2.0 ** -8 + (2.0 ** -8 if fast else 2.0 ** -11):
                        cells[name] = f"WRONG {err:.1e}"
                        continue
                    cells[name] = tflops(M, N, K, ms(ours(ins, fast, name), batch_ms=5.0))
                except Exception as e:          # noqa: BLE001 -- a config that does not build is a finding
                    cells[name] = f"ERR {type(e).__name__}: {str(e).splitlines()[0][:60]}"
            best = max((v for v in cells.values() if isinstance(v, float)), default=None)
            line = "  ".join(f"{n}{'*' if v == best else ''}={v:.0f}" if isinstance(v, float) else f"{n}={v}"
                             for n, v in cells.items())
            print(f"  {label(M, N, K):16s} {mode:12s} pick={pick:14s} {line}", flush=True)
            rows.append({"shape": [M, N, K], "mode": mode, "pick": pick,
                         "tflops": {n: v for n, v in cells.items()}})
            del ins
    results["sweep"] = rows
    print(f"  sweep took {time.time() - t0:.0f} s")


# -- 3. per tensor and rowwise against torch._scaled_mm ----------------------------------------------

def versus_torch(results, shapes):
    section("per tensor and rowwise vs torch._scaled_mm (bf16 out; ratio = torch ms / ours ms)")
    modes = (("tensorwise", False), ("tensorwise", True), ("rowwise", False), ("rowwise", True))
    table = {f"{r}{'-fast' if f else ''}": [] for r, f in modes}
    print(f"  {'shape':18s}" + "".join(f"{k:>26s}" for k in table))
    for M, N, K in shapes:
        cells = []
        for recipe, fast in modes:
            ins = operands(M, N, K, recipe, seed=3)
            try:
                t_ours = ms(ours(ins, fast))
                t_torch = ms(torchs(ins, fast))
                ratio = t_torch / t_ours
                row = {"shape": [M, N, K], "ours_tflops": tflops(M, N, K, t_ours),
                       "torch_tflops": tflops(M, N, K, t_torch), "ratio": ratio}
                if M <= 128:         # the GPU's share apart from the host's
                    g_ours, h_ours = timing.device_and_host(ours(ins, fast))
                    g_torch, h_torch = timing.device_and_host(torchs(ins, fast))
                    row.update(gpu_ratio=g_torch / g_ours, host_us_ours=h_ours * 1e3, host_us_torch=h_torch * 1e3)
                table[f"{recipe}{'-fast' if fast else ''}"].append(row)
                cells.append(f"{row['ours_tflops']:6.0f} /{row['torch_tflops']:6.0f} {ratio:5.2f}x"
                             + (f" g{row['gpu_ratio']:4.2f}" if "gpu_ratio" in row else "      "))
            except Exception as e:      # noqa: BLE001
                cells.append(f"{'ERR ' + type(e).__name__:>26s}")
                print(f"  {label(M, N, K)} {recipe} fast={fast}: {e}")
            del ins
        print(f"  {label(M, N, K):18s}" + "".join(f"{c:>26s}" for c in cells), flush=True)
    print("  (cell: ours / torch TFLOP/s, ratio; gX.XX: the GPU-time ratio for M <= 128)")
    summary = {}
    for k, rows in table.items():
        if rows:
            r = [x["ratio"] for x in rows]
            summary[k] = {"geomean": math.exp(statistics.fmean(math.log(x) for x in r)), "min": min(r),
                          "min_at": rows[r.index(min(r))]["shape"], "n": len(r)}
    for k, s in summary.items():
        print(f"  {k:18s} geomean {s['geomean']:.3f}  min {s['min']:.3f} at {label(*s['min_at'])}  ({s['n']} shapes)")
    # the default call (check_scales=True): one device sync a call
    cs = (2048, 4096, 4096) if DEV == "cuda" else SHAPES[0]
    ins = operands(*cs, "rowwise", seed=4)
    t_check, t_free = ms(ours(ins, False, check=True)), ms(ours(ins, False))
    print(f"  check_scales=True at {label(*cs)} rowwise: {t_check * 1e3:.1f} us a call vs {t_free * 1e3:.1f} us "
          "without (the scale read's sync)")
    results["versus_torch"] = {"rows": table, "summary": summary, "check_scales_us": [t_check * 1e3, t_free * 1e3]}
    return summary


# -- 4. blockwise -----------------------------------------------------------------------------------

def blockwise(results):
    section("blockwise 1x128 x 128x128 (bf16 out), TFLOP/s; torch: F.scaled_mm with BlockWise recipes")
    rows = []
    F = torch.nn.functional
    for M, N, K in BLOCK_SHAPES:
        ins = operands(M, N, K, "blockwise", seed=5)
        t = ms(ours(ins, False))
        row = {"shape": [M, N, K], "ours_tflops": tflops(M, N, K, t)}
        try:
            ST = F.ScalingType
            tins = [(a8, b8, sa.t().contiguous().t(), sb) for a8, b8, sa, sb in ins]   # scale_a outer-dim-major
            calls = [lambda s=s: F.scaled_mm(s[0], s[1], s[2], ST.BlockWise1x128, s[3], ST.BlockWise128x128,
                                             output_dtype=BF16) for s in tins]
            want = ref64(*ins[0])
            err = relerr(calls[0](), want)
            row["torch_relerr"] = err
            row["torch_tflops"] = tflops(M, N, K, ms(calls))
        except Exception as e:          # noqa: BLE001 -- this torch/CUDA may not have it
            row["torch"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
        row["ours_relerr"] = relerr(ours(ins, False)[0](), ref64(*ins[0]))
        rows.append(row)
        tt = f"{row['torch_tflops']:.0f} (relerr {row['torch_relerr']:.1e})" if "torch_tflops" in row else row["torch"]
        print(f"  {label(M, N, K):18s} ours {row['ours_tflops']:6.0f} (relerr {row['ours_relerr']:.1e})  torch {tt}",
              flush=True)
        del ins
    results["blockwise"] = rows
    return rows


# -- 5. accuracy over K ---------------------------------------------------------------------------

def accuracy(results):
    k1, k2 = ACC_K
    section(f"accuracy vs float64, 256 x 256 output in fp32: K = {k1} vs {k2}")
    rows = []
    for recipe in ("tensorwise", "rowwise", "blockwise"):
        for fast in ((False, True) if recipe != "blockwise" else (False,)):
            errs, terrs = {}, {}
            for K in ACC_K:
                s = operands(256 if DEV == "cuda" else 32, 256 if DEV == "cuda" else 32, K, recipe, seed=6, sets=1)[0]
                want = ref64(*s)
                errs[K] = relerr(tiledmm.scaled_matmul(*s, out_dtype=FP32, use_fast_accum=fast), want)
                if recipe != "blockwise":
                    terrs[K] = relerr(torch._scaled_mm(s[0], s[1], s[2], s[3], out_dtype=FP32, use_fast_accum=fast),
                                      want)
            ratio = errs[k2] / errs[k1]
            rows.append({"recipe": recipe, "fast": fast, "err": errs, "torch_err": terrs, "ratio": ratio})
            tt = f"  torch {terrs[k1]:.2e} -> {terrs[k2]:.2e}" if terrs else ""
            print(f"  {recipe:10s} {'fast    ' if fast else 'promoted'} ours {errs[k1]:.2e} -> {errs[k2]:.2e} "
                  f"({ratio:.2f}x){tt}", flush=True)
    results["accuracy"] = rows
    return rows


# -- 6. the MLP block -----------------------------------------------------------------------------

def mlp(results, tokens, d, hidden):
    section(f"MLP block fwd+bwd: {tokens} tokens, d {d}, hidden {hidden}, GELU; fp8 rowwise vs bf16 torch eager")
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, d)).to(DEV, BF16)
    fp8 = torch.nn.Sequential(tiledmm.nn.Linear(d, hidden, fp8="rowwise"), torch.nn.GELU(),
                              tiledmm.nn.Linear(hidden, d, fp8="rowwise")).to(DEV, BF16)
    fp8.load_state_dict(ref.state_dict())
    x = torch.randn(tokens, d, device=DEV, dtype=BF16, requires_grad=True)
    g = torch.randn(tokens, d, device=DEV, dtype=BF16)

    def step(model):
        return lambda: model(x).backward(g)
    ys = []
    for model in (ref, fp8):
        x.grad = None
        model.zero_grad(set_to_none=True)
        y = model(x)
        y.backward(g)
        ys.append((y.detach().double(), x.grad.double(), model[0].weight.grad.double()))
    errs = [relerr(o, r) for o, r in zip(ys[1], ys[0])]
    t_ref = timing.time_calls(step(ref), batches=5, warmup=2, per_batch=3)
    t_fp8 = timing.time_calls(step(fp8), batches=5, warmup=2, per_batch=3)
    flop = 3 * 2 * 2.0 * tokens * d * hidden
    row = {"bf16_ms": t_ref, "fp8_ms": t_fp8, "speedup": t_ref / t_fp8, "bf16_tflops": flop / t_ref / 1e9,
           "fp8_tflops": flop / t_fp8 / 1e9, "relerr_y_dx_dw1": errs}
    print(f"  bf16 eager {t_ref:.2f} ms ({row['bf16_tflops']:.0f} TFLOP/s)   fp8 rowwise {t_fp8:.2f} ms "
          f"({row['fp8_tflops']:.0f} TFLOP/s)   speedup {row['speedup']:.2f}x")
    print(f"  fp8 vs bf16: relerr y {errs[0]:.3f}, dx {errs[1]:.3f}, dW1 {errs[2]:.3f}")
    results["mlp"] = row
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-sweep", action="store_true", help="skip the per-config sweep")
    ap.add_argument("--sweep-budget", type=float, default=90.0, help="seconds the sweep may take (compiles included)")
    ap.add_argument("--quick", action="store_true", help="fewer shapes against torch (4096^3, 8192^3, M=16 and 2048)")
    ap.add_argument("--json", default=None, help="write every number here")
    ap.add_argument("--smoke", action="store_true", help="toy sizes on the CPU (emulation): the script's logic only")
    args = ap.parse_args()
    if args.smoke:
        smoke_sizes()
    elif tiledmm.emulating() or not torch.cuda.is_available():
        print("bench_fp8: needs a CUDA GPU (Hopper); --smoke runs its logic on the CPU", file=sys.stderr)
        return 2
    t0 = time.time()
    results = {"device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu (emulation)",
               "torch": torch.__version__, "triton": __import__("triton").__version__}
    print(f"bench_fp8: {results['device']}, torch {results['torch']}, triton {results['triton']}")
    ok = check(results)
    if not args.no_sweep:
        sweep(results, args.sweep_budget)
    shapes = SHAPES if not args.quick or DEV != "cuda" else \
        SHAPES[:2] + [s for s in SHAPES if s[0] in (16, 2048) and s[1:] == (4096, 4096)]
    summ = versus_torch(results, shapes)
    blk = blockwise(results)
    acc = accuracy(results)
    mlp_row = mlp(results, **MLP)

    section("summary (targets of the FP8 issue)")
    lines = [("check vs float64", "all recipes within bound", "ok" if ok else "FAIL")]
    for k in ("tensorwise", "rowwise"):
        s = summ.get(k)
        if s:
            lines.append((f"{k} vs _scaled_mm", "geomean >= 1.00, min >= 0.90",
                          f"{s['geomean']:.3f} / min {s['min']:.3f} ({label(*s['min_at'])})"))
        sf = summ.get(k + "-fast")
        if sf:
            lines.append((f"{k} fast vs fast", "(like against like)",
                          f"{sf['geomean']:.3f} / min {sf['min']:.3f} ({label(*sf['min_at'])})"))
    for r in blk:
        lines.append((f"blockwise {label(*r['shape'])}", ">= 1250 TFLOP/s",
                      f"{r['ours_tflops']:.0f}" + (f" (torch {r['torch_tflops']:.0f})" if "torch_tflops" in r else "")))
    for r in acc:
        if not r["fast"]:
            lines.append((f"accuracy {r['recipe']} promoted", f"err({ACC_K[1]}) <= 2 x err({ACC_K[0]})",
                          f"{r['ratio']:.2f}x"))
    lines.append(("MLP fwd+bwd fp8 rowwise", ">= 1.3x bf16 eager", f"{mlp_row['speedup']:.2f}x"))
    for what, target, got in lines:
        print(f"  {what:34s} {target:30s} {got}")
    print(f"  (bench took {time.time() - t0:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
