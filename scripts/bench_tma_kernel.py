#!/usr/bin/env python3
"""The persistent TMA kernel forced through one variant, against torch, on a Hopper GPU (issues 25, 23).

    PYTHONPATH=src python3 scripts/bench_tma_kernel.py --variant tma             # this branch
    PYTHONPATH=src python3 scripts/bench_tma_kernel.py --variant tma-persistent  # the base branch's kernel
    [--shapes bf16:4096x4096x4096,...] [--sets 3] [--sweep]

Runs on both sides of issue 25 (the merged kernel, and the base branch's two kernels): the same
configs (128 x 256 x 64 bf16, 128 x 256 x 32 tf32; GROUP_M 8, 8 warps, 3 stages, EPI_SPLIT 2 where
the kernel has it) forced through ``tiledmm.matmul(a, b, out=c, variant=V, config=CFG)``. Shapes
MxKxN: bf16 4096^3, 8192^3, 2048^3, 512x4096x4096 (A and B row-major); the Linear layer
8192x4096x16384 (``x @ w.T``, B K-major) with bias + gelu; tf32 4096^3 with B K-major. Per shape:

* every path checked first against float64 on 96 sampled rows (edges included; outputs
  NaN-poisoned), then timed with ``tiledmm.timing.time_calls`` (CUDA events around queued calls,
  ``--sets`` input sets rotated, median of batches);
* ``forced``: tiledmm.matmul with variant and config (the full API path: its checks and the
  dispatcher's forced branch, every call); ``launch``: the variant's launch function itself;
  ``graph``: that launch captured in a CUDA graph and replayed (the GPU's time);
* ``pick``: plain ``tiledmm.matmul(a, b, out=c)`` (the default pick, the short path; its variant named);
* the Linear shape also: ``fused`` -- the variant's launch with bias + gelu in its epilogue (only
  where the variant has one: ``Variant.epilogue``), ``linear`` -- tiledmm.nn.functional.linear(x, w,
  b, "gelu") as a user calls it, and torch's ``F.gelu(F.linear(x, w, b))``;
* ``torch``: torch.matmul (tf32 allowed for tf32), the ratios' denominator (x = torch ms / ours).

--sweep: also every config of the variant's table at bf16 4096^3 and 8192^3 (launch timing).
A short table is printed last; JSON to $OUT/bench_tma_kernel_<variant>.json when $OUT is set.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile

os.environ.setdefault("TILEDMM_CACHE_DIR", tempfile.mkdtemp(prefix="tiledmm-bench-tma-"))
os.environ.pop("TILEDMM_TUNE", None)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tiledmm  # noqa: E402
from tiledmm import timing  # noqa: E402
from tiledmm.kernels.block import kernels as KS  # noqa: E402
from tiledmm.kernels.block import matmul as bm  # noqa: E402
from tiledmm.kernels.block import variants as V  # noqa: E402

SHAPES = ["bf16:4096x4096x4096", "bf16:8192x8192x8192", "bf16:2048x2048x2048", "bf16:512x4096x4096",
          "linear:8192x4096x16384", "tf32:4096x4096x4096"]
DTYPES = {"bf16": torch.bfloat16, "linear": torch.bfloat16, "tf32": torch.float32}
TOL = {torch.bfloat16: 1.5e-2, torch.float32: 3e-3}


def config_for(variant: str, dtype) -> dict:
    """The shared config; EPI_SPLIT and WS only where the variant's kernel takes them."""
    cfg = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64 if dtype == torch.bfloat16 else 32, "GROUP_M": 8,
           "num_warps": 8, "num_stages": 3}
    merged = "EPI_SPLIT" in inspect.signature(KS.matmul_tma_persistent_kernel.fn).parameters
    if variant != "tma" or merged:
        cfg.update(EPI_SPLIT=2, WS=False)
    return cfg


def inputs(kind: str, M: int, K: int, N: int, n: int) -> list:
    """n sets (a, b, c, bias); B K-major for the Linear (b = w.T) and tf32 (wgmma's 32-bit rule)."""
    dtype, sets = DTYPES[kind], []
    for i in range(n):
        g = torch.Generator(device="cuda").manual_seed(i)
        a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
        if kind == "bf16":
            b = torch.randn(K, N, device="cuda", generator=g).to(dtype)
        else:
            b = (torch.randn(N, K, device="cuda", generator=g) / K ** 0.5).to(dtype).T
        bias = torch.randn(N, device="cuda", generator=g).to(dtype)
        sets.append((a, b, torch.empty(M, N, device="cuda", dtype=dtype), bias))
    return sets


def check(run, s, act: bool) -> float:
    """Relative error of ``run(a, b, c, bias)`` against float64 on sampled rows (c NaN-poisoned first)."""
    a, b, c, bias = s
    c.fill_(float("nan"))
    run(a, b, c, bias)
    torch.cuda.synchronize()
    rows = torch.unique(torch.cat([torch.linspace(0, a.shape[0] - 1, 94).long(), torch.tensor([1, a.shape[0] - 2])]))
    rows = rows.to(a.device)
    ref = a[rows].double() @ b.double()
    if act:
        ref = F.gelu(ref + bias.double())
    got = c[rows].double()
    if not torch.isfinite(got).all():
        return float("inf")
    return ((got - ref).norm() / ref.norm()).item()


def graphed(run, sets) -> list:
    """One CUDA graph per input set, each holding one ``run``; their replays."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for s in sets:
            run(*s)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    out = []
    for s in sets:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            run(*s)
        out.append(g.replay)
    return out


def measure(name: str, run, sets, flops: float, act: bool, tol: float, rec: dict) -> None:
    """Check, then time ``run`` over the sets: rec[name] = {ms, tflops, err} or {error}."""
    try:
        err = check(run, sets[0], act)
        if not err < tol:
            rec[name] = {"error": f"relative error {err:.2e} > {tol}"}
            return
        ms = timing.time_calls([lambda s=s: run(*s) for s in sets])
        rec[name] = {"ms": ms, "tflops": flops / ms / 1e9, "err": err}
    except Exception as e:  # noqa: BLE001  (report it and go on: one path failing says something)
        rec[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]}


def picked(a, b, c, prec) -> str:
    fn = bm.resolved(a, b, c, prec, 1.0, 0.0)
    name = next((v.name for v in V.ALL + V.OPT_IN if v.launch is fn.func), getattr(fn.func, "__name__", "?"))
    cfg = fn.keywords.get("config") or {}
    return f"{name}:{cfg.get('BLOCK_M')}x{cfg.get('BLOCK_N')}x{cfg.get('BLOCK_K')}"


def bench_shape(spec: str, variant: str, nsets: int) -> dict:
    kind, dims = spec.split(":")
    M, K, N = (int(x) for x in dims.split("x"))
    dtype, prec = DTYPES[kind], ("tf32" if kind == "tf32" else "none")
    torch.backends.cuda.matmul.allow_tf32 = kind == "tf32"
    v = V.BY_NAME[variant]
    cfg = config_for(variant, dtype)
    sets = inputs(kind, M, K, N, nsets)
    flops, tol = 2.0 * M * N * K, TOL[dtype]
    rec: dict = {"shape": spec, "variant": variant, "config": cfg}
    a0, b0, c0, _ = sets[0]
    if not v.applicable(a0, b0, c0, prec, 1.0, 0.0):
        rec["error"] = f"variant {variant} does not apply"
        return rec
    rec["pick_name"] = picked(a0, b0, c0, prec)
    opts = {} if prec == "none" else {"precision": prec}
    measure("torch", lambda a, b, c, bias: torch.matmul(a, b, out=c), sets, flops, False, tol, rec)
    measure("forced", lambda a, b, c, bias: tiledmm.matmul(a, b, out=c, variant=variant, config=cfg, **opts),
            sets, flops, False, tol, rec)

    def launch(a, b, c, bias):
        v.launch(a, b, c, precision=prec, alpha=1.0, beta=0.0, config=cfg)
    measure("launch", launch, sets, flops, False, tol, rec)
    try:
        replays = graphed(launch, sets)
        by_out = {id(s[2]): g for s, g in zip(sets, replays)}    # a set's graph writes that set's c
        measure("graph", lambda a, b, c, bias: by_out[id(c)](), sets, flops, False, tol, rec)
    except Exception as e:  # noqa: BLE001
        rec["graph"] = {"error": f"capture: {type(e).__name__}: {e}"[:200]}
    measure("pick", lambda a, b, c, bias: tiledmm.matmul(a, b, out=c, **opts), sets, flops, False, tol, rec)
    if kind == "linear":
        if getattr(v, "epilogue", False):
            measure("fused", lambda a, b, c, bias: v.launch(a, b, c, precision=prec, alpha=1.0, beta=0.0, config=cfg,
                                                            bias=bias, bias_mode=1, act="gelu"),
                    sets, flops, True, tol, rec)
        from tiledmm.nn.functional import linear
        measure("linear", lambda a, b, c, bias: c.copy_(linear(a, b.T, bias, "gelu")), sets, flops, True, tol, rec)
        measure("torch_linear", lambda a, b, c, bias: c.copy_(F.gelu(F.linear(a, b.T, bias))), sets, flops, True,
                tol, rec)
        # the copies into c above cost the same on both sides: time the two without them too
        rec["linear_nocopy_ms"] = timing.time_calls([lambda s=s: linear(s[0], s[1].T, s[3], "gelu") for s in sets])
        rec["torch_linear_nocopy_ms"] = timing.time_calls([lambda s=s: F.gelu(F.linear(s[0], s[1].T, s[3]))
                                                           for s in sets])
    return rec


def sweep(variant: str, nsets: int) -> list:
    """Every config of the variant's table at bf16 4096^3 and 8192^3, through its launch."""
    v, out = V.BY_NAME[variant], []
    for n in (4096, 8192):
        sets = inputs("bf16", n, n, n, nsets)
        torch_rec: dict = {}
        measure("torch", lambda a, b, c, bias: torch.matmul(a, b, out=c), sets, 2.0 * n ** 3, False, 1.5e-2, torch_rec)
        for cfg in v.configs("16bit"):
            rec: dict = {"shape": f"bf16:{n}x{n}x{n}", "config": cfg, "torch": torch_rec.get("torch")}
            measure("launch", lambda a, b, c, bias, cfg=cfg: v.launch(a, b, c, precision="none", alpha=1.0, beta=0.0,
                                                                      config=cfg), sets, 2.0 * n ** 3, False,
                    1.5e-2, rec)
            out.append(rec)
        del sets
        torch.cuda.empty_cache()
    return out


def _cell(rec: dict, name: str, torch_ms: float | None) -> str:
    r = rec.get(name)
    if r is None:
        return "-"
    if "error" in r:
        return "FAIL"
    x = f" {torch_ms / r['ms']:.2f}x" if torch_ms else ""
    return f"{r['ms']:.3f}{x}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", default="tma", help="the variant forced: 'tma' here, 'tma-persistent' on the base")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--sets", type=int, default=3, help="input sets rotated while timing")
    ap.add_argument("--sweep", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        print("needs a Hopper GPU (sm_90)", file=sys.stderr)
        return 2
    if args.variant not in V.BY_NAME:
        print(f"no variant {args.variant!r} on this branch: {sorted(V.BY_NAME)}", file=sys.stderr)
        return 2
    import triton
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__,
          "variant", args.variant, flush=True)
    recs = []
    for spec in args.shapes.split(","):
        rec = bench_shape(spec, args.variant, args.sets)
        recs.append(rec)
        print(json.dumps(rec), flush=True)
        torch.cuda.empty_cache()
    swept = sweep(args.variant, args.sets) if args.sweep else []
    for rec in swept:
        print(json.dumps(rec), flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], f"bench_tma_kernel_{args.variant}.json"), "w") as f:
            json.dump({"shapes": recs, "sweep": swept, "device": torch.cuda.get_device_name()}, f, indent=1)
    print(f"\nms and x torch (torch ms / ours); variant {args.variant}")
    cols = ("forced", "launch", "graph", "pick", "fused", "linear")
    print(f"{'shape':24} {'torch ms':>9} " + " ".join(f"{c:>14}" for c in cols) + "  pick")
    for rec in recs:
        if "error" in rec:
            print(f"{rec['shape']:24} {rec['error']}")
            continue
        t = rec.get("torch", {}).get("ms")
        tl_ = rec.get("torch_linear", {}).get("ms")
        cells = [_cell(rec, c, tl_ if c in ("fused", "linear") else t) for c in cols]
        print(f"{rec['shape']:24} {t or float('nan'):9.3f} " + " ".join(f"{c:>14}" for c in cells)
              + f"  {rec.get('pick_name', '')}")
        if "linear_nocopy_ms" in rec:
            ours, theirs = rec["linear_nocopy_ms"], rec["torch_linear_nocopy_ms"]
            print(f"{'':24} Linear fwd without the copy: tiledmm {ours:.3f} ms, torch {theirs:.3f} ms = "
                  f"{theirs / ours:.2f}x")
    for rec in swept:
        r, t = rec.get("launch", {}), (rec.get("torch") or {}).get("ms")
        cfg = rec["config"]
        name = "x".join(str(cfg[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")) + \
            f" w{cfg['num_warps']} s{cfg['num_stages']} epi{cfg.get('EPI_SPLIT', 1)} ws{int(bool(cfg.get('WS')))}"
        cell = "FAIL " + r["error"] if "error" in r else f"{r['ms']:.3f} ms {t / r['ms']:.2f}x" if t else "?"
        print(f"sweep {rec['shape']:20} {name:32} {cell}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
