"""How long a numba launch takes on the host, and what CUDA events around one launch measure when
the GPU was idle before it, against events around a batch queued behind a long kernel (the GPU's own
time). Rung 10 at 1024^3, two shapes. Run on the device: PYTHONPATH=src python3 scripts/launch_overhead.py"""
import statistics
import time

import torch

import tiledmm
from tiledmm.harness import poisoned_like, random_inputs

n = 1024
a, b = random_inputs((n, n), (n, n), "float32", seed=0)
out = poisoned_like(a, (n, n))
for cfg in ["64x64x32-w32x32-t8x4", "128x128x32-w32x64-t8x8"]:
    def L(cfg=cfg):
        tiledmm.matmul(a, b, kernel="autotuned", out=out, config=cfg)
    for _ in range(20):
        L()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        L()
    host = (time.perf_counter() - t0) / 200 * 1e6
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / 200 * 1e3
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    # events around single launches, the GPU idle before each
    per = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        L()
        e.record()
        torch.cuda.synchronize()
        per.append(s.elapsed_time(e))
    # a busy queue: a long kernel first, then 50 launches between two events
    torch.cuda._sleep(50_000_000)
    e0.record()
    for _ in range(50):
        L()
    e1.record()
    torch.cuda.synchronize()
    print(f"{cfg}: host time per launch call {host:.0f} us; wall per launch {wall:.3f} ms; "
          f"per-launch events median {statistics.median(per):.3f} ms; queued batch {e0.elapsed_time(e1)/50:.3f} ms")
