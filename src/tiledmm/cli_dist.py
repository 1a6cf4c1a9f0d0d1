"""What ``tiledmm dist`` runs: ``launch`` (spawn N local ranks with a torchrun-like environment) and
``run_case`` (the job inside each rank: build, distribute, multiply, check against float64, time).
The tests and scripts/bench_distributed.py use them too; the command itself is tiledmm.cli.dist.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
from typing import List, Optional

# NVLink multicast (NVLS) stays off in every process (DEVELOPERS.md): forced, not defaulted
FORCED_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
ALGOS = ("summa", "allgather", "reducescatter")
TOL = {"float64": 1e-10, "float32": 2e-5, "bfloat16": 1.5e-2, "float16": 3e-3}


def force_env() -> None:
    os.environ.update(FORCED_ENV)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_backend(nproc: int) -> str:
    from . import _backend
    if _backend.emulating():
        return "gloo"
    import torch
    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= nproc else "gloo"


def launch(nproc: int, cases: list, *, backend: Optional[str] = None) -> list:
    """Run ``cases`` (dicts for ``run_case``) on ``nproc`` fresh local ranks; rank 0's results."""
    import torch.multiprocessing as mp
    force_env()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    backend = backend or default_backend(nproc)
    with tempfile.TemporaryDirectory(prefix="tiledmm-dist-") as d:
        mp.spawn(_rank_main, args=(nproc, backend, cases, d), nprocs=nproc, join=True)
        with open(os.path.join(d, "results.json")) as f:
            return json.load(f)


def _rank_main(rank: int, nproc: int, backend: str, cases: list, outdir: str) -> None:
    force_env()
    os.environ["TILEDMM_QUIET"] = "1"       # the parent said whether kernels run in emulation, once
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_RANK": str(rank),
                       "LOCAL_WORLD_SIZE": str(nproc)})
    import torch
    import torch.distributed as dist
    import tiledmm  # noqa: F401  (decides GPU or emulation first)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    kw = {"device_id": torch.device("cuda", rank)} if backend == "nccl" else {}
    dist.init_process_group(backend, rank=rank, world_size=nproc, **kw)
    try:
        results = [run_case(**c) for c in cases]
        if rank == 0:
            with open(os.path.join(outdir, "results.json"), "w") as f:
                json.dump(results, f)
    finally:
        dist.destroy_process_group()


def _gemm_for(name: str, dtype: str):
    from .outofcore import tiledmm_gemm, torch_gemm
    if name == "torch":
        return torch_gemm
    if name == "tiledmm":
        from .api import default_kernel
        return tiledmm_gemm(default_kernel(dtype))
    kernel, _, opts = name.partition(":")  # a kernel name, options after a colon: "triton:variant=tma"
    options = dict(kv.split("=", 1) for kv in opts.split(",") if "=" in kv)
    return tiledmm_gemm(kernel, **options)


def _check_gemm(name: str) -> None:
    """--gemm: tiledmm, torch, or KERNEL[:key=value,...] with a registered kernel and its options."""
    from . import registry
    from ._arrays import TiledmmError
    if name in ("tiledmm", "torch"):
        return
    kernel, _, opts = name.partition(":")
    if kernel not in registry.names():
        raise TiledmmError(f"--gemm {name!r}: tiledmm, torch, or a kernel name ({', '.join(registry.names())}) "
                           "with options after a colon (triton:variant=blocked)")
    spec = registry.get(kernel)
    for kv in filter(None, opts.split(",")):
        key = kv.split("=", 1)[0]
        if "=" not in kv or key not in spec.options:
            raise TiledmmError(f"--gemm {name!r}: {kv!r} is not key=value with a key kernel {kernel!r} takes "
                               f"({', '.join(spec.options) or 'none'})")


def run_case(algo: str, shape, dtype: str = "float32", gemm: str = "tiledmm", chunks: int = 2,
             panel: Optional[int] = None, depth: int = 2, time_it: bool = False, baseline: bool = False,
             seed: int = 0, sample_rows: Optional[int] = None, timeline: bool = False) -> dict:
    """Inside a rank (process group initialised): build A, B from ``seed`` (the same on every
    rank), distribute them for ``algo``, run it, compare this rank's part with float64 (all
    of it, or ``sample_rows`` random rows of it), reduce the error over ranks; optionally
    time it (and its baseline) with ``tiledmm.timing.time_calls``. Returns the same dict on
    every rank."""
    import torch
    import torch.distributed as dist
    from . import distributed as D
    from .timing import time_calls
    if algo not in ALGOS:
        raise ValueError(f"algo {algo!r}: one of {ALGOS}")
    m, k, n = (int(x) for x in shape)
    w, rank = dist.get_world_size(), dist.get_rank()
    nccl = dist.get_backend() == "nccl"
    dev = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    dt = getattr(torch, dtype)
    g = torch.Generator(device=dev).manual_seed(seed)
    A = torch.randn(m, k, generator=g, device=dev, dtype=torch.float32).to(dt)
    B = torch.randn(k, n, generator=g, device=dev, dtype=torch.float32).to(dt)
    gm = _gemm_for(gemm, dtype)
    if algo == "summa":
        grid = D.Grid.make()
        blk = grid.blocks(m, k, n)
        (a0, a1), (a2, a3) = blk["a"]
        (b0, b1), (b2, b3) = blk["b"]
        a_loc, b_loc = A[a0:a1, a2:a3].contiguous(), B[b0:b1, b2:b3].contiguous()
        rows, cols = blk["c"]
        fn = lambda st=None: D.summa(a_loc, b_loc, (m, k, n), grid=grid, gemm=gm, panel=panel, depth=depth, stats=st)  # noqa: E731
        base_name = "1 rank, same kernel"
    elif algo == "allgather":
        a_loc, b_loc = D.shard_rows(A), D.shard_cols(B)
        rows, cols = (0, m), D.block_range(n, w, rank)
        fn = lambda st=None: D.allgather_matmul(a_loc, b_loc, m, gemm=gm, chunks=chunks, stats=st)  # noqa: E731
        base = lambda: D.allgather_then_matmul(a_loc, b_loc, m, gemm=gm)  # noqa: E731
        base_name = "all-gather + GEMM"
    else:
        a_loc, b_loc = D.shard_cols(A), D.shard_rows(B)
        rows, cols = D.block_range(m, w, rank), (0, n)
        fn = lambda st=None: D.matmul_reducescatter(a_loc, b_loc, gemm=gm, chunks=chunks, stats=st)  # noqa: E731
        base = lambda: D.matmul_then_reducescatter(a_loc, b_loc, gemm=gm)  # noqa: E731
        base_name = "GEMM + reduce-scatter"
    # ---- check (fresh output, NaN-poisoned where we allocate it ourselves is not needed: the
    # algorithms allocate; a wrong or missing block shows as error)
    c = fn()
    if nccl:
        torch.cuda.synchronize()
    r0, r1 = rows
    c0, c1 = cols
    sel = torch.arange(r1 - r0, device=dev)
    if sample_rows and (r1 - r0) > sample_rows:
        gs = torch.Generator(device="cpu").manual_seed(seed + 1 + rank)
        sel = torch.randperm(r1 - r0, generator=gs)[:sample_rows].sort().values.to(dev)
    ref = A[r0:r1][sel].double() @ B[:, c0:c1].double()
    got = c[sel].double()
    if torch.isnan(got).any():
        err2 = torch.tensor(float("inf"), device=dev)
    else:
        err2 = (got - ref).pow(2).sum()
    ref2 = ref.pow(2).sum()
    acc = torch.stack([err2, ref2]).to(torch.float64)
    dist.all_reduce(acc)
    rel = float((acc[0] / acc[1].clamp_min(1e-300)).sqrt()) if acc[1] > 0 else float(acc[0].sqrt())
    del ref, got
    out = {"algo": algo, "nproc": w, "shape": [m, k, n], "dtype": dtype, "backend": dist.get_backend(),
           "gemm": gemm, "rel_err": rel, "ok": bool(rel <= TOL.get(dtype, 1e-2)),
           "checked": "sampled rows" if len(sel) < r1 - r0 else "all", "grid": list(D.grid_shape(w)) if algo == "summa" else None}
    if time_it:
        ms = _time_collective(fn, time_calls, nccl)
        out["ms"] = ms
        out["tflops_per_gpu"] = 2.0 * m * n * k / (ms * 1e-3) / w / 1e12
        if baseline:
            if algo == "summa":       # one GPU, the whole product, the same local kernel
                cf = torch.empty(m, n, dtype=dt, device=dev)
                ms1 = time_calls(lambda: gm(A, B, cf, 1.0, 0.0), batches=3)
                t = torch.tensor([ms1], dtype=torch.float64, device=dev)
                dist.broadcast(t, src=0)
                out["baseline_ms"] = float(t[0])
                out["speedup"] = out["baseline_ms"] / ms
                out["efficiency"] = out["speedup"] / w
                del cf
            else:
                out["baseline_ms"] = _time_collective(base, time_calls, nccl)
                out["speedup"] = out["baseline_ms"] / ms
            out["baseline"] = base_name
    if timeline:
        st = {}
        fn(st)
        if nccl:
            torch.cuda.synchronize()
        out["timeline"] = st.get("timeline", [])
        out["compute_ms"] = st.get("compute_ms")
        out["comm_ms"] = st.get("comm_ms")
        out["span_ms"] = st.get("span_ms")
    return out


def _time_collective(fn, time_calls, nccl: bool) -> float:
    """time_calls with the same number of calls on every rank (collectives must match);
    the slowest rank's median."""
    import torch
    import torch.distributed as dist
    dev = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    fn()
    est = torch.tensor([time_calls(fn, batches=1, per_batch=1, warmup=1)], dtype=torch.float64, device=dev)
    dist.all_reduce(est, op=dist.ReduceOp.MAX)
    per = int(min(50, max(1, round(20.0 / max(float(est[0]), 1e-3))))) if nccl else 1
    ms = torch.tensor([time_calls(fn, batches=5, per_batch=per, warmup=1)], dtype=torch.float64, device=dev)
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)
    return float(ms[0])
