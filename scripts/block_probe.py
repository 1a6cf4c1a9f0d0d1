"""A probe of the block (Triton) family: forced (variant, config) candidates on the shapes furthest
behind cuBLAS, on the H100 (written for issue 11).

    python scripts/block_probe.py [--only tf32,bf16] [--jobs 12] [--budget-s 400]

Each candidate goes through the dispatcher's forced path (``kernels.block.matmul.launch`` with
``variant=`` and ``config=``, as ``tiledmm.matmul(..., variant=, config=)`` does), is checked
against float64 (fresh random inputs, NaN-poisoned output) and only then timed with
``tiledmm.timing.time_calls`` (rotated input sets) against ``torch.matmul(out=)`` with the matching
precision in the same process. Compiles run first, in parallel worker processes sharing Triton's
cache (compile_workers.py). Prints, last, per shape: cuBLAS, the best candidate and its ratio; and
the SASS facts (HGMMA forms, shared-memory traffic) of the swapped tf32 kernels, to see where B^T
is read from.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
os.environ.setdefault("TILEDMM_QUIET", "1")

from compile_workers import add_args, compile_shard, precompile  # noqa: E402  (scripts/ is sys.path[0])

PRECS = {"bf16": ("bfloat16", "none"), "fp16": ("float16", "none"), "tf32": ("float32", "tf32")}
TOL = {"bf16": 1.5e-2, "fp16": 5e-3, "tf32": 3e-3}


def c(bm, bn, bk, w, s, **kw):
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, **kw, "num_warps": w, "num_stages": s}


BIG_TF32 = [("blocked", c(128, 128, 32, 8, 3, SWAP=2)), ("blocked", c(128, 256, 32, 8, 3, SWAP=2)),
            ("blocked", c(128, 128, 32, 4, 4, SWAP=2)), ("blocked", c(64, 256, 32, 8, 3, SWAP=2)),
            ("blocked", c(128, 128, 32, 8, 3, SWAP=1)), ("blocked", c(128, 256, 32, 8, 3, SWAP=1)),
            ("blocked", c(128, 128, 32, 8, 3)), ("tma-kmajor", c(128, 128, 32, 8, 4)),
            ("blocked-kmajor", c(128, 256, 32, 8, 3))]
SMALL_TF32 = [("blocked", c(16, 128, 64, 4, 4, SWAP=2)), ("blocked", c(32, 128, 64, 4, 4, SWAP=2)),
              ("blocked", c(64, 128, 32, 4, 4, SWAP=2)), ("blocked", c(32, 256, 32, 8, 3, SWAP=2)),
              ("blocked", c(64, 128, 32, 4, 4)),
              ("splitk", c(16, 128, 64, 4, 4, SWAP=2, WAVES=2)), ("splitk", c(32, 128, 64, 4, 4, SWAP=2, WAVES=2)),
              ("splitk", c(64, 128, 32, 4, 4, SWAP=2, WAVES=2)), ("splitk", c(16, 128, 64, 4, 4, WAVES=2)),
              ("splitk", c(64, 128, 32, 4, 4, WAVES=2))]
SMALL_16 = [("blocked", c(16, 128, 128, 4, 4, SWAP=1)), ("blocked", c(32, 128, 128, 4, 4, SWAP=1)),
            ("blocked", c(32, 256, 64, 8, 3, SWAP=1)), ("blocked", c(64, 128, 64, 4, 4, SWAP=1)),
            ("blocked", c(64, 128, 64, 4, 4)), ("blocked", c(64, 64, 64, 4, 4)),
            ("splitk", c(16, 128, 128, 4, 4, SWAP=1, WAVES=2)), ("splitk", c(32, 128, 128, 4, 4, SWAP=1, WAVES=2)),
            ("splitk", c(64, 128, 64, 4, 4, SWAP=1, WAVES=2)), ("splitk", c(16, 64, 256, 4, 3, WAVES=4)),
            ("splitk", c(64, 128, 64, 4, 4, WAVES=2)), ("splitk", c(128, 128, 64, 8, 3, WAVES=2))]
TINY_LONGK = [("splitk", c(128, 128, 64, 8, 3, SPLIT_K=s)) for s in (16, 32, 64)] + \
             [("splitk", c(64, 128, 64, 4, 4, SPLIT_K=s)) for s in (32, 64)] + \
             [("splitk", c(128, 128, 64, 4, 4, SPLIT_K=s, SWAP=1)) for s in (32, 64)] + \
             [("splitk", c(128, 64, 64, 4, 4, SPLIT_K=s)) for s in (32, 64)]
TALL_LONGK = [("blocked", c(64, 128, 64, 4, 4)), ("blocked", c(128, 128, 64, 8, 3)), ("blocked", c(64, 64, 64, 4, 4)),
              ("splitk", c(128, 128, 64, 8, 3, SPLIT_K=2)), ("splitk", c(128, 128, 64, 8, 3, SPLIT_K=4)),
              ("splitk", c(64, 128, 64, 4, 4, SPLIT_K=2))]
SHORTK = [("blocked", c(128, 256, 64, 8, 2)), ("blocked", c(256, 128, 64, 8, 2)), ("blocked", c(128, 128, 64, 4, 2)),
          ("tma", None), ("blocked", c(128, 256, 64, 8, 3))]


def _tf32(cands):   # a 16-bit candidate list at tf32's BLOCK_K
    return [(v, None if cfg is None else {**cfg, "BLOCK_K": cfg["BLOCK_K"] // 2}) for v, cfg in cands]


SMALL_TF32_B = [("blocked", c(256, 64, 32, 4, 3, SWAP=2)), ("blocked", c(128, 64, 32, 4, 4, SWAP=2)),
                ("blocked", c(256, 128, 32, 8, 3, SWAP=2)), ("blocked", c(64, 128, 32, 4, 4, SWAP=2)),
                ("blocked-kmajor", c(64, 128, 32, 4, 4)), ("blocked-kmajor", c(128, 128, 32, 4, 4)),
                ("tma-copy", None), ("splitk", c(16, 128, 64, 4, 4, WAVES=2))]
HOST = {   # the second run: GPU and host time apart, on the small shapes
    (127, 8191, 127): {"bf16": TINY_LONGK[:5], "tf32": _tf32(TINY_LONGK[:5])},
    (1, 5120, 5120): {"bf16": SMALL_16[:2] + SMALL_16[4:6] + SMALL_16[9:], "tf32": SMALL_TF32[:2] + SMALL_TF32[8:]},
    (32, 13824, 5120): {"bf16": SMALL_16[:2] + SMALL_16[9:], "tf32": SMALL_TF32_B},
    (256, 5120, 13824): {"bf16": SMALL_16[3:5] + SMALL_16[10:], "tf32": SMALL_TF32_B},
    (256, 13824, 5120): {"tf32": SMALL_TF32_B},
    (4096, 4096, 4096): {"tf32": [("tma-kmajor", c(128, 128, 32, 8, 4)), ("tma-copy", None),
                                  ("blocked-kmajor", c(128, 256, 32, 8, 3))]},
}

POINTS = {   # (M, K, N) -> {precision: candidates}
    (1024, 1024, 1024): {"tf32": BIG_TF32},
    (2048, 2048, 2048): {"tf32": BIG_TF32},
    (4096, 4096, 4096): {"tf32": BIG_TF32},
    (8192, 8192, 8192): {"tf32": BIG_TF32},
    (3000, 2000, 4000): {"tf32": BIG_TF32, "bf16": [("blocked", c(128, 256, 64, 8, 3)), ("blocked", c(128, 128, 64, 4, 4)),
                                                  ("tma-copy", None), ("blocked", c(128, 128, 64, 8, 3))]},
    (4096, 5120, 5120): {"tf32": BIG_TF32},
    (128, 8192, 8192): {"tf32": SMALL_TF32 + BIG_TF32[:2], "bf16": SMALL_16},
    (8192, 8192, 128): {"tf32": _tf32(TALL_LONGK) + [("blocked", c(128, 128, 32, 4, 4, SWAP=2))], "bf16": TALL_LONGK},
    (8192, 128, 8192): {"tf32": _tf32(SHORTK) + [("blocked", c(128, 256, 32, 8, 2, SWAP=2))], "bf16": SHORTK},
    (127, 8191, 127): {"tf32": _tf32(TINY_LONGK), "bf16": TINY_LONGK},
    (1, 5120, 5120): {"tf32": SMALL_TF32, "bf16": SMALL_16},
    (1, 13824, 5120): {"bf16": SMALL_16},
    (32, 5120, 5120): {"tf32": SMALL_TF32, "bf16": SMALL_16},
    (32, 13824, 5120): {"tf32": SMALL_TF32, "bf16": SMALL_16},
    (256, 5120, 5120): {"tf32": SMALL_TF32},
    (256, 5120, 13824): {"tf32": SMALL_TF32, "bf16": SMALL_16},
    (256, 13824, 5120): {"tf32": SMALL_TF32, "bf16": SMALL_16},
}


def plan(only, host=False):
    return [(s, p, i, v, cfg) for s, per in (HOST if host else POINTS).items() for p, cands in per.items() if p in only
            for i, (v, cfg) in enumerate(cands)]


def inputs(torch, s, p, n, seed):
    m, k, nn = s
    dt = getattr(torch, PRECS[p][0])
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [(torch.randn(m, k, device="cuda", generator=g).to(dt), torch.randn(k, nn, device="cuda", generator=g).to(dt),
             torch.empty(m, nn, device="cuda", dtype=dt)) for _ in range(n)]


def run(launch, a, b, out, p, v, cfg):
    launch(a, b, out, precision=PRECS[p][1], variant=v, config=None if cfg is None else dict(cfg))


def worker(args):
    """Compile (launch once) this shard's candidates into the shared Triton cache."""
    import torch
    from tiledmm.kernels.block.matmul import launch

    def one(pt):
        s, p, i, v, cfg = pt
        run(launch, *inputs(torch, s, p, 1, 0)[0], p, v, cfg)

    compile_shard(plan(args.only, args.host), args, one, torch.cuda.synchronize)


def sass_of(torch, s, cfg, prec="tf32"):
    """SASS facts of the blocked kernel with ``cfg`` on shape s (compiled through Triton's own launch)."""
    from tiledmm.kernels.block.kernels import matmul_kernel
    a, b, out = inputs(torch, s, "tf32", 1, 3)[0]
    M, K = a.shape
    N = b.shape[1]
    meta = {k: v for k, v in cfg.items() if k not in ("num_warps", "num_stages")}
    tiles = math.ceil(M / cfg["BLOCK_M"]) * math.ceil(N / cfg["BLOCK_N"])
    ck = matmul_kernel[(tiles, 1)](a, b, out, M, N, K, 0, a.stride(0), a.stride(1), 0, b.stride(0), b.stride(1),
                                   0, out.stride(0), out.stride(1), 1.0, 0.0, PRECISION=prec, HAS_BETA=False,
                                   ALPHA_ONE=True, UPCAST=False, num_warps=cfg["num_warps"],
                                   num_stages=cfg["num_stages"], **meta)
    sass = ck.asm["sass"]
    ops = {}
    for o in re.findall(r"\b(HGMMA\.[\w.]+|LDS\.[\w.]+|LDS\b|STS\.[\w.]+|STS\b|LDSM\.[\w.]+|LDGSTS\.[\w.]+|"
                        r"WARPGROUP\.[\w.]+|BAR\.[\w.]+)", sass):
        ops[o] = ops.get(o, 0) + 1
    first = next((ln.strip() for ln in sass.splitlines() if "HGMMA" in ln), "")
    return {"regs": getattr(ck, "n_regs", None), "spills": getattr(ck, "n_spills", None),
            "shared": getattr(ck.metadata, "shared", None), "ops": ops, "first_hgmma": first[:160]}


def extras(torch, launch, time_calls):
    """Where split-K's host time goes (cProfile), whether its launches are direct, and the
    transposing copy's speed (torch's strided copy against tiledmm's tiled kernel)."""
    import cProfile
    import pstats
    from tiledmm.kernels.block import splitk
    from tiledmm.kernels.block.transpose import transpose_into
    a, b, o = inputs(torch, (127, 8191, 127), "bf16", 1, 5)[0]
    cfg = TINY_LONGK[3][1]
    for _ in range(5):
        run(launch, a, b, o, "bf16", "splitk", cfg)
    torch.cuda.synchronize()
    print("\n## split-K launches direct:", {str(k[0])[:60]: fk.direct for L in (splitk._main, splitk._reduce)
                                            for k, fk in L.kernels.items()})
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(300):
        run(launch, a, b, o, "bf16", "splitk", cfg)
    pr.disable()
    torch.cuda.synchronize()
    pstats.Stats(pr).sort_stats("tottime").print_stats(14)
    print("## transposing copy of B (K x N fp32 -> K-major), GB/s of read + write")
    for K, N in ((4096, 4096), (8192, 8192), (13824, 5120), (5120, 13824)):
        src = torch.randn(K, N, device="cuda")
        dst = torch.empty(N, K, device="cuda")
        t_torch = time_calls(lambda: dst.copy_(src.T))
        t_tile = time_calls(lambda: transpose_into(src, dst))
        assert torch.equal(dst, src.T), "transpose_into is wrong"
        gb = 2 * src.numel() * 4 / 1e9
        print(f"  {K}x{N}: torch copy {t_torch * 1e3:7.1f} us ({gb / t_torch * 1e3:6.0f} GB/s), "
              f"tiled kernel {t_tile * 1e3:7.1f} us ({gb / t_tile * 1e3:6.0f} GB/s)", flush=True)
        del src, dst


def main(args):
    import torch
    import triton
    from tiledmm.kernels.block.matmul import launch
    from tiledmm.timing import device_and_host, time_calls
    t0 = time.time()
    print(f"# block_probe {time.strftime('%Y-%m-%d %H:%M')} {torch.cuda.get_device_name()} torch {torch.__version__} "
          f"triton {triton.__version__}", flush=True)
    pts = plan(args.only, args.host)
    print(f"# {len(pts)} candidates", flush=True)
    precompile(__file__, args, ["--only", ",".join(args.only)] + (["--host"] if args.host else []),
               lambda m: print(m, flush=True))

    rows = []
    by = {}
    for s, p, i, v, cfg in pts:
        by.setdefault((s, p), []).append((i, v, cfg))
    for (s, p), cands in by.items():
        if time.time() - t0 > args.budget_s:
            print(f"# out of budget before {s} {p}", flush=True)
            break
        m, k, n = s
        flops = 2.0 * m * n * k
        sets = inputs(torch, s, p, 3, hash(s) % 997)
        torch.backends.cuda.matmul.allow_tf32 = p == "tf32"
        ref = sets[0][0].double() @ sets[0][1].double()
        t_cub = time_calls([lambda a=a, b=b, o=o: torch.matmul(a, b, out=o) for a, b, o in sets])
        best = None
        for i, v, cfg in cands:
            a, b, o = sets[0]
            try:
                o.fill_(float("nan"))
                run(launch, a, b, o, p, v, cfg)
                torch.cuda.synchronize()
                err = ((o.double() - ref).norm() / ref.norm()).item()
                if not err < TOL[p]:
                    print(f"FAIL {s} {p} {v} {cfg}: rel err {err:.3g}", flush=True)
                    continue
                calls = [lambda a=a, b=b, o=o: run(launch, a, b, o, p, v, cfg) for a, b, o in sets]
                if args.host:   # the GPU's time and the host's apart; ranked on the GPU's
                    t, t_host = device_and_host(calls)
                else:
                    t, t_host = time_calls(calls), float("nan")
            except Exception as e:  # noqa: BLE001
                print(f"ERROR {s} {p} {v} {cfg}: {type(e).__name__}: {str(e)[:160]}", flush=True)
                continue
            print(f"{str(s):20s} {p:5s} #{i:<2d} {v:14s} {flops / t / 1e9:7.1f} TFLOP/s x{t_cub / t:5.2f} "
                  f"({t * 1e3:8.1f} us, host {t_host * 1e3:6.1f}, cuBLAS {t_cub * 1e3:8.1f}) err {err:.1e} {cfg}", flush=True)
            if best is None or t < best[0]:
                best = (t, i, v, cfg)
        rows.append((s, p, t_cub, best, flops))
        del sets, ref
        torch.cuda.empty_cache()

    if args.host:
        extras(torch, launch, time_calls)
    print("\n## SASS of the swapped tf32 kernels (4096^3)")
    for cfg in (c(128, 128, 32, 8, 3, SWAP=2), c(128, 128, 32, 8, 3, SWAP=1), c(128, 128, 32, 8, 3)):
        try:
            print(cfg.get("SWAP", 0), sass_of(torch, (4096, 4096, 4096), cfg), flush=True)
        except Exception as e:  # noqa: BLE001
            print(cfg.get("SWAP", 0), f"{type(e).__name__}: {str(e)[:200]}", flush=True)

    print("\n## best candidate per shape (x = cuBLAS time / candidate time; same process)")
    print(f"{'shape (M,K,N)':20s} {'prec':5s} {'cuBLAS us':>10s} {'best us':>9s} {'x':>5s}  candidate")
    for s, p, t_cub, best, flops in rows:
        if best is None:
            print(f"{str(s):20s} {p:5s} {t_cub * 1e3:10.1f}  none passed")
            continue
        t, i, v, cfg = best
        print(f"{str(s):20s} {p:5s} {t_cub * 1e3:10.1f} {t * 1e3:9.1f} {t_cub / t:5.2f}  #{i} {v} {cfg}")
    print(f"# total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="tf32,bf16")
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--host", action="store_true", help="the small shapes, GPU and host time apart, + extras")
    add_args(ap, jobs=12, compile_s=150.0)
    a = ap.parse_args()
    a.only = a.only.split(",")
    (worker if a.worker else main)(a)
