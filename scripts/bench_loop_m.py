"""Where the random-M loop's time goes: per M, tiledmm against torch.matmul (issue 22's loop).

The loop of ``bench_dispatch.py --parts loop`` (600 calls ``x[:m] @ W``, W K x K, M random in
1..2048) reuses one bound launch per shape class (log2 bucket of M): the choice made for the first
M of the class serves every later M in it. This script runs that loop once (so each class is bound
as the loop binds it), then times, per M of a grid, the same call queued back to back
(``timing.time_calls``, one operand set, as the loop) three ways:

* torch: ``torch.matmul(x[:m], W)``;
* class: ``tiledmm.matmul`` on the loop's bound classes (what the loop's second pass gets);
* exact: the plans dropped and the call resolved afresh at this very M (what a per-M choice gets).

It prints per M the ms, the ratios and both choices, then the loop's own two passes. GPU only.

    PYTHONPATH=src python scripts/bench_loop_m.py [--dtype bfloat16 --dtype float32] [--k 4096]
"""
from __future__ import annotations

import argparse
import json
import time

GRID = (1, 3, 8, 16, 17, 32, 48, 64, 65, 96, 128, 160, 192, 256, 300, 384, 448, 512, 600, 700, 768, 896,
        1024, 1100, 1280, 1408, 1536, 1664, 1792, 1920, 2048)


def choice_label(ch: dict) -> str:
    """One recorded choice (``matmul.choices()``' value) as "variant:BMxBNxBK:extras:source"; "+size" after
    the source where the variant takes its own model's config for each call's size (the one shown is the
    class's first call's)."""
    cfg = ch.get("config") or {}
    short = "x".join(str(cfg[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K") if k in cfg)
    extra = ",".join(f"{k}{v}" for k, v in cfg.items() if k in ("SPLIT_K", "TAIL", "num_stages", "num_warps"))
    return f"{ch.get('variant')}:{short}:{extra}:{ch.get('source')}{'+size' if ch.get('by_shape') else ''}"


def _choice_names(dispatcher) -> dict:
    """Plan key -> ``choice_label`` of every resolved plan."""
    return {key: choice_label(ch) for key, ch in dispatcher.choices().items()}


def run(dtype: str, k: int, top: int, calls: int, seed: int) -> list[dict]:
    import numpy as np
    import torch

    import tiledmm
    from tiledmm import api
    from tiledmm.kernels.block import matmul as dispatcher
    from tiledmm.registry import shape_class
    from tiledmm.timing import time_calls
    dt = getattr(torch, dtype)
    dev = "cuda"
    torch.manual_seed(seed)
    x, w = torch.randn(top, k, device=dev, dtype=dt), torch.randn(k, k, device=dev, dtype=dt)
    ms = [int(m) for m in np.random.default_rng(seed).integers(1, top + 1, calls)]

    def one_pass(f) -> float:
        torch.cuda.synchronize()
        t = time.perf_counter()
        for m in ms:
            f(x[:m], w)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    loop = dict(torch1=one_pass(torch.matmul), torch2=one_pass(torch.matmul))
    loop["tiledmm1"] = one_pass(tiledmm.matmul)
    loop["tiledmm2"] = one_pass(tiledmm.matmul)
    by_class = {key[10]: name for key, name in _choice_names(dispatcher).items()}
    rows = []
    for m in GRID:
        if m > top:
            continue
        xm = x[:m]
        t_torch = time_calls(lambda: torch.matmul(xm, w))
        t_class = time_calls(lambda: tiledmm.matmul(xm, w))
        cls_choice = by_class.get(shape_class(m, k, k))
        api._fast_plans.clear()
        dispatcher._forget_plans()
        dispatcher.forget_choices()
        got = tiledmm.matmul(xm, w)
        ref = (xm.double() @ w.double())
        err = float((got.double() - ref).norm() / ref.norm())
        exact_choice = next(iter(_choice_names(dispatcher).values()), None)
        t_exact = time_calls(lambda: tiledmm.matmul(xm, w))
        rows.append(dict(dtype=dtype, m=m, n=k, k=k, torch_ms=t_torch, class_ms=t_class, exact_ms=t_exact,
                         class_ratio=t_torch / t_class, exact_ratio=t_torch / t_exact, rel_err=err,
                         class_choice=cls_choice, exact_choice=exact_choice))
        # the loop's classes again, for the next M (their plans were dropped)
        api._fast_plans.clear()
        dispatcher._forget_plans()
        dispatcher.forget_choices()
        for mm in ms:
            tiledmm.matmul(x[:mm], w)
        torch.cuda.synchronize()
    rows.append(dict(dtype=dtype, loop=loop, ratio1=loop["tiledmm1"] / loop["torch1"],
                     ratio2=loop["tiledmm2"] / loop["torch2"]))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", action="append", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--max-m", type=int, default=2048)
    ap.add_argument("--calls", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    rows = []
    for dtype in args.dtype or ["bfloat16", "float32"]:
        rows += run(dtype, args.k, args.max_m, args.calls, args.seed)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    for r in rows:
        if "loop" in r:
            lp = r["loop"]
            print(f"{r['dtype']} loop: torch {lp['torch1']:.4f}/{lp['torch2']:.4f} s, tiledmm {lp['tiledmm1']:.4f}/"
                  f"{lp['tiledmm2']:.4f} s: pass 1 {r['ratio1']:.2f}x, pass 2 {r['ratio2']:.2f}x torch")
            continue
        print(f"{r['dtype']:>9} M={r['m']:5d} torch {r['torch_ms']*1e3:8.1f} us  class {r['class_ms']*1e3:8.1f} "
              f"({r['class_ratio']:.2f})  exact {r['exact_ms']*1e3:8.1f} ({r['exact_ratio']:.2f})  err {r['rel_err']:.1e}"
              f"  | {r['class_choice']}  | {r['exact_choice']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
