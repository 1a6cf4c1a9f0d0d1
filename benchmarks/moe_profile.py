"""Where the MoE experts block's time goes: each grouped product of its forward and backward timed alone
(tiledmm.grouped_matmul against torch._grouped_mm, same operands and layouts), and the whole block's GPU
kernels by torch.profiler (top entries by CUDA time). One GPU; a table last.

    PYTHONPATH=src python3 benchmarks/moe_profile.py
"""
from __future__ import annotations

import sys

import torch

import tiledmm
from tiledmm.timing import time_calls

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/scripts")
from bench_grouped import moe_block, moe_setup  # noqa: E402


def main() -> None:
    x, token, offs, weight, params = moe_setup()
    xs = x.detach()[token]
    wg = params[0].detach()
    T, d = xs.shape
    H = wg.shape[1]
    gy = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    cases = {       # (a, b): the MoE block's three product layouts of the gate projection
        "forward  x (T,d) @ W^T (G,d,H)": (xs, wg.mT),
        "dX       dy (T,H) @ W (G,H,d)": (gy, wg),
        "dW       x^T (d,T) @ dy (T,H), K grouped": (xs.mT, gy),
    }
    rows = []
    for name, (a, b) in cases.items():
        t_ours = time_calls(lambda: tiledmm.grouped_matmul(a, b, offs), batches=5, batch_ms=20.0)
        t_torch = time_calls(lambda: torch._grouped_mm(a, b, offs=offs), batches=5, batch_ms=20.0)
        flop = 2 * T * d * H
        rows.append((name, t_ours, t_torch, flop / t_ours / 1e9, flop / t_torch / 1e9))
    gyb = torch.randn_like(x)
    for label, mm in (("torch", lambda a, b, o: torch._grouped_mm(a, b, offs=o)),
                      ("tiledmm", lambda a, b, o: tiledmm.grouped_matmul(a, b, o))):
        def step():
            for t in (x, *params):
                t.grad = None
            moe_block(x, token, offs, weight, params, mm, False).backward(gyb)
        step()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        print(f"\n== MoE block forward + backward, {label}: GPU kernels by CUDA time")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60))
    print("\n== each product alone (bf16; ms; TFLOP/s)")
    print(f"{'product':<42} {'tiledmm':>8} {'torch':>8} {'TF ours':>8} {'TF torch':>8} {'x torch':>8}")
    for name, a_ms, t_ms, tf_a, tf_t in rows:
        print(f"{name:<42} {a_ms:8.3f} {t_ms:8.3f} {tf_a:8.0f} {tf_t:8.0f} {t_ms / a_ms:8.2f}")


if __name__ == "__main__":
    main()
