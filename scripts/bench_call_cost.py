"""Per-call cost of tiledmm.matmul against torch.matmul (written for issue 10), the small-problem
ratio, the first call of a known shape class in a fresh process. (Issue 22's targets -- a never-seen
class, the random-M loop, default vs timed picks -- are scripts/bench_dispatch.py's.)

    PYTHONPATH=src python3 scripts/bench_call_cost.py [--quick]

Every timed configuration is checked against float64 first (fresh random inputs,
NaN-poisoned output). Wall time per call: 200 queued calls, synchronised at the end
(timing.wall_us_per_call); GPU time: timing.time_calls (events around queued batches,
rotated inputs, median of batches). A short table is printed last.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import torch

import tiledmm
import tiledmm.kernels.block.matmul as block_matmul
from tiledmm.timing import device_and_host, time_calls, wall_us_per_call

DT = {"float32": torch.float32, "bfloat16": torch.bfloat16}
TOL = {"float32": 1e-5, "bfloat16": 2e-2}


def check(a, b, dtype):
    out = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda", dtype=DT[dtype])
    tiledmm.matmul(a, b, out=out)
    ref = a.double() @ b.double()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < TOL[dtype], (tuple(a.shape), dtype, err)
    return err


def first_call_seconds(n: int, dtype: str, cache: str, pycache: str | None = None) -> float:
    code = (f"import time, torch, tiledmm; a = torch.randn({n}, {n}, device='cuda', dtype=torch.{dtype}); "
            f"b = torch.randn({n}, {n}, device='cuda', dtype=torch.{dtype}); torch.cuda.synchronize(); "
            "t = time.perf_counter(); tiledmm.matmul(a, b); torch.cuda.synchronize(); "
            "print(time.perf_counter() - t)")
    env = dict(os.environ, TILEDMM_CACHE_DIR=cache, TILEDMM_QUIET="1")
    if pycache:     # bytecode cached as a normal install has it (the device image writes none)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    return float(r.stdout.strip().splitlines()[-1])


def first_call_profile(n: int, dtype: str, cache: str) -> str:
    """Where a fresh process's first call goes: imports, then cProfile of the call (cumulative)."""
    code = f"""
import time; t0 = time.perf_counter()
import torch; t1 = time.perf_counter()
import tiledmm; t2 = time.perf_counter()
a = torch.randn({n}, {n}, device='cuda', dtype=torch.{dtype}); b = torch.randn({n}, {n}, device='cuda', dtype=torch.{dtype})
torch.cuda.synchronize(); t3 = time.perf_counter()
import cProfile, pstats, io
p = cProfile.Profile(); p.enable(); tiledmm.matmul(a, b); torch.cuda.synchronize(); p.disable(); t4 = time.perf_counter()
tiledmm.matmul(a, b); torch.cuda.synchronize(); t5 = time.perf_counter()
print(f"import torch {{t1-t0:.2f}} s, import tiledmm {{t2-t1:.2f}} s, CUDA init + inputs {{t3-t2:.2f}} s, "
      f"first call {{t4-t3:.3f}} s (under cProfile), second call {{t5-t4:.4f}} s")
s = io.StringIO(); pstats.Stats(p, stream=s).sort_stats('cumulative').print_stats(28); print(s.getvalue())
"""
    env = dict(os.environ, TILEDMM_CACHE_DIR=cache, TILEDMM_QUIET="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    return r.stdout + r.stderr[-2000:]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    sizes = [64, 256, 1024] if not args.quick else [256]
    for dtype in ("float32", "bfloat16"):
        for n in sizes:
            a = torch.randn(n, n, device="cuda", dtype=DT[dtype])
            b = torch.randn(n, n, device="cuda", dtype=DT[dtype])
            err = check(a, b, dtype)
            tm = wall_us_per_call(lambda: torch.matmul(a, b))
            tt = wall_us_per_call(lambda: tiledmm.matmul(a, b))
            rows.append(("torch", dtype, n, tm, tt, err))
    try:
        import cupy
        from numba import cuda
        n = 256
        ta, tb = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
        ref = ta.double() @ tb.double()
        ca, cb = cupy.from_dlpack(ta), cupy.from_dlpack(tb)
        na, nb = cuda.as_cuda_array(ta), cuda.as_cuda_array(tb)
        tm = wall_us_per_call(lambda: torch.matmul(ta, tb))
        tt = wall_us_per_call(lambda: tiledmm.matmul(ta, tb))
        for kind, x, y, back in (("cupy", ca, cb, torch.from_dlpack), ("numba", na, nb, torch.as_tensor)):
            for _ in range(3):                  # full path, bind, then the short path
                r = tiledmm.matmul(x, y)
            torch.cuda.synchronize()
            got = back(r, device="cuda") if kind == "numba" else back(r)
            err = ((got.double() - ref).norm() / ref.norm()).item()
            assert err < TOL["float32"], (kind, err)
            rows.append((kind, "float32", n, tm, wall_us_per_call(lambda x=x, y=y: tiledmm.matmul(x, y)), err))
        rows.append(("(torch tensors, same n)", "float32", n, tm, tt, float("nan")))
    except Exception as e:  # noqa: BLE001
        print("cupy/numba rows skipped:", repr(e)[:200])

    # where the host time of one call goes (bf16 256^3, steady state)
    import cProfile
    import pstats
    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    tiledmm.matmul(a, b)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(2000):
        tiledmm.matmul(a, b)
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(14)

    # GPU time of small products, queued (events around batches, rotated inputs)
    ratio_rows = []
    for (m, k, n), dtype in [((1000, 1000, 1000), "bfloat16"), ((16, 4096, 4096), "bfloat16"),
                             ((1024, 1024, 1024), "float32")]:
        sets = [(torch.randn(m, k, device="cuda", dtype=DT[dtype]), torch.randn(k, n, device="cuda", dtype=DT[dtype]))
                for _ in range(4)]
        check(*sets[0], dtype)
        t_torch = time_calls([lambda x=x, y=y: torch.matmul(x, y) for x, y in sets])
        t_tile = time_calls([lambda x=x, y=y: tiledmm.matmul(x, y) for x, y in sets])
        # the same calls captured in a CUDA graph: device time alone, no host work per call
        g, n_calls = torch.cuda.CUDAGraph(), 20
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            tiledmm.matmul(*sets[0])
            with torch.cuda.graph(g, stream=side):
                for i in range(n_calls):
                    tiledmm.matmul(*sets[i % 4])
        t_graph = time_calls(g.replay) / n_calls
        # the same queued calls with the GPU's and the host's share apart (timing.device_and_host)
        split = [device_and_host([lambda x=x, y=y: f(x, y) for x, y in sets]) for f in (torch.matmul, tiledmm.matmul)]
        ratio_rows.append((f"{m}x{k}x{n}", dtype, t_torch * 1e3, t_tile * 1e3, t_torch / t_tile, t_graph * 1e3,
                           *(v * 1e3 for pair in split for v in pair)))
    print("chosen launches:", {k: v for k, v in block_matmul.plans().items()})

    # first call of a known shape class in a fresh process (tuning persisted by the first process)
    cache = tempfile.mkdtemp(prefix="tiledmm-cache-")
    pycache = tempfile.mkdtemp(prefix="tiledmm-pycache-")
    print("python writes bytecode:", not sys.flags.dont_write_bytecode,
          "| PYTHONDONTWRITEBYTECODE =", os.environ.get("PYTHONDONTWRITEBYTECODE"))
    fresh = []
    for dtype in ("bfloat16", "float32"):
        t0 = time.perf_counter()
        cold = first_call_seconds(1536, dtype, cache)
        warm = first_call_seconds(1600, dtype, cache)     # same shape class, a new process
        first_call_seconds(1536, dtype, cache, pycache)   # writes the bytecode
        warm_pyc = first_call_seconds(1600, dtype, cache, pycache)
        fresh.append((dtype, cold, warm, warm_pyc, time.perf_counter() - t0))

    print("\n== where the first call of a fresh process goes (bf16, class tuned above)")
    print(first_call_profile(1600, "bfloat16", cache))

    print("\n== per-call wall time (us), steady state, 200 queued calls")
    print(f"{'kind':6} {'dtype':9} {'n':>5} {'torch.matmul':>12} {'tiledmm':>9} {'diff':>7} {'rel err':>9}")
    for kind, dtype, n, tm, tt, err in rows:
        print(f"{kind:6} {dtype:9} {n:5d} {tm:12.1f} {tt:9.1f} {tt - tm:+7.1f} {err:9.1e}")
    print("\n== GPU time per call, queued batches (us)")
    print(f"{'shape':16} {'dtype':9} {'torch':>8} {'tiledmm':>8} {'x cuBLAS':>8} {'tiledmm in a graph':>18}"
          f"   GPU/host apart: {'torch':>13} {'tiledmm':>13}")
    for s, dtype, a, b, r, gr, tg, th, mg, mh in ratio_rows:
        print(f"{s:16} {dtype:9} {a:8.1f} {b:8.1f} {r:8.2f} {gr:18.1f}   {'':16}{tg:6.1f}/{th:5.1f} {mg:6.1f}/{mh:5.1f}")
    print("\n== first call in a fresh process (s): tuning run, then a new process of the same class;"
          " last column: with Python's bytecode cached (as after a pip install)")
    for dtype, cold, warm, warm_pyc, _ in fresh:
        print(f"{dtype:9} first process {cold:6.2f}   second process {warm:6.2f}   with bytecode {warm_pyc:6.2f}")


if __name__ == "__main__":
    main()
