"""Grouped products for Mixture-of-Experts (issue 45): tiledmm.grouped_matmul against torch._grouped_mm and a
loop of torch.mm, and an MoE experts block forward + backward, in one process on one GPU.

    PYTHONPATH=src python3 scripts/bench_grouped.py [--no-sweep] [--shapes 0,1,2] [--no-moe]
    PYTHONPATH=src python3 scripts/bench_grouped.py --smoke     # toy sizes: the script's logic (CPU too)

Shapes (bf16, x (tokens, K) @ w (G, N, K) transposed -- the MoE layout, w K-contiguous):
    8 experts 16384 tokens 4096 -> 14336;  64 experts 65536 tokens 2048 -> 1536;  128 experts 65536 tokens 2048 -> 768
Routings: skewed (group sizes proportional to u^2, u uniform), uniform, and skewed with 10 % of the groups empty.

1. sweep (first, printed as it goes): on each shape's skewed routing, every config of SWEEP through the kernel's
   launch (kernels/block/grouped.py), its time and its error against torch._grouped_mm's result; the winner per
   shape is printed (to pick CONFIGS / heuristic from); then the configs of the weight gradient's layout (K
   grouped) on the MoE block's dW shape, with torch._grouped_mm's time.
2. per shape and routing: the error per group against float64 (max over groups of ||C_g - ref_g|| / ||ref_g||,
   output poisoned with NaN first), then times -- tiledmm.grouped_matmul (the heuristic's config, the public
   call), the sweep's winner (the kernel's launch), torch._grouped_mm, a loop of torch.mm over the groups (sizes
   read on the host beforehand, outputs written in place). TFLOP/s = 2 * tokens * K * N / time.
3. the MoE experts block: 64 experts, top-2 routing of 16384 tokens, d = 2048, hidden 1408: gather by expert,
   h = silu(x Wg^T) * (x Wu^T), y = h Wd^T, scatter-add weighted by the router's probabilities; forward +
   backward (dx and the three weights' gradients) with torch._grouped_mm, with tiledmm.grouped_matmul in the
   same places, and with tiledmm's fused silu epilogue on the gate product; outputs and gradients compared.
Timing: tiledmm.timing.time_calls (CUDA events around batches of queued calls, median of batches).
Targets (issue 45): >= 1.05x torch._grouped_mm on every shape and routing; >= 5x the loop at 128 experts;
the MoE block >= 1.0x. A table is printed last.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import torch

import tiledmm
from tiledmm.kernels.block import grouped as GK
from tiledmm.timing import time_calls

SHAPES = [(8, 16384, 4096, 14336), (64, 65536, 2048, 1536), (128, 65536, 2048, 768)]   # G, tokens, K, N
SMOKE_SHAPES = [(4, 64, 32, 48), (8, 96, 16, 32)]
ROUTINGS = ("skewed", "uniform", "empty10")
TOL = 3e-2          # bf16: tiledmm.matmul's bound (the fuzzer's)
SWEEP = {
    "128x256x64 w8 s3": GK.config(128, 256, 64, 8, 3),
    "128x256x64 w8 s3 g16": GK.config(128, 256, 64, 8, 3, group_m=16),
    "256x128x64 w8 s3": GK.config(256, 128, 64, 8, 3),
    "128x128x64 w8 s4": GK.config(128, 128, 64, 8, 4),
    "128x128x64 w4 s4": GK.config(128, 128, 64, 4, 4),
    "128x128x128 w8 s3": GK.config(128, 128, 128, 8, 3),
    "64x256x64 w4 s4": GK.config(64, 256, 64, 4, 4),
    "64x128x64 w4 s4": GK.config(64, 128, 64, 4, 4),
}


def dev() -> str:
    return "cpu" if tiledmm.emulating() else "cuda"


def sizes_for(routing: str, G: int, M: int, seed: int) -> torch.Tensor:
    """Group sizes summing to M: skewed (proportional to u^2), uniform, or skewed with 10 % of the groups empty."""
    g = torch.Generator().manual_seed(seed)
    if routing == "uniform":
        w = torch.ones(G)
    else:
        w = torch.rand(G, generator=g) ** 2
        if routing == "empty10":
            w[torch.randperm(G, generator=g)[: max(1, G // 10)]] = 0
    s = torch.floor(w / w.sum() * M).long()
    s[int(torch.argmax(w))] += M - int(s.sum())
    return s


def operands(G, M, K, N, seed=0):
    g = torch.Generator(device=dev()).manual_seed(seed)
    x = torch.randn(M, K, device=dev(), generator=g, dtype=torch.bfloat16)
    w = (torch.randn(G, N, K, device=dev(), generator=g) / math.sqrt(K)).to(torch.bfloat16)
    return x, w


def per_group_error(y, x, w, sizes) -> float:
    """max over groups of ||y_g - ref_g|| / ||ref_g||, ref in float64 (the rows after the groups: none here)."""
    worst, start = 0.0, 0
    for g, n in enumerate(sizes.tolist()):
        if n:
            ref = x[start:start + n].double() @ w[g].double().T
            e = ((y[start:start + n].double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()
            worst = max(worst, e)
        start += n
    return worst


def rel(a, b) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300)).item()


def timed(fn) -> float:
    return time_calls(fn, batches=5, batch_ms=20.0)


def loop_mm(x, w, out, bounds):
    for g, (s, e) in enumerate(bounds):
        if e > s:
            torch.mm(x[s:e], w[g].T, out=out[s:e])


def sweep(shapes, quick: bool) -> dict:
    """Every SWEEP config on each shape's skewed routing: {shape index: (winner name, its ms)}."""
    configs = dict(list(SWEEP.items())[:2]) if quick else SWEEP
    if tiledmm.emulating():
        configs = {"16x16x16": GK.config(16, 16, 16, 4, 1, group_m=2), "16x32x16": GK.config(16, 32, 16, 4, 1)}
    best = {}
    print("sweep: config, ms, TFLOP/s, max |C - torch| / |torch| (skewed routing)", flush=True)
    for i, (G, M, K, N) in enumerate(shapes):
        x, w = operands(G, M, K, N)
        sizes = sizes_for("skewed", G, M, 1)
        offs = torch.cumsum(sizes, 0).to(torch.int32).to(dev())
        want = torch._grouped_mm(x, w.mT, offs=offs)
        flop = 2 * M * K * N
        print(f"  shape {i}: G={G} tokens={M} {K}->{N}", flush=True)
        for name, cfg in configs.items():
            out = torch.empty(M, N, device=dev(), dtype=torch.bfloat16)
            try:
                t0 = time.time()
                out.fill_(float("nan"))
                GK.launch(x, w.mT, out, offs, "m", config=cfg)
                e = rel(out, want)
                ms = timed(lambda: GK.launch(x, w.mT, out, offs, "m", config=cfg))
                tma = GK._last.get("tma")
            except Exception as exc:       # noqa: BLE001 -- a config that does not compile or fit: say so, go on
                print(f"    {name:<24} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}", flush=True)
                continue
            ok = e < TOL
            print(f"    {name:<24} {ms:8.3f} ms {flop / ms / 1e9:7.1f}  err {e:.1e}{'' if ok else ' WRONG'}"
                  f"{'' if tma else ' (no TMA)'}  ({time.time() - t0:.1f} s)", flush=True)
            if ok and (i not in best or ms < best[i][1]):
                best[i] = (name, ms)
        if i in best:
            print(f"  winner for shape {i}: {best[i][0]}", flush=True)
    return best


SWEEP_K = {     # the weight gradient's layout (K grouped): the MoE block's backward
    "128x128x64 w8 s3": GK.config(128, 128, 64, 8, 3),
    "128x128x64 w4 s4": GK.config(128, 128, 64, 4, 4),
    "128x256x64 w8 s3": GK.config(128, 256, 64, 8, 3),
    "256x128x64 w8 s3": GK.config(256, 128, 64, 8, 3),
    "128x128x128 w8 s3": GK.config(128, 128, 128, 8, 3),
}


def sweep_k(smoke: bool) -> None:
    """The weight gradient of the MoE block's gate projection, dW_g = x_gᵀ dy_g (64 experts, 32768 routed rows,
    2048 x 1408), for every SWEEP_K config and torch._grouped_mm."""
    E, T, d, H = (8, 64, 32, 16) if smoke else (64, 32768, 2048, 1408)
    g = torch.Generator(device=dev()).manual_seed(3)
    x = torch.randn(T, d, device=dev(), generator=g, dtype=torch.bfloat16)
    dy = torch.randn(T, H, device=dev(), generator=g, dtype=torch.bfloat16)
    offs = torch.cumsum(sizes_for("skewed", E, T, 4), 0).to(torch.int32).to(dev())
    want = torch._grouped_mm(x.mT, dy, offs=offs)
    flop = 2 * T * d * H
    configs = {"16x16x16": GK.config(16, 16, 16, 4, 1)} if tiledmm.emulating() else SWEEP_K
    print(f"sweep, weight gradient (K grouped): {E} experts, {T} rows, {d} x {H}", flush=True)
    for name, cfg in configs.items():
        out = torch.full((E, d, H), float("nan"), device=dev(), dtype=torch.bfloat16)
        try:
            GK.launch(x.mT, dy, out, offs, "k", config=cfg)
            e = rel(out, want)
            ms = timed(lambda: GK.launch(x.mT, dy, out, offs, "k", config=cfg))
        except Exception as exc:       # noqa: BLE001
            print(f"    {name:<24} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}", flush=True)
            continue
        print(f"    {name:<24} {ms:8.3f} ms {flop / ms / 1e9:7.1f}  err {e:.1e}{'' if e < TOL else ' WRONG'}"
              f"{'' if GK._last.get('tma') else ' (no TMA)'}", flush=True)
    ms = timed(lambda: torch._grouped_mm(x.mT, dy, offs=offs))
    print(f"    {'torch._grouped_mm':<24} {ms:8.3f} ms {flop / ms / 1e9:7.1f}", flush=True)


def bench_shape(i, shape, routing, best: dict) -> dict:
    G, M, K, N = shape
    x, w = operands(G, M, K, N, seed=i)
    sizes = sizes_for(routing, G, M, seed=10 + i)
    offs = torch.cumsum(sizes, 0).to(torch.int32).to(dev())
    ends = torch.cumsum(sizes, 0).tolist()
    bounds = list(zip([0] + ends[:-1], ends))
    flop = 2 * M * K * N
    out = torch.full((M, N), float("nan"), device=dev(), dtype=torch.bfloat16)
    tiledmm.grouped_matmul(x, w.mT, offs, out=out)
    err = per_group_error(out, x, w, sizes)
    row = {"shape": f"G={G} T={M} {K}->{N}", "routing": routing, "err": err,
           "empty": int((sizes == 0).sum()), "config": GK._last.get("config", {})}
    row["tiledmm"] = timed(lambda: tiledmm.grouped_matmul(x, w.mT, offs, out=out))
    if i in best:
        cfg = SWEEP.get(best[i][0])
        if cfg is not None:
            row["best"] = timed(lambda: GK.launch(x, w.mT, out, offs, "m", config=cfg))
            row["best_name"] = best[i][0]
    ref_out = torch.empty_like(out)
    row["torch"] = timed(lambda: torch._grouped_mm(x, w.mT, offs=offs))
    row["loop"] = timed(lambda: loop_mm(x, w, ref_out, bounds))
    row["flop"] = flop
    return row


# -- the MoE experts block --------------------------------------------------------------------------------

def moe_setup(E=64, T=16384, d=2048, H=1408, top=2, seed=0, smoke=False):
    if smoke:
        E, T, d, H = 8, 64, 32, 16
    g = torch.Generator(device=dev()).manual_seed(seed)
    x = torch.randn(T, d, device=dev(), generator=g, dtype=torch.bfloat16)
    logits = torch.randn(T, E, device=dev(), generator=g)
    probs, experts = torch.softmax(logits, -1).topk(top, dim=-1)          # top-2 routing
    flat = experts.reshape(-1)
    order = torch.argsort(flat, stable=True)
    token = order // top                                                  # the token of each routed copy
    offs = torch.cumsum(torch.bincount(flat, minlength=E), 0).to(torch.int32)
    weight = probs.reshape(-1)[order].to(torch.bfloat16)[:, None]
    mk = lambda *s: (torch.randn(*s, device=dev(), generator=g) / math.sqrt(s[-1])).to(torch.bfloat16)  # noqa: E731
    params = [mk(E, H, d).requires_grad_(True), mk(E, H, d).requires_grad_(True), mk(E, d, H).requires_grad_(True)]
    return x.requires_grad_(True), token, offs, weight, params


def moe_block(x, token, offs, weight, params, mm, fused: bool):
    wg, wu, wd = params
    xs = x[token]                                         # (T * top, d), grouped by expert
    if fused:
        h = tiledmm.grouped_matmul(xs, wg.mT, offs, activation="silu") * tiledmm.grouped_matmul(xs, wu.mT, offs)
    else:
        h = torch.nn.functional.silu(mm(xs, wg.mT, offs)) * mm(xs, wu.mT, offs)
    y = mm(h, wd.mT, offs) * weight
    return torch.zeros_like(x).index_add(0, token, y)


def moe(smoke: bool) -> list[dict]:
    x, token, offs, weight, params = moe_setup(smoke=smoke)
    gy = torch.randn_like(x)
    variants = {"torch._grouped_mm": (lambda a, b, o: torch._grouped_mm(a, b, offs=o), False),
                "tiledmm": (lambda a, b, o: tiledmm.grouped_matmul(a, b, o), False),
                "tiledmm fused silu": (lambda a, b, o: tiledmm.grouped_matmul(a, b, o), True)}
    results, grads = [], {}
    for name, (mm, fused) in variants.items():
        def step():
            for t in (x, *params):
                t.grad = None
            moe_block(x, token, offs, weight, params, mm, fused).backward(gy)
        step()
        grads[name] = [t.grad.clone() for t in (x, *params)]
        y = moe_block(x, token, offs, weight, params, mm, fused).detach()
        grads[name].insert(0, y)
        results.append({"name": name, "ms": timed(step)})
    base = grads["torch._grouped_mm"]
    for r in results[1:]:
        r["diff"] = max(rel(a, b) for a, b in zip(grads[r["name"]], base))
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--no-sweep", action="store_true", help="skip the config sweep")
    p.add_argument("--quick-sweep", action="store_true", help="sweep two configs only")
    p.add_argument("--shapes", default=None, help="comma-separated shape indices (default: all)")
    p.add_argument("--no-moe", action="store_true", help="skip the MoE block")
    p.add_argument("--smoke", action="store_true", help="toy sizes (the script's logic; runs in emulation)")
    args = p.parse_args()
    smoke = args.smoke or tiledmm.emulating()
    if tiledmm.emulating() and not args.smoke:
        print("no GPU: running the toy sizes (--smoke)", file=sys.stderr)
    shapes = SMOKE_SHAPES if smoke else SHAPES
    if args.shapes:
        shapes = [shapes[int(s)] for s in args.shapes.split(",")]
    if not tiledmm.emulating():
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    t_start = time.time()
    best = {} if args.no_sweep else sweep(shapes, args.quick_sweep)
    if not args.no_sweep and not args.no_moe:
        sweep_k(smoke)
    rows = []
    for i, shape in enumerate(shapes):
        for routing in ROUTINGS:
            r = bench_shape(i, shape, routing, best)
            rows.append(r)
            print(f"{r['shape']:<24} {routing:<8} err {r['err']:.1e}  tiledmm {r['tiledmm']:.3f} ms  torch "
                  f"{r['torch']:.3f} ms  loop {r['loop']:.3f} ms  (config {r['config']})", flush=True)
    blocks = [] if args.no_moe else moe(smoke)
    for b in blocks:
        print(f"MoE block {b['name']:<20} {b['ms']:.3f} ms  max rel diff vs torch {b.get('diff', 0):.1e}", flush=True)

    print(f"\n== grouped products, bf16 (TFLOP/s; x = speed-up over torch._grouped_mm / over the loop; "
          f"{time.time() - t_start:.0f} s) ==")
    print(f"{'shape':<24} {'routing':<8} {'empty':>5} {'err/group':>9} {'tiledmm':>8} {'best cfg':>8} {'torch':>7} "
          f"{'loop':>7} {'x torch':>7} {'x loop':>6}  best config")
    ok = True
    for r in rows:
        tf = lambda ms: r["flop"] / ms / 1e9  # noqa: E731
        fast = min(r["tiledmm"], r.get("best", math.inf))
        xt, xl = r["torch"] / r["tiledmm"], r["loop"] / r["tiledmm"]
        good = r["err"] < TOL
        ok &= good
        print(f"{r['shape']:<24} {r['routing']:<8} {r['empty']:>5} {r['err']:>9.1e} {tf(r['tiledmm']):>8.1f} "
              f"{tf(fast):>8.1f} {tf(r['torch']):>7.1f} {tf(r['loop']):>7.1f} {xt:>7.2f} {xl:>6.2f}  "
              f"{r.get('best_name', '-')}{'' if good else '  WRONG'}")
    if blocks:
        base = blocks[0]["ms"]
        print("\n== MoE experts block, forward + backward (64 experts, top-2, 16384 tokens, d 2048, hidden 1408) ==")
        for b in blocks:
            print(f"{b['name']:<20} {b['ms']:8.3f} ms  x torch {base / b['ms']:.2f}  "
                  f"max rel diff {b.get('diff', 0):.1e}")
    print("targets: >= 1.05x torch._grouped_mm everywhere; >= 5x the loop at 128 experts; MoE block >= 1.0x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
