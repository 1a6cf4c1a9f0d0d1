#!/usr/bin/env python3
"""Every Triton (block) variant, forced, checked against float64: the body that
``benchmarks/sanitize.sh`` runs under compute-sanitizer (memcheck, racecheck, synccheck).

    compute-sanitizer --tool memcheck python3 benchmarks/sanitize_block.py            # masked, aligned, batched, ...
    compute-sanitizer --tool racecheck python3 benchmarks/sanitize_block.py --small    # the smallest shapes

Each run is ``tiledmm.matmul(a, b, kernel="triton", variant=V, precision=P, out=c, alpha=, beta=,
config=)`` on torch CUDA tensors, for every variant in ``kernels.block.dispatch.VARIANTS``, float32
(ieee, tf32), bfloat16 and float16, on shapes (M x K x N) that exercise the masks (131x77x203),
16-byte aligned ones the TMA variants take (256x192x320; with B K-major too, which tf32's TMA
needs), transposed operands, few tiles with a long K (split-K splits), a batch and a broadcast
batch, alpha/beta with a C that is read, a float32 out for 16-bit inputs, and batches of
tiny ragged products (batched-small's case). ``out`` is
poisoned with NaN when beta == 0 (an element left unwritten shows). With ``--configs big``
(the default without --small) the masked shapes run each variant's largest-tile config too.

Lines: ``checked <variant> <dtype> <case> <config> ok|FAIL err=...`` per run, ``skipped ...``
where the variant cannot run the call (the API's TiledmmError "cannot run this call": by
design), then a table (variant x dtype: ok / FAIL / skipped). Exit status 1 on any FAIL.

Run it with PYTORCH_NO_CUDA_MEMORY_CACHING=1 under memcheck (sanitize.sh does): torch's caching
allocator would otherwise hand out blocks inside larger pooled segments, where an access past a
tensor's end lands in valid memory and memcheck cannot see it.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

os.environ.setdefault("TILEDMM_QUIET", "1")
os.environ.setdefault("TILEDMM_TUNE", "off")
os.environ.setdefault("TILEDMM_CACHE_DIR", tempfile.mkdtemp(prefix="tiledmm-sanitize-cache-"))

DTYPES = (("float32", "ieee"), ("float32", "tf32"), ("bfloat16", None), ("float16", None))
TOL = {"ieee": 1e-5, "tf32": 5e-3, "bfloat16": 3e-2, "float16": 5e-3}

# name: (batch_a, batch_b, M, K, N, options); batch () = 2-D
FULL = {
    "masked": ((), (), 131, 77, 203, {}),
    "masked-T": ((), (), 131, 77, 203, {"a_t": True, "b_t": True}),      # A and B transposed views
    "aligned": ((), (), 256, 192, 320, {}),
    "aligned-bK": ((), (), 256, 192, 320, {"b_t": True}),                # B K-major (tf32 TMA takes it)
    "splitk": ((), (), 37, 3001, 45, {}),                                # few tiles, long K
    "batched": ((3,), (3,), 67, 45, 51, {}),
    "batch-bcast": ((3,), (), 67, 45, 51, {}),                           # (3,M,K) @ (K,N)
    "alpha-beta": ((), (), 131, 77, 203, {"alpha": -1.5, "beta": 0.5}),
    "alpha-beta-al": ((), (), 256, 192, 320, {"alpha": 2.0, "beta": -1.0, "b_t": True}),
    "out-f32": ((), (), 131, 77, 203, {"out_dtype": "float32", "beta": 0.25}),
    "large": ((), (), 1031, 1029, 1027, {"only": "float32/ieee"}),          # simt-async takes sides >= 1024
    "tiny-batch": ((301,), (301,), 7, 13, 9, {"alpha": 0.5, "beta": 2.0}),  # batched-small: many ragged products
    "tiny-bcast": ((301,), (), 8, 16, 8, {}),                               # ... with B broadcast (stride 0)
}
SMALL = {
    "masked": ((), (), 37, 29, 41, {}),
    "aligned": ((), (), 64, 32, 48, {}),
    "aligned-bK": ((), (), 64, 32, 48, {"b_t": True}),
    "splitk": ((), (), 17, 515, 23, {}),
    "batched": ((2,), (2,), 19, 21, 23, {}),
    "alpha-beta": ((), (), 37, 29, 41, {"alpha": -1.5, "beta": 0.5}),
    "tiny-batch": ((67,), (67,), 7, 13, 9, {}),
}
BIG_CONFIG_CASES = ("masked", "alpha-beta")


def _kind(precision):
    from tiledmm.kernels.block import configs as C
    return C.kind_of(precision or "none")


def _biggest_config(variant: str, precision):
    """The variant's config with the largest output tile (most masked at the masked shapes)."""
    from tiledmm.kernels.block import variants as V
    v = V.BY_NAME[variant]
    cfgs = v.configs(_kind(precision))
    if not cfgs:
        return None
    return dict(max(cfgs, key=lambda c: (c["BLOCK_M"] * c["BLOCK_N"], c["BLOCK_K"], c.get("num_stages", 0))))


def _cfg_str(cfg) -> str:
    if not cfg:
        return "heuristic"
    return f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']}-w{cfg.get('num_warps', '?')}-s{cfg.get('num_stages', '?')}"


def _operands(case, dtype: str, seed: int):
    import torch
    ba, bb, M, K, N, opt = case
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)

    def make(batch, r, c, transposed):
        x = torch.randn(batch + ((c, r) if transposed else (r, c)), generator=g, dtype=torch.float64)
        x = x.to("cuda", dt)
        return x.transpose(-1, -2) if transposed else x
    a = make(ba, M, K, opt.get("a_t", False))
    b = make(bb, K, N, opt.get("b_t", False))
    batch = tuple(max(x, y) for x, y in zip(ba, bb)) if len(ba) == len(bb) else (ba or bb)
    odt = getattr(torch, opt.get("out_dtype", dtype))
    beta = opt.get("beta", 0.0)
    if beta:
        c = torch.randn(batch + (M, N), generator=g, dtype=torch.float64).to("cuda", odt)
    else:
        c = torch.full(batch + (M, N), float("nan"), device="cuda", dtype=odt)
    return a, b, c


def run_one(variant: str, dtype: str, precision, name: str, case, cfg, seed: int) -> tuple[str, str]:
    """('ok' | 'FAIL' | 'skipped', detail)."""
    import torch
    import tiledmm
    a, b, c = _operands(case, dtype, seed)
    opt = case[5]
    alpha, beta = opt.get("alpha", 1.0), opt.get("beta", 0.0)
    c0 = c.detach().to("cpu", torch.float64)
    kw = {"precision": precision} if precision else {}
    if cfg:
        kw["config"] = cfg
    try:
        r = tiledmm.matmul(a, b, kernel="triton", variant=variant, out=c, alpha=alpha, beta=beta, **kw)
        torch.cuda.synchronize()
    except tiledmm.TiledmmError as e:
        if "cannot run this call" in str(e):
            return "skipped", "not applicable (by design)"
        return "FAIL", f"refused: {e}"
    except Exception as e:   # noqa: BLE001
        return "FAIL", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if r is not c:
        return "FAIL", "out not returned"
    ref = alpha * (a.detach().to("cpu", torch.float64) @ b.detach().to("cpu", torch.float64))
    if beta:
        ref = ref + beta * c0
    got = c.detach().to("cpu", torch.float64)
    if not torch.isfinite(got).all():
        return "FAIL", f"{int((~torch.isfinite(got)).sum())} non-finite element(s) (unwritten: NaN poison left?)"
    err = float((got - ref).norm() / ref.norm().clamp_min(1e-300))
    key = precision if dtype == "float32" else dtype
    tol = TOL[key] * max(1.0, math.sqrt(case[3] / 256))
    return ("ok" if err <= tol else "FAIL"), f"err={err:.2e} tol={tol:.0e}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="the smallest shapes (racecheck, synccheck)")
    p.add_argument("--configs", choices=("none", "big"), default=None,
                   help="also run each variant's largest-tile config on the masked shapes (default: big, "
                        "none with --small)")
    p.add_argument("--variants", help="comma-separated subset of the variants")
    p.add_argument("--dtypes", help="comma-separated subset of float32/ieee,float32/tf32,bfloat16,float16")
    p.add_argument("--cases", help="comma-separated subset of the shape cases")
    args = p.parse_args(argv)
    import torch
    import tiledmm
    from tiledmm import _backend
    from tiledmm.harness import cuda_alive
    from tiledmm.kernels.block.dispatch import VARIANTS
    if _backend.emulating():
        print("sanitize_block: no GPU (emulation): nothing to sanitize", file=sys.stderr)
        return 2
    cases = SMALL if args.small else FULL
    if args.cases:
        cases = {k: v for k, v in cases.items() if k in args.cases.split(",")}
    configs = args.configs or ("none" if args.small else "big")
    variants = [v for v in VARIANTS if not args.variants or v in args.variants.split(",")]
    dtypes = [d for d in DTYPES if not args.dtypes or (f"{d[0]}/{d[1]}" if d[1] else d[0]) in args.dtypes.split(",")]
    print(f"sanitize_block: {torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))}), "
          f"tiledmm {getattr(tiledmm, '__version__', '?')}, variants {variants}, cases {list(cases)}, configs {configs}, "
          f"PYTORCH_NO_CUDA_MEMORY_CACHING={os.environ.get('PYTORCH_NO_CUDA_MEMORY_CACHING', '')!r}", flush=True)
    table: dict[tuple, dict] = {}
    t0 = time.perf_counter()
    seed = 0
    broken = False
    for variant in variants:
        for dtype, prec in dtypes:
            dl = f"{dtype}/{prec}" if prec else dtype
            row = table.setdefault((variant, dl), {"ok": 0, "FAIL": 0, "skipped": 0})
            for name, case in cases.items():
                if case[5].get("out_dtype") == dtype or (case[5].get("out_dtype") and dtype == "float32"):
                    continue                                   # a float32 out is for 16-bit inputs
                if case[5].get("only", dl) != dl:
                    continue
                runs = [None]
                if configs == "big" and name in BIG_CONFIG_CASES:
                    big = _biggest_config(variant, prec)
                    if big is not None:
                        runs.append(big)
                for cfg in runs:
                    seed += 1
                    t1 = time.perf_counter()
                    status, detail = run_one(variant, dtype, prec, name, case, cfg, seed)
                    row[status] += 1
                    shape = f"{'x'.join(map(str, case[0])) + ':' if case[0] else ''}{case[2]}x{case[3]}x{case[4]}"
                    word = "checked" if status != "skipped" else "skipped"
                    print(f"{word} {variant} {dl} {name} {shape} {_cfg_str(cfg)} {status if word == 'checked' else ''} "
                          f"{detail} ({time.perf_counter() - t1:.1f} s)".replace("  ", " "), flush=True)
                    if status == "FAIL" and not cuda_alive():
                        print("ABORT: the CUDA context is broken (an illegal access?): later runs cannot run", flush=True)
                        broken = True
                        break
                if broken:
                    break
            if broken:
                break
        if broken:
            break
    # the table
    dls = [f"{d}/{p}" if p else d for d, p in dtypes]
    print(f"\n{'variant':<16}" + "".join(f"{d:>22}" for d in dls) + "     (ok/FAIL/skipped)")
    tot = {"ok": 0, "FAIL": 0, "skipped": 0}
    for variant in variants:
        cells = []
        for d in dls:
            r = table.get((variant, d), {"ok": 0, "FAIL": 0, "skipped": 0})
            for k in tot:
                tot[k] += r[k]
            cells.append(f"{r['ok']}/{r['FAIL']}/{r['skipped']}")
        print(f"{variant:<16}" + "".join(f"{c:>22}" for c in cells))
    print(f"block total: {tot['ok']} ok, {tot['FAIL']} FAIL, {tot['skipped']} skipped (not applicable) "
          f"in {time.perf_counter() - t0:.0f} s" + (" -- ABORTED" if broken else ""), flush=True)
    return 1 if tot["FAIL"] or broken else 0


if __name__ == "__main__":
    sys.exit(main())
