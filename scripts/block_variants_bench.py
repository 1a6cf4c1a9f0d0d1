"""Issue 11: the block variant modules against torch.matmul (cuBLAS), on the H100.

    python scripts/block_variants_bench.py [--sweep] [--suites square,irregular,transformer]
                                           [--precisions bf16,fp16,tf32] [--budget-s 230] [--jobs 12]

1. Compiles every (variant, config, shape) the run will launch in parallel worker processes
   into one Triton cache dir (Triton compiles are slow and single-threaded).
2. Checks each launch against float64 first (fresh random inputs, NaN-poisoned output, and
   alpha/beta on a second set), then times it with tiledmm.timing.time_calls (rotated input
   sets), against torch.matmul with the matching precision (tf32: allow_tf32=True) in the same
   process. A launch that fails its check gets no time.
3. --sweep: on a few key shapes, every config in the variant's CONFIGS (to set heuristics).
4. Dumps SASS facts (HGMMA shapes, TMA instructions, setmaxnreg, registers, shared memory) of
   the kernels that won, and prints a table last: shape, precision, best variant, TFLOP/s,
   x cuBLAS, and the geomeans per precision.
Logs and JSON go to $OUT (or ./bench_out).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
os.environ.setdefault("TILEDMM_QUIET", "1")

from compile_workers import add_args, compile_shard, precompile  # noqa: E402  (scripts/ is sys.path[0])


def _imports():
    """The variant modules by name (variant 'tma' as one: its table and tma_persistent.py's functions),
    and the timing method."""
    if SRC not in sys.path:
        sys.path.insert(0, SRC)
    from types import SimpleNamespace

    from tiledmm.kernels.block import configs, kmajor_cache, splitk, tma_copy
    from tiledmm.kernels.block import tma_persistent as T
    from tiledmm.timing import time_calls
    tma = SimpleNamespace(NAME="tma", CONFIGS=configs.TMA, heuristic=T.heuristic, applicable=T.applicable,
                          launch=T.launch, _last=T._last)
    return {m.NAME: m for m in (tma, tma_copy, kmajor_cache, splitk)}, time_calls


SUITES = {
    "square": [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192)],
    # (M, K, N) as bench.py's SUITES; 4-tuples are (batch, M, K, N)
    "irregular": [(4097, 4093, 4095), (3000, 2000, 4000), (8192, 8192, 128), (128, 8192, 8192),
                  (8192, 128, 8192), (127, 8191, 127), (64, 512, 512, 512)],
    "transformer": [(m, k, n) for m in (1, 32, 256, 4096) for (n, k) in ((5120, 5120), (13824, 5120), (5120, 13824))],
    "small": [(16, 4096, 4096), (128, 11008, 4096)],
}
PRECS = {"bf16": ("bfloat16", "none"), "fp16": ("float16", "none"), "tf32": ("float32", "tf32")}
TOL = {"bf16": 1.5e-2, "fp16": 5e-3, "tf32": 3e-3}
SWEEP = {   # shapes where every config of a variant is timed (--sweep)
    "tma": [(2048, 2048, 2048), (1024, 1024, 1024), (256, 5120, 5120), (256, 5120, 13824),
                       (32, 5120, 5120), (8192, 8192, 8192)],
    "tma-kcache": [(4096, 4096, 4096), (256, 5120, 13824)],
    "splitk": [(1, 5120, 13824), (32, 5120, 5120), (256, 5120, 13824), (128, 11008, 4096), (16, 4096, 4096),
               (256, 5120, 5120)],
}


def shape4(s):
    return s if len(s) == 4 else (1, *s)


def few_tiles(s, sms=132):
    b, m, k, n = shape4(s)
    return b * math.ceil(m / 128) * math.ceil(n / 128) < 2 * sms


def plan(args, mods):
    """[(shape, prec, variant, config_index or None=heuristic), ...] and the alpha/beta checks."""
    out = []
    for suite in args.suites:
        for s in SUITES[suite]:
            for p in args.precisions:
                for name in mods:
                    if name == "splitk" and not few_tiles(s):
                        continue
                    if name == "tma-kcache" and p != "tf32":
                        continue
                    idx = [None]
                    if args.sweep and s in SWEEP.get(name, []):
                        idx = list(range(len(mods[name].CONFIGS[kind(p)])))
                    for i in idx:
                        out.append((s, p, name, i))
    return list(dict.fromkeys(out))


def kind(p):
    return "16bit" if p in ("bf16", "fp16") else "tf32"


def make_inputs(torch, s, p, nsets, gen_seed):
    b, m, k, n = shape4(s)
    dt = getattr(torch, PRECS[p][0])
    g = torch.Generator(device="cuda").manual_seed(gen_seed)
    sets = []
    for _ in range(nsets):
        shp = (lambda *x: x if b > 1 else x[1:])
        a = torch.randn(shp(b, m, k), device="cuda", generator=g).to(dt)
        bb = torch.randn(shp(b, k, n), device="cuda", generator=g).to(dt)
        c = torch.empty(shp(b, m, n), device="cuda", dtype=dt)
        sets.append((a, bb, c))
    return sets


def variant_ok(mod, a, b, c, prec, tma_name_applicable):
    if not mod.applicable(a, b, c, prec, 1.0, 0.0):
        return False
    if mod.NAME == "tma-copy" and tma_name_applicable:   # identical to tma then
        return False
    return True


def config_for(mod, s, p, idx):
    b, m, k, n = shape4(s)
    return mod.heuristic(m, n, k, kind(p)) if idx is None else dict(mod.CONFIGS[kind(p)][idx])


def rel_err(torch, out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def worker(args):
    """Compile (launch once) this shard's points into the shared Triton cache."""
    import torch
    mods, _ = _imports()
    inputs = {}

    def launch(pt):
        s, p, name, idx = pt
        if (s, p) not in inputs:
            inputs.clear()
            inputs[(s, p)] = make_inputs(torch, s, p, 1, 0)[0]
        a, b, c = inputs[(s, p)]
        mod, prec = mods[name], PRECS[p][1]
        if not variant_ok(mod, a, b, c, prec, mods["tma"].applicable(a, b, c, prec)):
            return
        mod.launch(a, b, c, precision=prec, alpha=1.0, beta=0.0, config=config_for(mod, s, p, idx))
        if idx is None:   # the alpha/beta specialisation of the heuristic config too
            mod.launch(a, b, c, precision=prec, alpha=0.5, beta=2.0, config=config_for(mod, s, p, idx))

    compile_shard(plan(args, mods), args, launch, torch.cuda.synchronize)


def graph_ms(torch, time_calls, calls, flops):
    """Device time per call without the host's launch cost: the calls captured in one CUDA graph
    (20 of them for small problems, so the graph's own launch is amortised), replays timed."""
    reps = len(calls) * (max(1, 20 // len(calls)) if flops < 2 * 2048 ** 3 else 1)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(reps):
            calls[i % len(calls)]()
    g.replay()
    torch.cuda.synchronize()
    return time_calls([g.replay]) / reps


def sass_facts(compiled) -> dict:
    facts = {}
    try:
        facts["regs"] = getattr(compiled, "n_regs", None)
        facts["spills"] = getattr(compiled, "n_spills", None)
        facts["shared"] = getattr(compiled.metadata, "shared", None)
        facts["num_warps"] = getattr(compiled.metadata, "num_warps", None)
        sass = compiled.asm["sass"]
        ops = re.findall(r"\b(HGMMA\.[\w.]+|UTMALDG\.[\w.]+|UTMASTG\.[\w.]+|UTMAPF\S*|USETMAXREG\S*|"
                         r"SYNCS\.[\w.]+|WARPGROUP\.[\w.]+|LDGSTS\S*|HMMA\.[\w.]+|BAR\.[\w.]+|STG\.E\S*|LDG\.E\S*)", sass)
        counts = {}
        for o in ops:
            counts[o] = counts.get(o, 0) + 1
        facts["sass_ops"] = counts
    except Exception as e:  # noqa: BLE001
        facts["sass_error"] = f"{type(e).__name__}: {e}"[:300]
    return facts


def main(args):
    import torch
    import triton
    t_start = time.time()
    out_dir = os.environ.get("OUT") or os.path.join(ROOT, "bench_out")
    os.makedirs(out_dir, exist_ok=True)
    log = open(os.path.join(out_dir, "block_variants.log"), "a")

    def say(*x):
        line = " ".join(str(v) for v in x)
        print(line, flush=True)
        log.write(line + "\n")

    mods, time_calls = _imports()
    dev = torch.cuda.get_device_name()
    say(f"# block_variants_bench {time.strftime('%Y-%m-%d %H:%M')} device={dev} torch={torch.__version__} "
        f"triton={triton.__version__} sweep={args.sweep}")
    pts = plan(args, mods)
    say(f"# {len(pts)} points")
    precompile(__file__, args, ["--suites", ",".join(args.suites), "--precisions", ",".join(args.precisions)]
               + (["--sweep"] if args.sweep else []), say)

    results, failures, torch_ms, torch_graph_ms = [], [], {}, {}
    winners_compiled = {}
    by_point = {}
    for s, p, name, idx in pts:
        by_point.setdefault((s, p), []).append((name, idx))
    for (s, p), todo in by_point.items():
        if time.time() - t_start > args.budget_s:
            say(f"# out of time budget: skipping {s} {p} and after")
            break
        b_, m, k, n = shape4(s)
        flops = 2.0 * b_ * m * n * k
        big = flops * 1 >= 2 * 4096 ** 3
        sets = make_inputs(torch, s, p, 1 if big else 3, hash((s, p)) % 1000)
        a0, bm0, c0 = sets[0]
        prec = PRECS[p][1]
        torch.backends.cuda.matmul.allow_tf32 = p == "tf32"
        ms_t = time_calls([lambda a=a, b=b, c=c: torch.matmul(a, b, out=c) for a, b, c in sets])
        torch_ms[(s, p)] = ms_t
        gms_t = graph_ms(torch, time_calls, [lambda a=a, b=b, c=c: torch.matmul(a, b, out=c) for a, b, c in sets],
                         flops)
        torch_graph_ms[(s, p)] = gms_t
        ref = torch.matmul(a0.double(), bm0.double())
        tma_app = mods["tma"].applicable(a0, bm0, c0, prec)
        for name, idx in todo:
            mod = mods[name]
            if not variant_ok(mod, a0, bm0, c0, prec, tma_app):
                continue
            cfg = config_for(mod, s, p, idx)
            row = dict(shape=s, prec=p, variant=name, cfg_index=idx, config=cfg, cublas_ms=ms_t)
            try:
                mod.launch(a0, bm0, c0, precision=prec, alpha=1.0, beta=0.0, config=cfg)   # compile / first path
                c0.fill_(float("nan"))
                mod.launch(a0, bm0, c0, precision=prec, alpha=1.0, beta=0.0, config=cfg)   # the direct launcher
                torch.cuda.synchronize()
                finite = bool(torch.isfinite(c0).all())
                err = rel_err(torch, c0, ref) if finite else float("nan")
                if idx is None:   # alpha/beta, fresh C
                    cb = torch.randn_like(c0)
                    refb = 0.5 * ref + 2.0 * cb.double()
                    mod.launch(a0, bm0, cb.clone(), precision=prec, alpha=0.5, beta=2.0, config=cfg)
                    mod.launch(a0, bm0, cb, precision=prec, alpha=0.5, beta=2.0, config=cfg)
                    torch.cuda.synchronize()
                    errb = rel_err(torch, cb, refb)
                    err = max(err, errb) if finite else err
                row["rel_err"] = err
                if not (finite and err < TOL[p]):
                    row["error"] = f"check failed: finite={finite} rel_err={err:.3g}"
                    failures.append(row)
                    say(f"FAIL {s} {p} {name} cfg={idx}: {row['error']}")
                    continue
                calls = [lambda a=a, b=b, c=c: mod.launch(a, b, c, precision=prec, alpha=1.0, beta=0.0, config=cfg)
                         for a, b, c in sets]
                ms = time_calls(calls)
                gms = graph_ms(torch, time_calls, calls, flops)
                row.update(ms=ms, tflops=flops / ms / 1e9, x_cublas=ms_t / ms, graph_ms=gms,
                           graph_tflops=flops / gms / 1e9, graph_x=gms_t / gms)
                results.append(row)
                say(f"{str(s):24s} {p:5s} {name:15s} cfg={str(idx):4s} {flops / ms / 1e9:7.1f} TFLOP/s "
                    f"x{ms_t / ms:5.2f} | graph {flops / gms / 1e9:7.1f} x{gms_t / gms:5.2f}  err {err:.2g}  {cfg}")
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                failures.append(row)
                say(f"ERROR {s} {p} {name} cfg={idx}: {row['error']}")
                if args.verbose:
                    traceback.print_exc()
        del sets, ref
        torch.cuda.empty_cache()

    # best per point (over variants and configs) and SASS facts of the winners
    best = {}
    for r in results:
        key = (r["shape"], r["prec"])
        if key not in best or r["ms"] < best[key]["ms"]:
            best[key] = r
    for key in [((8192, 8192, 8192), "bf16"), ((8192, 8192, 8192), "tf32"), ((1, 5120, 13824), "bf16"),
                ((256, 5120, 13824), "bf16"), ((4096, 4096, 4096), "fp16")]:
        r = best.get(key)
        if not r:
            continue
        try:
            s, p = key
            sets = make_inputs(torch, s, p, 1, 1)
            a, b, c = sets[0]
            mod = mods[r["variant"]]
            target = mods["tma"] if r["variant"] in ("tma-copy", "tma-kcache") else mod
            target._last.clear() if hasattr(target, "_last") else None
            mod.launch(a, b, c, precision=PRECS[p][1], config=r["config"])
            comp = getattr(target, "_last", {}).get("kernel")
            if comp is not None:
                winners_compiled[f"{s} {p} {r['variant']}"] = sass_facts(comp)
                if key == ((8192, 8192, 8192), "bf16"):
                    with open(os.path.join(out_dir, "sass_8192_bf16.txt"), "w") as f:
                        f.write(comp.asm["sass"])
        except Exception as e:  # noqa: BLE001
            winners_compiled[str(key)] = {"error": f"{type(e).__name__}: {e}"[:300]}
    for k_, v in winners_compiled.items():
        say(f"SASS {k_}: {json.dumps(v)}")

    with open(os.path.join(out_dir, "block_variants.json"), "w") as f:
        json.dump({"device": dev, "torch": torch.__version__, "triton": triton.__version__,
                   "results": results, "failures": failures,
                   "torch_ms": {f"{s} {p}": v for (s, p), v in torch_ms.items()},
                   "torch_graph_ms": {f"{s} {p}": v for (s, p), v in torch_graph_ms.items()},
                   "sass": winners_compiled}, f, indent=1, default=str)

    # per (variant, prec): its best config at each point (for the heuristics)
    say("\n## best per variant (tflops / x cuBLAS / config index)")
    per_var = {}
    for r in results:
        key = (r["shape"], r["prec"], r["variant"])
        if key not in per_var or r["ms"] < per_var[key]["ms"]:
            per_var[key] = r
    for (s, p, v), r in sorted(per_var.items(), key=lambda x: (x[0][1], str(x[0][0]), x[0][2])):
        say(f"{p:5s} {str(s):24s} {v:15s} {r['tflops']:7.1f} x{r['x_cublas']:5.2f} | graph {r['graph_tflops']:7.1f} "
            f"x{r['graph_x']:5.2f} cfg={r['cfg_index']}")
    say(f"\n## failures: {len(failures)}")
    for r in failures:
        say(f"  {r['shape']} {r['prec']} {r['variant']} cfg={r['cfg_index']}: {r['error'][:160]}")
    gbest = {}
    for r in results:
        key = (r["shape"], r["prec"])
        if key not in gbest or r["graph_ms"] < gbest[key]["graph_ms"]:
            gbest[key] = r
    say("\n## table: best variant per shape vs torch.matmul (cuBLAS), same process")
    say("## queued = launches queued from Python (host cost included); graph = the same calls replayed from a "
        "CUDA graph (device time), cuBLAS likewise")
    say(f"{'shape (M,K,N)':24s} {'prec':5s} {'cuBLAS':>7s} {'best (queued)':15s} {'TFLOP/s':>8s} {'x':>5s} | "
        f"{'cuBLAS':>7s} {'best (graph)':15s} {'TFLOP/s':>8s} {'x':>5s}")
    geo, ggeo = {}, {}
    for (s, p), r in sorted(best.items(), key=lambda x: (x[0][1], x[0][0])):
        b_, m, k, n = shape4(s)
        fl = 2.0 * b_ * m * n * k
        g = gbest[(s, p)]
        say(f"{str(s):24s} {p:5s} {fl / torch_ms[(s, p)] / 1e9:7.1f} {r['variant']:15s} {r['tflops']:8.1f} "
            f"{r['x_cublas']:5.2f} | {fl / torch_graph_ms[(s, p)] / 1e9:7.1f} {g['variant']:15s} "
            f"{g['graph_tflops']:8.1f} {g['graph_x']:5.2f}")
        geo.setdefault(p, []).append(r["x_cublas"])
        ggeo.setdefault(p, []).append(g["graph_x"])
    missing = [(s, p) for (s, p) in torch_ms if (s, p) not in best]
    for s, p in missing:
        say(f"{str(s):24s} {p:5s}  no variant applicable/passing")
    for p, xs in geo.items():
        gm = math.exp(sum(math.log(x) for x in xs) / len(xs))
        gg = math.exp(sum(math.log(x) for x in ggeo[p]) / len(ggeo[p]))
        say(f"geomean x cuBLAS {p}: queued {gm:.3f} (min {min(xs):.2f}), graph {gg:.3f} (min {min(ggeo[p]):.2f}) "
            f"over {len(xs)} shapes; {len([m for m in missing if m[1] == p])} shapes without a variant")
    say(f"# total {time.time() - t_start:.1f} s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--suites", default="square,irregular,transformer,small")
    ap.add_argument("--precisions", default="bf16,fp16,tf32")
    ap.add_argument("--budget-s", type=float, default=230.0)
    add_args(ap, jobs=12, compile_s=120.0)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    a.suites = a.suites.split(",")
    a.precisions = a.precisions.split(",")
    if a.worker:
        worker(a)
    else:
        main(a)
