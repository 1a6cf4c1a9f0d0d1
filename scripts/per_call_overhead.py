"""Per-call cost through tiledmm.matmul against torch.matmul on the GPU: (1) one repeated shape
(64^3, 256^3, 1024^3; float32 and bfloat16), host wall time per queued call
(tiledmm.timing.wall_us_per_call); (2) new M of seen shape classes: x @ W with W 4096 x 4096 and
M drawn at random from 1..2048, 600 calls, first and second pass, wall seconds; (3) which
launches the short path holds (class launches vs exact-signature ones).
Run on the device: PYTHONPATH=src python3 scripts/per_call_overhead.py [--quick]"""
import argparse
import random
import time

import torch

import tiledmm
from tiledmm import _adapter, api
from tiledmm.timing import wall_us_per_call


def repeated(dtype) -> None:
    for n in (64, 256, 1024):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        tiledmm.matmul(a, b)
        t = wall_us_per_call(lambda: tiledmm.matmul(a, b))
        ref = wall_us_per_call(lambda: torch.matmul(a, b))
        print(f"{str(dtype):15s} {n:5d}^3  tiledmm {t:7.2f} us  torch {ref:7.2f} us  diff {t - ref:+6.2f} us")


def random_m(dtype, calls: int) -> None:
    w = torch.randn(4096, 4096, device="cuda", dtype=dtype)
    rng = random.Random(0)
    ms = [rng.randint(1, 2048) for _ in range(calls)]
    xs = {m: torch.randn(m, 4096, device="cuda", dtype=dtype) for m in set(ms)}
    for name, f in (("tiledmm", tiledmm.matmul), ("torch", torch.matmul)):
        for p in (1, 2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for m in ms:
                f(xs[m], w)
            torch.cuda.synchronize()
            print(f"{str(dtype):15s} random M, {calls} calls, pass {p}: {name:8s} {time.perf_counter() - t0:8.3f} s")


def bound() -> None:
    for key, plan in api._fast_plans.items():
        entries = getattr(plan, "bound", {})
        cls = sum(e[0] is not None for e in entries.values())
        print(f"plan {key[2]}: {len(entries)} classes, {cls} class launches, "
              f"{len(entries) - cls} per-signature; direct launches {'on' if _adapter.triton_direct() else 'off'}"
              f" {_adapter.why_not_direct()}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="60 random-M calls instead of 600")
    args = ap.parse_args()
    for dtype in (torch.float32, torch.bfloat16):
        repeated(dtype)
        random_m(dtype, 60 if args.quick else 600)
    bound()


if __name__ == "__main__":
    main()
