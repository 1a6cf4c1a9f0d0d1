#!/usr/bin/env python3
"""Does the no-timing pick take the Gluon kernel where it pays, through ``tiledmm.matmul``?
(issue 24 item 4). H100 only; run on the GPU image:

    PYTHONPATH=src python3 scripts/bench_gluon_pick.py [--dtypes bf16,fp16,tf32] [--shapes 4096x4096x4096,...]
        [--suites llm,square,...] [--row-major-b]

Per shape (MxKxN, A row-major; tf32 with B column-major, the only tf32 layout gluon-ws takes) and
dtype, eager calls as a user makes them (default settings, TILEDMM_TUNE unset, a fresh tiledmm cache):
the default pick (which variant the plan bound), the same call forced to ``gluon-ws`` and to
``tma``, and ``torch.matmul``; each checked against float64 first, then timed with
``tiledmm.timing.time_calls`` (CUDA events around queued calls, inputs rotated, median of batches).
Prints ms and x torch per column, then each column's GPU and host microseconds per call apart
(``timing.device_and_host``): a column whose host time exceeds its GPU time is launch-bound; and the
wall time a call of the pick and of torch with a kept ``out=`` (the bench's way; ``timing.wall_us_per_call``);
and how the pick was chosen (``bench_loop_m.choice_label``: variant, tile, extras, source). ``--suites``: the bench
suites' 2-D shapes; ``--row-major-b``: tf32 with B as stored (the bench's layout), not K-major.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("TILEDMM_CACHE_DIR", tempfile.mkdtemp(prefix="tiledmm-gluon-pick-"))
os.environ.pop("TILEDMM_TUNE", None)

import torch  # noqa: E402

import tiledmm  # noqa: E402
from tiledmm import api, harness, timing  # noqa: E402
from tiledmm.kernels.block import shortpath  # noqa: E402
from tiledmm.kernels.block import matmul as bm  # noqa: E402
from tiledmm.kernels.block import variants as V  # noqa: E402
from bench_loop_m import choice_label  # noqa: E402  (scripts/, on sys.path when run as a script)

SHAPES = ["4096x4096x4096", "8192x8192x8192", "512x4096x14336", "512x4096x4096", "64x4096x4096",
          "1000x1000x1000", "5000x5000x5000", "5056x5056x5056"]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}


def _inputs(M, K, N, dtype, n, kmajor_tf32=True):
    sets = []
    for i in range(n):
        g = torch.Generator(device="cuda").manual_seed(i)
        a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
        b = torch.randn(K, N, device="cuda", generator=g).to(dtype)
        if dtype == torch.float32 and kmajor_tf32:
            b = b.t().contiguous().t()     # column-major B (K-major): wgmma's tf32 rule
        sets.append((a, b))
    return sets


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bf16,fp16,tf32")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--suites", default=None, help="the bench suites' 2-D shapes instead of --shapes (e.g. llm,square)")
    ap.add_argument("--row-major-b", action="store_true", help="tf32 with B row-major too (the bench's layout)")
    args = ap.parse_args()
    if args.suites:
        from tiledmm.bench import SUITES
        args.shapes = ",".join(dict.fromkeys(f"{m}x{k}x{n}" for s in args.suites.split(",")
                                             for (m, k, n, *rest) in SUITES[s] if not rest))
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("needs a Hopper GPU (sm_90)", file=sys.stderr)
        return 2
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    print(f"{'dtype':5} {'MxKxN':16} {'pick':16} {'pick ms':>9} {'x':>5} {'gluon ms':>9} {'x':>5} "
          f"{'tma ms':>9} {'x':>5} {'torch ms':>9}")
    for dname in args.dtypes.split(","):
        dtype = DTYPES[dname]
        prec = "tf32" if dname == "tf32" else None
        torch.backends.cuda.matmul.allow_tf32 = dname == "tf32"
        for s in args.shapes.split(","):
            M, K, N = map(int, s.split("x"))
            sets = _inputs(M, K, N, dtype, harness.rotation_for((M, K, N), str(dtype).replace("torch.", "")),
                           not args.row_major_b)
            a0, b0 = sets[0]
            ref = a0.double() @ b0.double()
            row, gpu = {}, {}
            for label, opts in (("pick", {}), ("gluon", {"variant": "gluon-ws"}),
                                ("tma", {"variant": "tma"})):
                def f(a, b, opts=opts):
                    return tiledmm.matmul(a, b, kernel="triton", precision=prec, **opts)
                try:
                    out = f(a0, b0)
                except tiledmm.TiledmmError as e:
                    row[label] = (None, str(e)[:40])
                    continue
                err = ((out.double() - ref).norm() / ref.norm()).item()
                if err > 2e-2:
                    print(f"WRONG {dname} {s} {label}: rel {err:.2e}")
                    return 1
                calls = [lambda a=a, b=b: f(a, b) for a, b in sets]
                row[label] = (timing.time_calls(calls), None)
                gpu[label] = timing.device_and_host(calls)
            c = torch.empty(M, N, device="cuda", dtype=dtype)
            plan = bm._plans.get(bm.plan_key(a0, b0, c, prec or "none", 1.0, 0.0))
            picked = {v.launch: v.name for v in V.ALL}.get(getattr(plan, "func", None), "?")
            ch = bm.choices().get(bm.plan_key(a0, b0, c, prec or "none", 1.0, 0.0), {})
            how_chosen = choice_label(ch)
            t_torch = timing.time_calls([lambda a=a, b=b: torch.matmul(a, b) for a, b in sets])
            cells = []
            for label in ("pick", "gluon", "tma"):
                ms, why = row[label]
                cells.append(f"{ms:9.4f} {t_torch / ms:5.2f}" if ms else f"{'n/a':>9} {'':>5}")
            t_gpu, t_host = timing.device_and_host([lambda a=a, b=b: torch.matmul(a, b) for a, b in sets])
            # the short path's launch for this call's class: a class launch (any size of the class), an
            # exact-signature one, or the variant's own launch each call
            key = shortpath._class_key(a0.device.index, a0.shape, b0.shape, a0.stride(), b0.stride(), c.stride(),
                                       a0.data_ptr(), b0.data_ptr(), c.data_ptr(), max(1, 16 // a0.element_size()),
                                       1.0, 0.0)
            hits = [plan.bound.get(key) for plan in api._fast_plans.values() if hasattr(plan, "bound")]
            hit = next((h for h in hits if h is not None), None)
            how = "none" if hit is None else (type(hit[0]).__name__ if hit[0] is not None else
                                              f"exact:{sum(1 for g in hit[2].values() if g)}/{len(hit[2])}")
            o = torch.empty(M, N, device="cuda", dtype=dtype)      # the bench's way: a kept output, out=
            w_pick = timing.wall_us_per_call(lambda: tiledmm.matmul(a0, b0, kernel="triton", precision=prec, out=o))
            w_torch = timing.wall_us_per_call(lambda: torch.matmul(a0, b0, out=o))
            split = " ".join(f"{label}:{1e3 * gpu[label][0]:.1f}/{1e3 * gpu[label][1]:.1f}" for label in gpu)
            print(f"{dname:5} {s:16} {picked:16} {cells[0]} {cells[1]} {cells[2]} {t_torch:9.4f}", flush=True)
            print(f"      chosen {how_chosen}; GPU/host us per call: {split} torch:{1e3 * t_gpu:.1f}/{1e3 * t_host:.1f}; short path: {how}; "
                  f"wall us a call with out=: pick {w_pick:.1f}, torch {w_torch:.1f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
