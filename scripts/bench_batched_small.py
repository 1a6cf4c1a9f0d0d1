"""Batched small products (issue 24: >= 10,000 products up to 32x32x32, >= 0.90x torch.matmul):
tiledmm.matmul against torch.matmul on the GPU, every dtype.

    PYTHONPATH=src python3 scripts/bench_batched_small.py [--quick] [--sweep] [--no-blocked]

For each (batch, M, K, N) and kind -- float32 exact ('ieee', torch with TF32 off), tf32
(precision="tf32", torch with allow_tf32), bf16, fp16:
  check   ||out - ref||_max / ||ref||_max against a float64 product of the same (rounded) inputs,
          output poisoned with NaN first (every element must be written): tiledmm's default pick
          and the forced variant 'batched-small';
  time    tiledmm.timing.time_calls (CUDA events around many queued calls, inputs and outputs
          rotated over sets larger than L2, median of batches) of tiledmm.matmul(a, b, out=c) --
          the default pick (short path: a bound launch), forced variant='batched-small' and
          variant='blocked' (these go through the API's full path each call: host time may bound
          them) -- and torch.matmul(a, b, out=c).
ratio = torch ms / tiledmm ms (>= 1: tiledmm faster). --sweep: batch counts 2..2048 for the
forced batched-small against the forced blocked kernel (where MIN_BATCH should be).
A table is printed last.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import torch

import tiledmm
from tiledmm.kernels.block import batched_small as BS
from tiledmm.kernels.block import matmul as bm
from tiledmm.timing import time_calls

SHAPES = [(70000, 8, 16, 8), (10000, 32, 32, 32), (20000, 16, 16, 16), (50000, 4, 4, 4), (10000, 3, 29, 17)]
KINDS = [("fp32", torch.float32, "ieee", 1e-5), ("tf32", torch.float32, "tf32", 2e-3),
         ("bf16", torch.bfloat16, None, 1.5e-2), ("fp16", torch.float16, None, 2e-3)]
L2_BYTES = 50 << 20
SWEEP = [2, 8, 32, 128, 512, 2048]


def sets(batch, M, K, N, dtype, seed=0) -> list[tuple]:
    """(a, b, c) input sets, together larger than twice the L2 (at most 32)."""
    per = batch * (M * K + K * N + M * N) * torch.tensor([], dtype=dtype).element_size()
    n = min(32, max(2, math.ceil(2 * L2_BYTES / per)))
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [(torch.randn((batch, M, K), device="cuda", generator=g).to(dtype),
             torch.randn((batch, K, N), device="cuda", generator=g).to(dtype),
             torch.empty((batch, M, N), device="cuda", dtype=dtype)) for _ in range(n)]


def call(precision, **opts):
    kw = dict(opts)
    if precision:
        kw["precision"] = precision
    return lambda a, b, c: tiledmm.matmul(a, b, out=c, **kw)


def check(fn, a, b, c) -> float:
    c.fill_(float("nan"))
    fn(a, b, c)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    return ((c.double() - ref).abs().max() / ref.abs().max()).item()


def timed(fn, operands) -> float:
    return time_calls([lambda a=a, b=b, c=c: fn(a, b, c) for a, b, c in operands])


def picked(a, b, c, precision) -> str:
    key = bm.plan_key(a, b, c, precision or "none", 1.0, 0.0)
    ch = bm.choices().get(key)
    return ch["variant"] if ch else "?"


def run_case(shape, kind, blocked: bool) -> dict:
    name, dtype, precision, tol = kind
    batch, M, K, N = shape
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    ops = sets(batch, M, K, N, dtype)
    a, b, c = ops[0]
    row = {"shape": f"{batch}x{M}x{K}x{N}", "kind": name}
    ways = {"default": call(precision), "forced": call(precision, kernel="triton", variant=BS.NAME)}
    if blocked:
        ways["blocked"] = call(precision, kernel="triton", variant="blocked")
    torch_fn = lambda a, b, c: torch.matmul(a, b, out=c)   # noqa: E731
    ok = True
    for way, fn in ways.items():
        try:
            err = check(fn, a, b, c)
        except Exception as e:  # noqa: BLE001  (a compile or launch failure is a result here)
            row[way] = None
            row[way + "_err"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
            ok = False
            continue
        row[way + "_err"] = err
        if not err <= tol:
            ok = False
        if way == "default":
            row["pick"] = picked(a, b, c, precision)
        row[way] = timed(fn, ops)
    row["torch_err"] = check(torch_fn, a, b, c)
    row["torch"] = timed(torch_fn, ops)
    row["ok"] = ok
    torch.backends.cuda.matmul.allow_tf32 = False
    return row


def sweep(kinds) -> list[str]:
    out = []
    for name, dtype, precision, _ in kinds:
        for (M, K, N) in [(8, 16, 8), (32, 32, 32)]:
            for batch in SWEEP:
                ops = sets(batch, M, K, N, dtype)
                t = {}
                for v in (BS.NAME, "blocked"):
                    fn = call(precision, kernel="triton", variant=v)
                    fn(*ops[0])
                    t[v] = timed(fn, ops)
                out.append(f"sweep {name:4s} {batch:6d}x{M}x{K}x{N}: batched-small {t[BS.NAME] * 1e3:8.1f} us   "
                           f"blocked {t['blocked'] * 1e3:8.1f} us")
                print(out[-1], flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="first two shapes only")
    ap.add_argument("--sweep", action="store_true", help="also the batch-count sweep (MIN_BATCH)")
    ap.add_argument("--no-blocked", action="store_true", help="skip the forced blocked kernel")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  tiledmm batched-small "
          f"(MIN_BATCH {BS.MIN_BATCH}, MAX_DIM {BS.MAX_DIM})", flush=True)
    t0 = time.time()
    rows = []
    for shape in SHAPES[:2] if args.quick else SHAPES:
        for kind in KINDS:
            r = run_case(shape, kind, not args.no_blocked)
            rows.append(r)
            print({k: (round(v, 5) if isinstance(v, float) else v) for k, v in r.items()}, flush=True)
    sw = sweep(KINDS[::2]) if args.sweep else []

    def ms(x):   # a time, None (failed) or "-" (not run)
        return f"{x * 1e3:8.1f}" if isinstance(x, float) else ("    fail" if x is None else "       -")

    def ratio(x, t):
        return f"{t / x:6.2f}" if isinstance(x, float) else "  -   "

    print(f"\n# {time.time() - t0:.0f} s; us per call (median); ratio = torch / tiledmm; errors: max rel vs float64")
    print(f"{'shape':>18s} {'kind':4s} {'pick':>14s} {'default':>8s} {'forced':>8s} {'blocked':>8s} {'torch':>8s} "
          f"{'ratio':>6s} {'forced':>6s}  errors (default, forced, torch)  ok")
    for r in rows:
        errs = ", ".join(f"{r.get(k + '_err'):.1e}" if isinstance(r.get(k + "_err"), float) else str(r.get(k + "_err"))
                         for k in ("default", "forced", "torch"))
        print(f"{r['shape']:>18s} {r['kind']:4s} {r.get('pick', '-'):>14s} {ms(r.get('default'))} "
              f"{ms(r.get('forced'))} {ms(r.get('blocked', '-'))} {ms(r['torch'])} {ratio(r.get('default'), r['torch'])} "
              f"{ratio(r.get('forced'), r['torch'])}  {errs}  {'ok' if r['ok'] else 'FAIL'}")
    for line in sw:
        print(line)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
