#!/usr/bin/env python3
"""Per-call cost: what a call of ``tiledmm.matmul`` (and of tiledmm's PyTorch layers) costs on the host, beside
``torch.matmul`` in the same process. Every result is checked against float64 first (benchmarks/_common.py);
times come from ``tiledmm.timing``.

    PYTHONPATH=src python3 benchmarks/call_cost.py [--parts steady,kinds,graph,ops,profile] [--out DIR]
    PYTHONPATH=src python3 benchmarks/call_cost.py --parts ops --stub      # GPU or CPU: the layers' own cost

Parts:
  steady   torch tensors n x n x n (64, 256, 1024, 2048), float32 (TF32 off on both sides) and bfloat16, the
           steady state (a repeat call takes the short path): host wall time per call of 200 queued calls
           (``wall_us_per_call``), tiledmm, torch and the difference (target: within torch + 2 us); GPU time
           per call over 4 rotated input sets (``time_calls``); the GPU's and the host's share apart
           (``device_and_host``: a call whose host time exceeds its GPU time is launch-bound)
  kinds    CuPy and numba device arrays, 256^3 float32, against torch tensors of the same product (skipped,
           and said so, without CuPy)
  graph    small products queued (1000^3 bf16, 16x4096x4096 bf16, 1024^3 fp32): GPU time per call x torch,
           and the same calls captured in a CUDA graph and replayed (the device's time alone)
  ops      the PyTorch layers: ``tiledmm.enable()``'s routing (addmm with a bias, F.linear, matmul; forward,
           forward recording a graph, forward + backward), ``tiledmm.nn.functional.linear`` with gelu, and a
           torch op the mode does not route, each next to torch eager. With ``--stub`` (forced without a GPU)
           the GEMM itself is replaced by a stub that writes zeros, so what is timed is tiledmm's Python
           layers (plus one zero fill of a toy tensor, about a microsecond); stubbed results are not checked
  profile  where the host time of a steady call goes: cProfile of 2000 calls (bf16 256^3), top functions

--emulate: toy sizes in emulation (the steady and ops parts; numbers say nothing about a GPU). A table per
part is printed last; --out DIR writes call_cost.json.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys

from _common import (check, device_and_host, environment, header, log, table, time_calls, wall_us_per_call,
                     write_json)

os.environ.setdefault("TILEDMM_QUIET", "1")
PARTS = ("steady", "kinds", "graph", "ops", "profile")
GPU_ONLY = ("kinds", "graph", "profile")


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", default="steady,kinds,graph,ops", help=f"comma-separated, of {PARTS}")
    p.add_argument("--emulate", action="store_true", help="toy sizes in emulation (no GPU; not speed)")
    p.add_argument("--stub", action="store_true", help="ops: replace the GEMM by a stub (forced without a GPU)")
    p.add_argument("--unfused", action="store_true", help="ops with --stub: the fused epilogue is refused")
    p.add_argument("--calls", type=int, default=200, help="calls per timed repeat (wall time)")
    p.add_argument("--out", default=None, help="folder for call_cost.json")
    a = p.parse_args(argv)
    bad = [x for x in a.parts.split(",") if x not in PARTS]
    if bad:
        p.error(f"unknown part {bad[0]!r}; choose from {list(PARTS)}")
    if a.emulate:
        os.environ["TILEDMM_EMULATE"] = "1"
    return a


def _dt(torch, dtype: str):
    return getattr(torch, dtype)


def _checked(torch, tiledmm, a, b, dtype: str) -> float:
    """tiledmm.matmul into a NaN-poisoned out, against float64."""
    out = torch.full((a.shape[0], b.shape[1]), float("nan"), device=a.device, dtype=a.dtype)
    tiledmm.matmul(a, b, out=out)
    return check(out, a, b, dtype)


# ---------------------------------------------------------------- steady state, array kinds, graphs

def part_steady(torch, tiledmm, dev: str, emulated: bool, calls: int) -> list[dict]:
    rows = []
    n_wall = 4 if emulated else calls
    for dtype in ("float32", "bfloat16"):
        for n in ((8, 16) if emulated else (64, 256, 1024, 2048)):
            sets = [(torch.randn(n, n, device=dev, dtype=_dt(torch, dtype)),
                     torch.randn(n, n, device=dev, dtype=_dt(torch, dtype))) for _ in range(4)]
            a, b = sets[0]
            err = _checked(torch, tiledmm, a, b, dtype)
            kw = dict(n=n_wall, warmup=max(2, n_wall // 10))
            wall_t = wall_us_per_call(lambda: torch.matmul(a, b), **kw)
            wall_m = wall_us_per_call(lambda: tiledmm.matmul(a, b), **kw)
            gpu_t = time_calls([lambda x=x, y=y: torch.matmul(x, y) for x, y in sets]) * 1e3
            gpu_m = time_calls([lambda x=x, y=y: tiledmm.matmul(x, y) for x, y in sets]) * 1e3
            (dt_, ht), (dm, hm) = (device_and_host([lambda x=x, y=y: f(x, y) for x, y in sets])
                                   for f in (torch.matmul, tiledmm.matmul))
            rows.append(dict(dtype=dtype, n=n, torch_wall_us=wall_t, tiledmm_wall_us=wall_m, wall_diff_us=wall_m - wall_t,
                             torch_gpu_us=gpu_t, tiledmm_gpu_us=gpu_m, torch_apart_us=[dt_ * 1e3, ht * 1e3],
                             tiledmm_apart_us=[dm * 1e3, hm * 1e3], rel_err=err))
            log(f"steady {dtype} {n}^3: wall torch {wall_t:.1f} us, tiledmm {wall_m:.1f} us")
    return rows


def part_kinds(torch, tiledmm, calls: int) -> list[dict]:
    try:
        import cupy
        from numba import cuda
    except Exception as e:  # noqa: BLE001  (CuPy is optional)
        log(f"kinds: skipped, no CuPy/numba arrays here ({type(e).__name__}: {e})"[:200])
        return []
    n = 256
    ta, tb = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    torch_us = wall_us_per_call(lambda: torch.matmul(ta, tb), n=calls)
    rows = [dict(kind="torch", n=n, tiledmm_wall_us=wall_us_per_call(lambda: tiledmm.matmul(ta, tb), n=calls),
                 torch_wall_us=torch_us, rel_err=_checked(torch, tiledmm, ta, tb, "float32"))]
    for kind, x, y, back in (("cupy", cupy.from_dlpack(ta), cupy.from_dlpack(tb), torch.from_dlpack),
                             ("numba", cuda.as_cuda_array(ta), cuda.as_cuda_array(tb),
                              lambda r: torch.as_tensor(r, device="cuda"))):
        for _ in range(3):                  # full path, bind, then the short path
            r = tiledmm.matmul(x, y)
        torch.cuda.synchronize()
        err = check(back(r), ta, tb, "float32")
        rows.append(dict(kind=kind, n=n, tiledmm_wall_us=wall_us_per_call(lambda x=x, y=y: tiledmm.matmul(x, y),
                                                                          n=calls),
                         torch_wall_us=torch_us, rel_err=err))
    return rows


def part_graph(torch, tiledmm) -> list[dict]:
    rows = []
    for (m, k, n), dtype in (((1000, 1000, 1000), "bfloat16"), ((16, 4096, 4096), "bfloat16"),
                             ((1024, 1024, 1024), "float32")):
        dt = _dt(torch, dtype)
        sets = [(torch.randn(m, k, device="cuda", dtype=dt), torch.randn(k, n, device="cuda", dtype=dt))
                for _ in range(4)]
        err = _checked(torch, tiledmm, *sets[0], dtype)
        t_torch = time_calls([lambda x=x, y=y: torch.matmul(x, y) for x, y in sets])
        t_tile = time_calls([lambda x=x, y=y: tiledmm.matmul(x, y) for x, y in sets])
        g, n_calls, side = torch.cuda.CUDAGraph(), 20, torch.cuda.Stream()
        with torch.cuda.stream(side):
            tiledmm.matmul(*sets[0])
            with torch.cuda.graph(g, stream=side):
                outs = [tiledmm.matmul(*sets[i % 4]) for i in range(n_calls)]
        g.replay()
        torch.cuda.synchronize()
        err = max(err, check(outs[-1], *sets[(n_calls - 1) % 4], dtype))    # the replayed graph's result too
        t_graph = time_calls(g.replay) / n_calls
        rows.append(dict(shape=[m, k, n], dtype=dtype, torch_us=t_torch * 1e3, tiledmm_us=t_tile * 1e3,
                         x_torch=t_torch / t_tile, graph_us=t_graph * 1e3, rel_err=err))
    return rows


def part_profile(torch, tiledmm) -> str:
    import cProfile
    import io
    import pstats
    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    _checked(torch, tiledmm, a, b, "bfloat16")
    tiledmm.matmul(a, b)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(2000):
        tiledmm.matmul(a, b)
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
    return s.getvalue()


# ---------------------------------------------------------------- the PyTorch layers

def install_stub(tiledmm, unfused: bool) -> None:
    """The lowest launches compute nothing: api.matmul returns zeros (in out, or new), _fused zeroes
    out and says whether it 'did' the call. Both are looked up at call time by the layers above."""
    from tiledmm import api
    from tiledmm.ops import _impl

    def matmul(a, b, *, out=None, **_):
        if out is not None:
            return out.zero_()
        sa, sb = a.shape, b.shape
        if len(sa) == 2 and len(sb) == 2:
            return a.new_zeros((sa[0], sb[1]))
        x, y = sa[:-2], sb[:-2]
        n = max(len(x), len(y))
        x, y = (1,) * (n - len(x)) + tuple(x), (1,) * (n - len(y)) + tuple(y)
        batch = tuple(q if p == 1 else p for p, q in zip(x, y))
        return a.new_zeros(batch + tuple(sa[-2:-1]) + (tuple(sb[-1:]) if len(sb) > 1 else ()))

    api.matmul = matmul
    tiledmm.matmul = matmul
    _impl._fused = lambda a, b, out, *args: False if unfused else out.zero_() is out


def op_cases(torch, dev: str, dtype: str, m: int, k: int, n: int) -> list:
    """(name, tiledmm call under enable() or tiledmm.nn, the same in torch eager)."""
    import torch.nn.functional as F
    from tiledmm.nn.functional import linear as tl
    dt = _dt(torch, dtype)
    g = torch.Generator(device="cpu").manual_seed(0)

    def r(*s, grad=False):
        return (torch.randn(*s, generator=g) / s[-1] ** 0.5).to(device=dev, dtype=dt).requires_grad_(grad)
    x, w, bias = r(m, k), r(n, k), r(n)
    wt = w.detach().t().contiguous()
    xg, wg, bg = r(m, k, grad=True), r(n, k, grad=True), r(n, grad=True)
    gy = r(m, n)

    def enabled(f):
        f.under_mode = True          # timed inside one ``with tiledmm.enable():``
        return f

    def fb(f):
        def call():
            f().backward(gy)
        return call
    return [
        ("addmm(bias, x, W) fwd", enabled(lambda: torch.addmm(bias, x, wt)), lambda: torch.addmm(bias, x, wt)),
        ("F.linear(x, W, b) fwd", enabled(lambda: F.linear(x, w, bias)), lambda: F.linear(x, w, bias)),
        ("matmul(x, W) fwd", enabled(lambda: torch.matmul(x, wt)), lambda: torch.matmul(x, wt)),
        ("F.linear fwd (grad)", enabled(lambda: F.linear(xg, wg, bg)), lambda: F.linear(xg, wg, bg)),
        ("matmul fwd (grad)", enabled(lambda: torch.matmul(xg, wg.t())), lambda: torch.matmul(xg, wg.t())),
        ("F.linear fwd+bwd", enabled(fb(lambda: F.linear(xg, wg, bg))), fb(lambda: F.linear(xg, wg, bg))),
        ("addmm fwd+bwd", enabled(fb(lambda: torch.addmm(bg, xg, wg.t()))), fb(lambda: torch.addmm(bg, xg, wg.t()))),
        ("matmul fwd+bwd", enabled(fb(lambda: torch.matmul(xg, wg.t()))), fb(lambda: torch.matmul(xg, wg.t()))),
        ("nn.linear gelu fwd+bwd", fb(lambda: tl(xg, wg, bg, "gelu")), fb(lambda: F.gelu(F.linear(xg, wg, bg)))),
        ("torch.add (not routed)", enabled(lambda: torch.add(x, x)), lambda: torch.add(x, x)),
    ]


def part_ops(torch, tiledmm, dev: str, emulated: bool, stub: bool, unfused: bool, calls: int) -> dict:
    dtype = "float32" if emulated else "bfloat16"
    m, k, n = (8, 16, 16) if emulated else (64, 256, 256)
    if stub:
        install_stub(tiledmm, unfused)
    todo = op_cases(torch, dev, dtype, m, k, n)
    if not stub:                     # every forward's result equals torch's (bf16 tolerance)
        for name, ours, theirs in todo:
            if "bwd" in name:
                continue
            with tiledmm.enable() if getattr(ours, "under_mode", False) else contextlib.nullcontext():
                got = ours()
            want = theirs()
            torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2 * want.abs().max().item())
    rows = []
    for name, ours, theirs in todo:
        with tiledmm.enable() if getattr(ours, "under_mode", False) else contextlib.nullcontext():
            t = wall_us_per_call(ours, n=calls)
        rows.append(dict(case=name, tiledmm_us=t, torch_us=wall_us_per_call(theirs, n=calls)))
    what = ("stubbed GEMM (" + ("unfused" if unfused else "fused") + ")") if stub else "real kernels"
    return {"dtype": dtype, "x": [m, k], "W": [n, k], "gemm": what, "rows": rows}


# ---------------------------------------------------------------- main

def main(argv=None) -> int:
    a = parse(argv)
    import torch

    import tiledmm
    emulated = tiledmm.emulating()
    dev = "cpu" if emulated else "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False           # float32 is exact on both sides
    if emulated:
        torch.set_num_threads(1)        # toy CPU tensors: no OpenMP pool spinning against the timed thread
    parts = [p for p in PARTS if p in a.parts.split(",")]   # ops last: its stub replaces the GEMM
    env = environment()
    doc: dict = {"environment": env, "args": vars(a)}
    for part in parts:
        if emulated and part in GPU_ONLY:
            log(f"{part}: needs a GPU, skipped in emulation")
            continue
        if part == "steady":
            doc[part] = part_steady(torch, tiledmm, dev, emulated, a.calls)
        elif part == "kinds":
            doc[part] = part_kinds(torch, tiledmm, a.calls)
        elif part == "graph":
            doc[part] = part_graph(torch, tiledmm)
        elif part == "profile":
            doc[part] = part_profile(torch, tiledmm)
        elif part == "ops":
            doc[part] = part_ops(torch, tiledmm, dev, emulated, a.stub or emulated, a.unfused, a.calls)
    if a.out:
        log(f"wrote {write_json(os.path.join(a.out, 'call_cost.json'), doc)}")
    out = [header(env)]
    if doc.get("profile"):
        out.append("host time of 2000 steady calls (bf16 256^3), by function:\n" + doc["profile"])
    if doc.get("steady"):
        out.append(table(f"steady state, torch tensors: us per call (wall: {a.calls} queued calls; GPU: rotated "
                         "sets; apart: GPU / host)",
                         [("dtype", ""), ("n^3", "d"), ("torch wall", ".1f"), ("tiledmm wall", ".1f"),
                          ("diff", "+.1f"), ("torch GPU", ".1f"), ("tiledmm GPU", ".1f"), ("torch apart", ""),
                          ("tiledmm apart", ""), ("rel err", ".1e")],
                         [(r["dtype"], r["n"], r["torch_wall_us"], r["tiledmm_wall_us"], r["wall_diff_us"],
                           r["torch_gpu_us"], r["tiledmm_gpu_us"], "{:.1f} / {:.1f}".format(*r["torch_apart_us"]),
                           "{:.1f} / {:.1f}".format(*r["tiledmm_apart_us"]), r["rel_err"]) for r in doc["steady"]]))
    if doc.get("kinds"):
        out.append(table("array kinds, 256^3 float32: wall us per call",
                         [("kind", ""), ("tiledmm", ".1f"), ("torch (tensors)", ".1f"), ("rel err", ".1e")],
                         [(r["kind"], r["tiledmm_wall_us"], r["torch_wall_us"], r["rel_err"]) for r in doc["kinds"]]))
    if doc.get("graph"):
        out.append(table("small products, GPU us per call: queued, and replayed from a CUDA graph",
                         [("shape", ""), ("dtype", ""), ("torch", ".1f"), ("tiledmm", ".1f"), ("x torch", ".2f"),
                          ("tiledmm graph", ".1f"), ("rel err", ".1e")],
                         [("x".join(map(str, r["shape"])), r["dtype"], r["torch_us"], r["tiledmm_us"], r["x_torch"],
                           r["graph_us"], r["rel_err"]) for r in doc["graph"]]))
    if doc.get("ops"):
        o = doc["ops"]
        out.append(table(f"PyTorch layers, host us per call ({o['dtype']}, x {o['x'][0]}x{o['x'][1]}, "
                         f"W {o['W'][0]}x{o['W'][1]}, {o['gemm']})",
                         [("case", ""), ("tiledmm", ".1f"), ("torch", ".1f"), ("diff", "+.1f")],
                         [(r["case"], r["tiledmm_us"], r["torch_us"], r["tiledmm_us"] - r["torch_us"])
                          for r in o["rows"]]))
    print("\n\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
