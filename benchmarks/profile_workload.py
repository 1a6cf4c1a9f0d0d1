"""Where the time of a workload goes: the first call, a GPT-2 training step, a fused Linear (GPU only).

  first   the first call of a never-seen shape class in a fresh process (empty tiledmm cache,
          Triton's cache warmed by an earlier process): cProfile's top functions by cumulative time
  gpt2    one GPT-2-small training step (transformers' GPT2LMHeadModel, bf16, random weights) under
          torch.profiler, torch eager and under tiledmm.enable(): GPU kernels by total time, host
          operators by self CPU time, and the step's host (enqueue) time against its GPU time
  linear  tiledmm.nn.functional.linear(x, W, b, "gelu") forward and forward + backward under
          torch.profiler: which kernels ran and how long

  PYTHONPATH=src python3 benchmarks/profile_workload.py --parts first,gpt2,linear --out $OUT

Prints short tables; --out keeps the profilers' full tables (text).
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _first_child(dtype: str, n: int) -> None:
    """cProfile of the first call of 1536^3 in this fresh process; with TILEDMM_PROFILE_NEW_CLASS=1, of a
    never-seen class after that call instead (the process already warm)."""
    import torch
    import tiledmm
    dt = getattr(torch, dtype)
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    if os.environ.get("TILEDMM_PROFILE_NEW_CLASS"):
        tiledmm.matmul(a, b)
        a = torch.randn(n // 2 + 7, 2 * n + 5, device="cuda", dtype=dt)
        b = torch.randn(2 * n + 5, n, device="cuda", dtype=dt)
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    c = tiledmm.matmul(a, b)
    torch.cuda.synchronize()
    prof.disable()
    dt_s = time.perf_counter() - t
    ref = a.double() @ b.double()
    err = ((c.double() - ref).norm() / ref.norm()).item()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(90)
    what = "a new class in a warm process" if os.environ.get("TILEDMM_PROFILE_NEW_CLASS") else f"{n}^3"
    print(f"FIRST {dtype} {what}: {dt_s:.3f} s (profiled), rel err {err:.1e}")
    print("\n".join(line for line in s.getvalue().splitlines() if line.strip())[:9000])


def part_first(args, out: Path | None) -> list[str]:
    rows = []
    triton_cache = tempfile.mkdtemp(prefix="triton-cache-")
    for dtype in ("bfloat16", "float32"):
        for label in ("warm-up", "profiled", "new-class"):
            env = dict(os.environ, TILEDMM_CACHE_DIR=tempfile.mkdtemp(prefix="tiledmm-cache-"),
                       TRITON_CACHE_DIR=triton_cache, TILEDMM_QUIET="1")
            if label != "profiled":
                env["TILEDMM_PROFILE_NEW_CLASS"] = "1"    # the warm-up compiles both classes
            env.pop("TILEDMM_TUNE", None)
            r = subprocess.run([sys.executable, __file__, "--child-first", dtype, str(args.n)], env=env,
                               capture_output=True, text=True, timeout=300)
            head = next((x for x in r.stdout.splitlines() if x.startswith("FIRST")), r.stderr[-500:])
            rows.append(f"{label:9s} {head}")
            if label != "warm-up":
                text = r.stdout
                if out:
                    (out / f"first_{dtype}_{label}.txt").write_text(text + r.stderr)
                print(text[:3000])
    return rows


def _gpt2(args, torch):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=args.layers, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg).to("cuda", torch.bfloat16)


def _profile(torch, step, label: str, out: Path | None) -> str:
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    step()
    host = time.perf_counter() - t
    torch.cuda.synchronize()
    wall = time.perf_counter() - t
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        step()
        torch.cuda.synchronize()
    ka = p.key_averages()
    gpu_us = sum(e.self_device_time_total for e in ka if e.self_device_time_total) if hasattr(ka[0], "self_device_time_total") \
        else sum(e.self_cuda_time_total for e in ka)
    by_gpu = ka.table(sort_by="self_cuda_time_total", row_limit=18, max_name_column_width=60)
    by_cpu = ka.table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=60)
    if out:
        (out / f"profile_{label}.txt").write_text(by_gpu + "\n\n" + by_cpu)
    print(f"== {label}: by GPU time\n{by_gpu[:5000]}\n== {label}: by CPU self time\n{by_cpu[:4000]}")
    return f"{label:22s} host enqueue {1e3 * host:8.2f} ms  wall {1e3 * wall:8.2f} ms  GPU kernels {gpu_us / 1e3:8.2f} ms"


def part_gpt2(args, out: Path | None) -> list[str]:
    import copy
    import torch
    import tiledmm
    base = _gpt2(args, torch)
    ids = torch.randint(0, 50257, (args.batch, 1024), device="cuda")
    rows = []
    for on in (False, True):
        model = copy.deepcopy(base)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        mode = tiledmm.ops.enable(report=True) if on else contextlib.nullcontext()

        def step(model=model, opt=opt, on=on):
            with tiledmm.ops.enable() if on else contextlib.nullcontext():
                loss = model(ids, labels=ids).loss
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        rows.append(_profile(torch, step, "gpt2-tiledmm" if on else "gpt2-torch", out))
        if on:
            with mode as m:
                model(ids, labels=ids).loss.backward()
            rows.append(f"routing: {m.summary()}")
    return rows


def part_linear(args, out: Path | None) -> list[str]:
    import torch
    import torch.nn.functional as F
    from tiledmm.nn.functional import linear
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    W = (torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16) / 64).requires_grad_()
    b = torch.randn(16384, device="cuda", dtype=torch.bfloat16).requires_grad_()
    gy = torch.randn(8192, 16384, device="cuda", dtype=torch.bfloat16)
    xg = x.clone().requires_grad_()
    rows = []
    with torch.no_grad():
        rows.append(_profile(torch, lambda: linear(x, W, b, "gelu"), "linear-fwd-tiledmm", out))
        rows.append(_profile(torch, lambda: F.gelu(F.linear(x, W, b)), "linear-fwd-torch", out))
    rows.append(_profile(torch, lambda: linear(xg, W, b, "gelu").backward(gy), "linear-fb-tiledmm", out))
    rows.append(_profile(torch, lambda: F.gelu(F.linear(xg, W, b)).backward(gy), "linear-fb-torch", out))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="first,gpt2,linear")
    ap.add_argument("--n", type=int, default=1536, help="first: the square size")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out", default=None)
    ap.add_argument("--child-first", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_first:
        _first_child(args.child_first[0], int(args.child_first[1]))
        return 0
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    rows = []
    for part in args.parts.split(","):
        try:
            rows += {"first": part_first, "gpt2": part_gpt2, "linear": part_linear}[part](args, out)
        except Exception as e:   # noqa: BLE001  a diagnostic: report and go on to the next part
            rows.append(f"{part}: failed: {type(e).__name__}: {str(e)[:300]}")
    from _common import environment, header
    print("\n".join(["", header(environment()), "== summary"] + rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
