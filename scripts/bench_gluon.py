"""Check the Gluon warp-specialised GEMM (kernels/block/gluon_gemm.py) against float64 and time it
against torch.matmul on the GPU (issue 24).

    PYTHONPATH=src python3 scripts/bench_gluon.py [--quick] [--out DIR]
    PYTHONPATH=src python3 scripts/bench_gluon.py --host      # host cost of a call, the fused Linear

Correctness: ||out - ref|| / ||ref|| against a float64 product of the same (rounded) inputs, fresh
random inputs each check, output poisoned with NaN first (every element must be written); ragged
edges, transposed operands (A and/or B with unit stride along M/N: the kernel reads them through
a permuted shared-memory view), an offset (aligned) sub-matrix, alpha/beta, bf16, fp16, tf32.
--host: host microseconds per call of gluon_gemm.launch, of tiledmm.matmul(variant="gluon-ws") and of
torch.matmul (tiledmm.timing: wall_us_per_call -- 200 queued calls, then a sync, median of 5 -- and
device_and_host's host time, queued behind a GPU sleep so the GPU never holds the host back), and
the fused Linear(4096, 16384, gelu) forward at 8192 tokens: one launch with bias + gelu in the
epilogue against torch's F.linear + gelu (tiledmm.timing.time_calls: CUDA events, median of batches).
Timing: CUDA events around the replay of a CUDA graph of `reps` queued launches (host launch cost
out of the numbers), inputs rotated over sets larger than L2, median of batches; same process,
same method for torch.matmul (cuBLAS). TFLOP/s = 2MNK / time.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

import triton

from tiledmm.kernels.block import gluon_gemm as G

TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 2e-3}
SHAPES = [(512, 4096, 4096), (512, 6144, 4096), (512, 14336, 4096), (64, 4096, 4096),
          (1000, 1000, 1000), (5000, 5000, 5000), (4096, 4096, 4096), (8192, 8192, 8192)]


def operands(M, N, K, dtype, a_t=False, b_t=False, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn((K, M) if a_t else (M, K), device="cuda", generator=g).to(dtype)
    b = torch.randn((N, K) if b_t else (K, N), device="cuda", generator=g).to(dtype)
    return (a.t() if a_t else a), (b.t() if b_t else b)


def rel_err(out, a, b, alpha=1.0, beta=0.0, c0=None):
    ref = alpha * (a.double() @ b.double())
    if beta:
        ref = ref + beta * c0.double()
    return ((out.double() - ref).norm() / ref.norm()).item()


def check(M, N, K, dtype, cfg=None, a_t=False, b_t=False, alpha=1.0, beta=0.0, offset=False, seed=0):
    prec = "tf32" if dtype == torch.float32 else "none"
    if offset:   # a sub-matrix at a 16-byte aligned offset inside a wider buffer
        big_a, b = operands(M, N, K + 16, dtype, seed=seed)
        a = big_a[:, 8:8 + K]
        b = b[:K]
    else:
        a, b = operands(M, N, K, dtype, a_t, b_t, seed)
    c = torch.randn(M, N, device="cuda").to(dtype) if beta else torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    c0 = c.clone()
    why = G.why_not(a, b, c, prec, alpha, beta)
    if why:
        return f"not applicable: {why}"
    G.launch(a, b, c, precision=prec, alpha=alpha, beta=beta, config=cfg)
    torch.cuda.synchronize()
    if torch.isnan(c).any():
        return f"FAIL nan/unwritten {int(torch.isnan(c).sum())}"
    e = rel_err(c, a, b, alpha, beta, c0)
    return f"{'ok' if e < TOL[dtype] else 'FAIL'} rel {e:.2e}"


def time_fn(make_call, sets, reps=20, batches=12):
    """Median ms per call: graph of `reps` launches rotated over `sets` input sets, replayed."""
    calls = [make_call(*s) for s in sets]
    for f in calls:
        f()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for f in calls:   # warm on the capture stream too
            f()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        for i in range(reps):
            calls[i % len(calls)]()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(batches):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        graph.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / reps)
    return statistics.median(times), (max(times) - min(times)) / statistics.median(times)


def config_name(cfg: dict) -> str:
    """A config as a short label: BMxBNxBK, stages, warps, EPI_SPLIT, GROUP_M, SPLIT_K, then "t" if TAIL."""
    return (f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']}s{cfg['num_stages']}w{cfg['num_warps']}"
            f"e{cfg['EPI_SPLIT']}g{cfg['GROUP_M']}k{cfg['SPLIT_K']}" + ("t" if cfg.get("TAIL") else ""))


def input_sets(M, N, K, dtype, b_t=False):
    bytes_one = (M * K + K * N + M * N) * torch.tensor([], dtype=dtype).element_size()
    n = max(1, min(8, -(-(120 << 20) // bytes_one)))   # rotate over > 2x the 50 MB L2
    sets = []
    for i in range(n):
        a, b = operands(M, N, K, dtype, b_t=b_t, seed=100 + i)
        sets.append((a, b, torch.empty(M, N, device="cuda", dtype=dtype)))
    return sets


def bench(M, N, K, dtype, configs):
    prec = "tf32" if dtype == torch.float32 else "none"
    b_t = dtype == torch.float32          # tf32: B column-major (K-major), the layout wgmma reads
    sets = input_sets(M, N, K, dtype, b_t)
    flops = 2.0 * M * N * K
    torch.backends.cuda.matmul.allow_tf32 = dtype == torch.float32
    t_torch, sp_t = time_fn(lambda a, b, c: (lambda: torch.matmul(a, b, out=c)), sets)
    row = {"shape": f"{M}x{N}x{K}", "dtype": str(dtype).split(".")[1], "torch_ms": t_torch,
           "torch_tflops": flops / t_torch / 1e9, "spread_torch": sp_t, "configs": {}}
    kind = "16bit" if dtype != torch.float32 else "tf32"
    pick = G.heuristic(M, N, K, kind, torch.cuda.get_device_properties(0).multi_processor_count,
                       sets[0][2].element_size())
    for cfg in configs:
        name = config_name(cfg)
        try:
            t, sp = time_fn(lambda a, b, c, cfg=cfg: (lambda: G.launch(a, b, c, precision=prec, config=cfg)), sets)
            row["configs"][name] = {"ms": t, "tflops": flops / t / 1e9, "x_torch": t_torch / t, "spread": sp,
                                    "pick": cfg == pick}
        except Exception as e:  # noqa: BLE001  (report and go on: one config's failure is data)
            row["configs"][name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    del sets
    torch.cuda.empty_cache()
    return row


def host_costs():
    """Host us per call: gluon_gemm.launch (the first call goes through Gluon's launcher, the later
    ones through the bound C launch), with bias + gelu too, tiledmm.matmul forced to the variant,
    torch.matmul."""
    import tiledmm
    from tiledmm import timing
    print("== host cost per call (us): wall_us_per_call | device_and_host: GPU us, host us ==", flush=True)
    for (M, N, K) in ((512, 4096, 4096), (128, 128, 128), (4096, 4096, 4096)):
        a, b = operands(M, N, K, torch.bfloat16)
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        bias = torch.randn(N, device="cuda").to(torch.bfloat16)
        calls = {"gluon_gemm.launch": lambda: G.launch(a, b, c, precision="none"),
                 "gluon_gemm.launch bias+gelu": lambda: G.launch(a, b, c, precision="none", bias=bias, bias_mode=1,
                                                                 act="gelu"),
                 "tiledmm.matmul(variant)": lambda: tiledmm.matmul(a, b, kernel="triton", variant=G.NAME, out=c),
                 "tiledmm.matmul() its own pick": lambda: tiledmm.matmul(a, b, out=c),
                 "torch.matmul(out=)": lambda: torch.matmul(a, b, out=c)}
        for name, fn in calls.items():
            wall = timing.wall_us_per_call(fn)
            gpu_ms, host_ms = timing.device_and_host(fn)
            print(f"{M}x{N}x{K} bf16 {name:28}: wall {wall:7.1f} | GPU {1e3 * gpu_ms:7.1f} host {1e3 * host_ms:6.1f}",
                  flush=True)
    bound = [v for v in G._bound.values() if isinstance(v, G._Bound)]
    from tiledmm.kernels.block import matmul as bm
    picks = sorted({f"{p.func.__module__}.{p.func.__name__}" for p in bm._plans.values() if hasattr(p, "func")})
    print(f"dispatcher plans' launch functions: {picks}", flush=True)
    print(f"bound specialisations: {len(bound)} of {len(G._bound)}; adapter: "
          f"{tiledmm._adapter.why_not_direct() or 'direct'}", flush=True)


def fused_linear(M=8192, K=4096, N=16384, rounds=5):
    """Linear(K, N) + gelu at M tokens, bf16: the fused launch against torch's F.linear + gelu (and
    each one's GEMM alone), measured in turn ``rounds`` times (the GPU's clocks drift): medians."""
    from tiledmm import timing
    x, w_t = operands(M, N, K, torch.bfloat16, b_t=True)          # w_t: the weight (N, K) seen as (K, N)
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    w = w_t.t()
    F = torch.nn.functional
    for act, tact in (("gelu", "none"), ("gelu_tanh", "tanh")):
        G.launch(x, w_t, out, precision="none", bias=bias, bias_mode=1, act=act)
        ref = F.gelu(F.linear(x.double(), w.double(), bias.double()), approximate=tact)
        err = ((out.double() - ref).norm() / ref.norm()).item()
        del ref
        calls = {"fused": lambda: G.launch(x, w_t, out, precision="none", bias=bias, bias_mode=1, act=act),
                 "gemm": lambda: G.launch(x, w_t, out, precision="none"),
                 "torch": lambda: F.gelu(F.linear(x, w, bias), approximate=tact),
                 "torch_mm": lambda: torch.matmul(x, w_t, out=out)}
        t = {k: [] for k in calls}
        for _ in range(rounds):
            for k, fn in calls.items():
                t[k].append(timing.time_calls(fn))
        m = {k: statistics.median(v) for k, v in t.items()}
        print(f"Linear({K},{N},{act}) x {M} tokens bf16: gluon fused {m['fused']:.3f} ms (GEMM alone {m['gemm']:.3f}) | "
              f"torch F.linear+gelu {m['torch']:.3f} ms (matmul alone {m['torch_mm']:.3f}) | fused x torch "
              f"{m['torch'] / m['fused']:.3f} | rel err vs float64 {err:.1e} | rounds {t}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer shapes and configs")
    ap.add_argument("--out", default=None, help="folder for results.json")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--tf32", action="store_true", help="also time tf32")
    ap.add_argument("--sanitize", action="store_true",
                    help="a few small checks only (to run under compute-sanitizer), then exit")
    ap.add_argument("--eager", action="store_true",
                    help="host cost of eager launches (no graph): wall time of 200 back-to-back calls, then exit")
    ap.add_argument("--host", action="store_true", help="host us per call and the fused Linear, then exit")
    ap.add_argument("--linear", action="store_true", help="the fused Linear only, then exit")
    ap.add_argument("--align-probe", action="store_true", help="time 5000^3, 5056^3, 5120^3 (bf16, 128x256)")
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__, flush=True)

    if args.host or args.linear:
        if args.host:
            host_costs()
        fused_linear()
        return 0
    if args.eager:
        import time
        for (M, N, K) in ((1000, 1000, 1000), (512, 4096, 4096), (64, 4096, 4096)):
            a, b, c = *operands(M, N, K, torch.bfloat16), torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            for name, fn in (("gluon", lambda: G.launch(a, b, c, precision="none")),
                             ("torch", lambda: torch.matmul(a, b, out=c))):
                fn()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(200):
                    fn()
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                t2 = time.perf_counter()
                print(f"eager {M}x{N}x{K} {name}: host {1e6 * (t1 - t0) / 200:.1f} us/call, "
                      f"with GPU {1e6 * (t2 - t0) / 200:.1f} us/call", flush=True)
        return 0
    if args.sanitize:
        for cfg in (G.CONFIGS["16bit"][0], G.CONFIGS["16bit"][5], G._c(64, 128, 64, 4, 6, split=4)):
            print(cfg, check(200, 264, 136, torch.bfloat16, cfg, True, True),
                  check(200, 264, 136, torch.bfloat16, cfg, alpha=0.5, beta=2.0), flush=True)
        for cfg in G.CONFIGS["tf32"]:      # tf32: K-major B; B row-major (B^T in registers); A M-major (A in registers)
            print(cfg, check(200, 264, 136, torch.float32, cfg, b_t=True), check(200, 264, 136, torch.float32, cfg),
                  check(208, 264, 136, torch.float32, cfg, True, True), flush=True)
        return 0
    if not args.no_check:
        print("== correctness vs float64 ==", flush=True)
        for dtype in (torch.bfloat16, torch.float16):
            for cfg in G.CONFIGS["16bit"]:
                print(dtype, cfg["BLOCK_M"], cfg["BLOCK_N"], "ragged 777x1000x1000:", check(777, 1000, 1000, dtype, cfg), flush=True)
            for a_t, b_t in ((True, False), (False, True), (True, True)):
                print(dtype, f"a_t={a_t} b_t={b_t} 304x520x264:", check(304, 520, 264, dtype, None, a_t, b_t), flush=True)
            print(dtype, f"a_t={a_t} b_t={b_t} 784x1000x1000 128x256 epi2:",
                  check(784, 1000, 1000, dtype, G.CONFIGS["16bit"][0], a_t, b_t), flush=True)
            print(dtype, "alpha=0.5 beta=2 333x264x200:", check(333, 264, 200, dtype, None, alpha=0.5, beta=2.0), flush=True)
            print(dtype, "alpha=-1 beta=1 a_t 200x512x4096:", check(200, 512, 4096, dtype, None, True, False, -1.0, 1.0), flush=True)
            print(dtype, "offset sub-matrix 129x136x72:", check(129, 136, 72, dtype, offset=True), flush=True)
            print(dtype, "M=1 1x4096x4096:", check(1, 4096, 4096, dtype), flush=True)
            print(dtype, "K=8 100x100x8:", check(100, 104, 8, dtype), flush=True)
            for split_cfg in [G._c(128, 128, 64, 8, 4, split=2), G._c(64, 128, 64, 4, 6, split=4)]:
                # split-K: repeated launches (the counters reset themselves), empty splits (K=72:
                # 2 K-steps over up to 4 splits), alpha/beta through the fix-up
                name = f"split {split_cfg['SPLIT_K']} {split_cfg['BLOCK_M']}x{split_cfg['BLOCK_N']}"
                print(dtype, name, "3 launches 512x4096x4096:",
                      [check(512, 4096, 4096, dtype, split_cfg, seed=s) for s in range(3)],
                      "K=72:", check(200, 264, 72, dtype, split_cfg),
                      "ab:", check(333, 264, 1000, dtype, split_cfg, alpha=0.5, beta=2.0), flush=True)
            a, b = operands(64, 64, 64, dtype)
            mis = a.view(-1)[1:1 + 63 * 64].view(63, 64)
            print(dtype, "misaligned base:", G.why_not(mis, b, torch.empty(63, 64, device="cuda", dtype=dtype), "none"))
        for cfg in G.CONFIGS["tf32"]:
            print("tf32", cfg["BLOCK_M"], cfg["BLOCK_N"], "ragged 777x1000x1000 b_t:",
                  check(777, 1000, 1000, torch.float32, cfg, b_t=True), flush=True)
        print("tf32 alpha/beta:", check(333, 264, 200, torch.float32, None, b_t=True, alpha=0.5, beta=2.0))
        print("tf32 row-major B:", check(64, 64, 64, torch.float32))

    if args.align_probe:   # is 5000 slow for its 10,000-byte rows (not a multiple of 128 bytes)?
        for n in (5000, 5056, 5120):
            r = bench(n, n, n, torch.bfloat16, [G.CONFIGS["16bit"][0]])
            v = next(iter(r["configs"].values()))
            print(f"align probe {n}^3 bf16 torch {r['torch_tflops']:.0f} gluon 128x256 {v.get('tflops', 0):.0f} TF/s",
                  flush=True)
    print("== timing (CUDA graph of 20 launches, rotated inputs, median of 12) ==", flush=True)
    rows = []
    shapes = SHAPES[:4] + SHAPES[6:7] if args.quick else SHAPES
    dts = [torch.bfloat16, torch.float16] + ([torch.float32] if args.tf32 else [])
    for dtype in dts:
        kind = "16bit" if dtype != torch.float32 else "tf32"
        for (M, N, K) in shapes:
            extra = [dict(G.CONFIGS[kind][0], GROUP_M=g) for g in (4, 8)] if kind == "16bit" and M == N == K >= 4096 else []
            row = bench(M, N, K, dtype, G.CONFIGS[kind] + extra)
            rows.append(row)
            ok = {k: v for k, v in row["configs"].items() if "ms" in v}
            best = max(ok, key=lambda k: ok[k]["tflops"]) if ok else None
            pick = next((k for k, v in ok.items() if v["pick"]), None)
            errs = {k: v["error"] for k, v in row["configs"].items() if "error" in v}
            print(f"{row['dtype']:9} {row['shape']:18} torch {row['torch_tflops']:6.1f} TF | " +
                  " ".join(f"{k}:{v['tflops']:.0f}" for k, v in ok.items()) +
                  (f" | best {best} {ok[best]['x_torch']:.2f}x pick {pick} {ok[pick]['x_torch']:.2f}x" if best and pick else "") +
                  (f" ERR {errs}" if errs else ""), flush=True)
    if args.out:
        with open(f"{args.out}/results.json", "w") as f:
            json.dump(rows, f, indent=1)
    print("\n== summary: dtype shape | torch TF/s | gluon best (config) TF/s x torch | heuristic pick x torch ==")
    for r in rows:
        ok = {k: v for k, v in r["configs"].items() if "ms" in v}
        if not ok:
            print(r["dtype"], r["shape"], "no config ran")
            continue
        best = max(ok, key=lambda k: ok[k]["tflops"])
        pick = next((k for k, v in ok.items() if v["pick"]), best)
        print(f"{r['dtype']:9} {r['shape']:18} {r['torch_tflops']:6.1f} | {best:18} {ok[best]['tflops']:6.1f} "
              f"{ok[best]['x_torch']:.2f}x | {ok[pick]['x_torch']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
