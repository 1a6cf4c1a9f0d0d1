"""``tiledmm dist``: start N ranks on this machine, run a distributed GEMM, check it, time it; or
(``--predict``) print the scaling model's prediction for more GPUs and nodes than this machine has.

Both halves live here: the command (every input checked before a rank starts) and what the ranks
run -- ``launch`` (spawn N local ranks with a torchrun-like environment) and ``run_case`` (the job
inside each rank: build, distribute, multiply, check against float64, time). The tests and
scripts/bench_distributed.py use them too. torch and tiledmm.distributed are imported inside the
functions that need them: ``tiledmm --help`` stays light.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
from typing import List, Optional

import typer

from .._arrays import TiledmmError
from ._app import command, fail, fmt, parse_shape, positive, table

# NVLink multicast (NVLS) stays off in every process (DEVELOPERS.md): forced, not defaulted
FORCED_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
ALGOS = ("summa", "allgather", "reducescatter")
ENGINES = ("nccl", "symm")
TOL = {"float64": 1e-10, "float32": 2e-5, "bfloat16": 1.5e-2, "float16": 3e-3}
BACKENDS = ("nccl", "gloo")
ELEM = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}


# -- the ranks -------------------------------------------------------------------------------------------
def force_env() -> None:
    os.environ.update(FORCED_ENV)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_backend(nproc: int) -> str:
    from .. import _backend
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


def gemm_for(name: str, dtype: str):
    """The local GEMM callback named on the command line (tiledmm, torch, KERNEL[:key=value,...])."""
    from ..outofcore import tiledmm_gemm, torch_gemm
    if name == "torch":
        return torch_gemm
    if name == "tiledmm":
        from ..api import default_kernel
        return tiledmm_gemm(default_kernel(dtype))
    kernel, _, opts = name.partition(":")  # a kernel name, options after a colon: "triton:variant=tma"
    options = dict(kv.split("=", 1) for kv in opts.split(",") if "=" in kv)
    return tiledmm_gemm(kernel, **options)


def check_gemm(name: str) -> None:
    """--gemm: tiledmm, torch, or KERNEL[:key=value,...] with a registered kernel and its options."""
    from .. import registry
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


def parse_panel(text):
    """--panel: auto, block, a width, or widths separated by commas (the last repeats)."""
    if text is None or isinstance(text, (int, list, tuple)):
        return text
    t = str(text).strip()
    if t in ("auto", "block"):
        return t
    try:
        ws = [int(x) for x in t.split(",")]
    except ValueError:
        raise TiledmmError(f"--panel {text!r}: auto, block, a width or widths like 1024,4096") from None
    if not ws or min(ws) < 1:
        raise TiledmmError(f"--panel must be > 0, got {t}")
    return ws[0] if len(ws) == 1 else ws


def run_case(algo: str, shape, dtype: str = "float32", gemm: str = "tiledmm", chunks: Optional[int] = None,
             panel=None, depth: int = 2, engine: str = "nccl", prepared: bool = False, time_it: bool = False,
             baseline: bool = False, seed: int = 0, sample_rows: Optional[int] = None,
             timeline: bool = False) -> dict:
    """Inside a rank (process group initialised): build A, B from ``seed`` (the same on every
    rank), distribute them for ``algo``, run it into a NaN-poisoned output, compare this rank's part
    with float64 (all of it, or ``sample_rows`` random rows of it), reduce the error over ranks;
    optionally time it (and its baseline) with ``tiledmm.timing.time_calls``. Returns the same dict
    on every rank."""
    import torch
    import torch.distributed as dist
    from .. import distributed as D
    from ..timing import time_calls
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
    gm = gemm_for(gemm, dtype)
    panel = parse_panel(panel)
    extra = {}
    if engine == "symm":
        from ..distributed import _symm
        why = _symm.available(None)
        if why:         # every rank gets the same answer: skipped, said why
            return {"algo": algo, "nproc": w, "shape": [m, k, n], "dtype": dtype, "gemm": gemm, "engine": engine,
                    "skipped": why, "ok": True, "rel_err": None, "grid": None}
    if algo == "summa":
        grid = D.Grid.make()
        blk = grid.blocks(m, k, n)
        a_loc, b_loc = grid.local_blocks(A, B)
        if prepared:
            a_loc, b_loc = D.prepare_summa(a_loc, b_loc, (m, k, n), grid=grid, panel=panel, depth=depth,
                                           engine=engine), None
        rows, cols = blk["c"]
        fn = lambda st=None, out=None: D.summa(a_loc, b_loc, (m, k, n), grid=grid, gemm=gm, panel=panel,  # noqa: E731
                                               depth=depth, engine=engine, stats=st, out=out)
        extra["panels"] = [list(p) for p in D.summa_panels((m, k, n), grid, panel, dtype=dt, depth=depth,
                                                           engine=engine)]
        base_name = "1 rank, same kernel"
    elif algo == "allgather":
        a_loc, b_loc = D.shard_rows(A), D.shard_cols(B)
        rows, cols = (0, m), D.block_range(n, w, rank)
        fn = lambda st=None, out=None: D.allgather_matmul(a_loc, b_loc, m, gemm=gm, chunks=chunks,  # noqa: E731
                                                          engine=engine, stats=st, out=out)
        base = lambda: D.allgather_then_matmul(a_loc, b_loc, m, gemm=gm)  # noqa: E731
        base_name = "all-gather + GEMM"
    else:
        a_loc, b_loc = D.shard_cols(A), D.shard_rows(B)
        rows, cols = D.block_range(m, w, rank), (0, n)
        fn = lambda st=None, out=None: D.matmul_reducescatter(a_loc, b_loc, gemm=gm, chunks=chunks,  # noqa: E731
                                                              engine=engine, stats=st, out=out)
        base = lambda: D.matmul_then_reducescatter(a_loc, b_loc, gemm=gm)  # noqa: E731
        base_name = "GEMM + reduce-scatter"
    r0, r1 = rows
    c0, c1 = cols
    poisoned = torch.full((r1 - r0, c1 - c0), float("nan"), dtype=dt, device=dev)
    c = fn(out=poisoned)
    if nccl:
        torch.cuda.synchronize()
    sel = torch.arange(r1 - r0, device=dev)
    if sample_rows and (r1 - r0) > sample_rows:
        gs = torch.Generator(device="cpu").manual_seed(seed + 1 + rank)
        sel = torch.randperm(r1 - r0, generator=gs)[:sample_rows].sort().values.to(dev)
    ref = A[r0:r1][sel].double() @ B[:, c0:c1].double()
    got = c[sel].double()
    err2 = torch.tensor(float("inf"), device=dev) if torch.isnan(got).any() else (got - ref).pow(2).sum()
    acc = torch.stack([err2, ref.pow(2).sum()]).to(torch.float64)
    dist.all_reduce(acc)
    rel = float((acc[0] / acc[1].clamp_min(1e-300)).sqrt()) if acc[1] > 0 else float(acc[0].sqrt())
    del ref, got, poisoned
    out = {"algo": algo, "nproc": w, "shape": [m, k, n], "dtype": dtype, "backend": dist.get_backend(),
           "gemm": gemm, "engine": engine, "rel_err": rel, "ok": bool(rel <= TOL.get(dtype, 1e-2)),
           "checked": "sampled rows" if len(sel) < r1 - r0 else "all",
           "grid": list(D.grid_shape(w)) if algo == "summa" else None, **extra}
    if time_it:
        ms = time_collective(fn, nccl)
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
                out["baseline_ms"] = time_collective(base, nccl)
                out["speedup"] = out["baseline_ms"] / ms
            out["baseline"] = base_name
    if timeline:
        st = {}
        fn(st)
        if nccl:
            torch.cuda.synchronize()
        for key in ("timeline", "compute_ms", "comm_ms", "span_ms", "compute_wait_ms", "chunks", "panels"):
            if key in st:
                out[key] = st[key]
        # each rank's collectives in the order its host issued them (stream, what): a check that every rank
        # of a communicator issues the same sequence
        mine = [(row[0], row[1].replace(" staged", "")) for row in sorted(st.get("timeline", []), key=lambda r: r[2])
                if row[0] != "compute"]
        orders = [None] * w
        dist.all_gather_object(orders, mine)
        out["issue_orders"] = orders
    return out


def time_collective(fn, nccl: bool, group=None, batches: int = 5) -> float:
    """time_calls with the same number of calls on every rank of ``group`` (collectives must match);
    the slowest rank's median."""
    import torch
    import torch.distributed as dist
    from ..timing import time_calls
    dev = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    fn()
    est = torch.tensor([time_calls(fn, batches=1, per_batch=1, warmup=1)], dtype=torch.float64, device=dev)
    dist.all_reduce(est, op=dist.ReduceOp.MAX, group=group)
    per = int(min(50, max(1, round(20.0 / max(float(est[0]), 1e-3))))) if nccl else 1
    ms = torch.tensor([time_calls(fn, batches=batches, per_batch=per, warmup=1)], dtype=torch.float64, device=dev)
    dist.all_reduce(ms, op=dist.ReduceOp.MAX, group=group)
    return float(ms[0])


# -- the command -----------------------------------------------------------------------------------------
def emulation_ranks() -> int:
    """Most ranks ``dist`` starts in emulation: each is a CPU process with its own simulator, so one a
    core (at least 4, a 2x2 SUMMA grid)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:          # not Linux
        cores = os.cpu_count() or 1
    return max(4, cores)


def _local_kernel(gemm: str, dtype: str):
    """The registered kernel the ranks' local GEMM runs (None for torch's own matmul)."""
    from .. import registry
    from ..api import default_kernel
    if gemm == "torch":
        return None
    return registry.get(default_kernel(dtype) if gemm == "tiledmm" else gemm.partition(":")[0])


def _check(nproc: int, shapes: list, dtype: str, algo: list, gemm: str, chunks, panel, backend, engine, depth) -> str:
    """Every refusal before a rank starts; the backend to use."""
    from .. import _backend
    positive("--nproc", nproc)
    positive("--chunks", chunks)
    positive("--depth", depth)
    for a in algo:
        if a not in ALGOS:
            raise TiledmmError(f"--algo {a!r}: choose from {', '.join(ALGOS)}")
    if dtype not in TOL:
        raise TiledmmError(f"--dtype {dtype!r}: choose from {', '.join(TOL)}")
    if backend is not None and backend not in BACKENDS:
        raise TiledmmError(f"--backend {backend!r}: choose nccl or gloo")
    if engine not in ENGINES:
        raise TiledmmError(f"--engine {engine!r}: choose from {', '.join(ENGINES)}")
    parse_panel(panel)
    check_gemm(gemm)
    emulating = _backend.emulating()
    spec = _local_kernel(gemm, dtype)
    if spec is not None and dtype not in spec.dtypes:
        raise TiledmmError(f"--gemm {gemm!r}: kernel {spec.name!r} supports dtypes {list(spec.dtypes)}, not {dtype}")
    if emulating:
        most = emulation_ranks()
        if nproc > most:
            raise TiledmmError(f"--nproc {nproc}: without a GPU each rank is a CPU process running emulated "
                               f"kernels, so this machine starts at most {most} ranks (one per CPU core, and "
                               "never fewer than 4, a 2x2 SUMMA grid)")
        if backend == "nccl":
            raise TiledmmError("--backend nccl needs GPUs; none is in use (emulation): use gloo")
        if engine == "symm":
            raise TiledmmError("--engine symm needs GPUs (torch's symmetric memory); none is in use: use nccl")
        if spec is not None:
            if spec.emulation_limit is None:
                raise TiledmmError(f"--gemm {gemm!r}: kernel {spec.name!r} needs a GPU; none is in use (emulation)")
            limit = _backend.emulation_limit(spec.emulation_limit)
            for m, k, n in shapes:
                if m * k * n > limit:
                    raise TiledmmError(f"--shape {m}x{k}x{n}: {m * k * n:,} multiply-adds, over the emulation "
                                       f"limit of {limit:,} for kernel {spec.name!r} (no GPU: the CPU stands in "
                                       "for it); try 64x48x40")
    be = backend or default_backend(nproc)
    if be == "nccl":
        import torch
        if torch.cuda.device_count() < nproc:
            raise TiledmmError(f"--nproc {nproc} with nccl needs {nproc} GPUs; {torch.cuda.device_count()} visible")
    if engine == "symm" and be != "nccl":
        raise TiledmmError("--engine symm needs the nccl backend (GPUs)")
    return be


def predict(shapes: list, dtype: str, algos: list, engine: str, chunks, gpus_per_node: int, gemm_tflops,
            nvlink_gbs: float, net_gbs: float, as_json: bool) -> None:
    """The scaling model's table: 1, 2, 4, 8 GPUs of one node, then 2 and 4 whole nodes."""
    from ..distributed import model as M
    kw = {"gpus_per_node": gpus_per_node, "nvlink": M.Link(nvlink_gbs, M.Machine.nvlink.lat_us),
          "net": M.Link(net_gbs, M.Machine.net.lat_us)}
    if gemm_tflops is not None:
        kw["gemm_tflops"] = gemm_tflops
    mach = M.Machine.for_dtype(dtype, **kw)
    rows, dump = [], []
    for m, k, n in shapes:
        preds = M.predict_table(m, k, n, machine=mach, elem=ELEM[dtype], algos=algos, engine=engine, chunks=chunks)
        for p in preds:
            dump.append({"shape": [m, k, n], "dtype": dtype, **p.row()})
            rows.append((p.algo, p.gpus, p.nodes, f"{p.grid[0]}x{p.grid[1]}", f"{p.ms:.2f}", f"{p.speedup:.2f}",
                         f"{p.efficiency:.2f}", p.bound))
    if as_json:
        print(json.dumps({"machine": {"gemm_tflops": mach.gemm_tflops, "nvlink_gbs": mach.nvlink.gbs,
                                      "net_gbs": mach.net.gbs, "gpus_per_node": mach.gpus_per_node,
                                      "engine": engine}, "predictions": dump}, indent=1))
        return
    shp = ", ".join("x".join(map(str, s)) for s in shapes)
    print(f"model: GEMM {mach.gemm_tflops:.0f} TFLOP/s a GPU, NVLink {mach.nvlink.gbs:.0f} GB/s, network "
          f"{mach.net.gbs:.0f} GB/s,\n{mach.gpus_per_node} GPUs a node, engine {engine} (ms: predicted time; "
          "eff: speed-up / GPUs)")
    table(f"predicted {dtype} {shp}", ("algo", "GPUs", "nodes", "grid", "ms", "speed-up", "eff", "bound"), rows,
          right=("GPUs", "nodes", "ms", "speed-up", "eff"))


@command("dist")
def dist(nproc: int = typer.Option(2, "--nproc", "-n", metavar="N",
                                   help="ranks to start on this machine (one per GPU)."),
         shape: Optional[List[str]] = typer.Option(None, "--shape", "-s", metavar="JxKxL",
                                                   help="C (JxL) = A (JxK) @ B (KxL), the whole product; "
                                                        "repeatable (default 64x48x40; --predict: 32768^3)."),
         dtype: Optional[str] = typer.Option(None, metavar="|".join(TOL),
                                             help="element type (default float32; --predict: bfloat16)."),
         algo: Optional[List[str]] = typer.Option(None, "--algo", "-a", metavar="|".join(ALGOS),
                                                  help="the algorithm; repeatable (default summa; --predict: all)."),
         gemm: str = typer.Option("tiledmm", metavar="NAME",
                                  help="local GEMM: tiledmm (default kernel), torch, or a kernel name with "
                                       "options after a colon (triton:variant=blocked)."),
         engine: str = typer.Option("nccl", metavar="nccl|symm",
                                    help="how blocks travel: NCCL collectives, or copy engine reads of torch's "
                                         "symmetric memory (GPUs)."),
         chunks: Optional[int] = typer.Option(None, metavar="N",
                                              help="row chunks for allgather and reducescatter (default: the "
                                                   "model's choice)."),
         panel: Optional[str] = typer.Option(None, metavar="auto|block|W[,W..]",
                                             help="SUMMA's K panels (default auto: the model's schedule)."),
         depth: int = typer.Option(2, metavar="N", help="SUMMA panels in flight."),
         backend: Optional[str] = typer.Option(None, metavar="nccl|gloo",
                                               help="default: nccl with enough GPUs, else gloo."),
         timing: bool = typer.Option(True, "--time/--no-time", metavar="",
                                     help="Time it and its baseline (time_calls)."),
         do_predict: bool = typer.Option(False, "--predict", metavar="",
                                         help="Print the scaling model's prediction for 1 to 8 GPUs and 2, 4 nodes "
                                              "instead of running."),
         gpus_per_node: int = typer.Option(8, metavar="N", help="--predict: GPUs a node."),
         gemm_tflops: Optional[float] = typer.Option(None, metavar="T",
                                                     help="--predict: local GEMM TFLOP/s a GPU (default: 68% "
                                                          "of the H100's dense peak for the dtype)."),
         nvlink_gbs: float = typer.Option(340.0, metavar="GB/s", help="--predict: NVLink bandwidth a GPU."),
         net_gbs: float = typer.Option(50.0, metavar="GB/s",
                                       help="--predict: network bandwidth a GPU between nodes (400 Gb/s = 50)."),
         as_json: bool = typer.Option(False, "--json", metavar="", help="Print JSON instead of a table.")):
    """Distributed GEMM on N local ranks (torch.distributed): check against float64, time, print;
    or --predict: the scaling model for more GPUs and nodes."""
    if do_predict:
        shapes = [parse_shape(s, batch=False) for s in (shape or ["32768x32768x32768"])]
        dt = dtype or "bfloat16"
        if dt not in TOL:
            raise TiledmmError(f"--dtype {dt!r}: choose from {', '.join(TOL)}")
        for a in algo or ():
            if a not in ALGOS:
                raise TiledmmError(f"--algo {a!r}: choose from {', '.join(ALGOS)}")
        if engine not in ENGINES:
            raise TiledmmError(f"--engine {engine!r}: choose from {', '.join(ENGINES)}")
        positive("--chunks", chunks)
        positive("--gpus-per-node", gpus_per_node)
        positive("--gemm-tflops", gemm_tflops)
        positive("--nvlink-gbs", nvlink_gbs)
        positive("--net-gbs", net_gbs)
        predict(shapes, dt, list(algo or ALGOS), engine, chunks, gpus_per_node, gemm_tflops, nvlink_gbs, net_gbs,
                as_json)
        return
    shapes = [parse_shape(s, batch=False) for s in (shape or ["64x48x40"])]
    dtype = dtype or "float32"
    algo = list(algo or ["summa"])
    be = _check(nproc, shapes, dtype, algo, gemm, chunks, panel, backend, engine, depth)
    cases = [dict(algo=a, shape=s, dtype=dtype, gemm=gemm, chunks=chunks, panel=panel, depth=depth, engine=engine,
                  time_it=timing, baseline=timing) for s in shapes for a in algo]
    results = launch(nproc, cases, backend=be)
    if as_json:
        print(json.dumps(results, indent=1))
    else:
        table(f"tiledmm dist — {nproc} ranks, {be}, engine {engine}",
              ("algo", "ranks", "shape", "dtype", "ms", "TFLOP/s per rank", "baseline ms", "x baseline",
               "baseline", "rel err", "check"),
              [(r["algo"] + (f" {r['grid'][0]}x{r['grid'][1]}" if r.get("grid") else ""), r["nproc"],
                "x".join(map(str, r["shape"])), r["dtype"], fmt(r.get("ms"), ".3f"),
                fmt(r.get("tflops_per_gpu"), ".3g"), fmt(r.get("baseline_ms"), ".3f"), fmt(r.get("speedup"), ".2f"),
                r.get("baseline"), fmt(r.get("rel_err"), ".2e"),
                f"skipped: {r['skipped']}" if r.get("skipped") else "ok" if r["ok"] else "WRONG") for r in results],
              right=("ranks", "ms", "TFLOP/s per rank", "baseline ms", "x baseline", "rel err"),
              whole=("shape", "dtype"),
              stack=((None, ("ms", "TFLOP/s per rank")), (None, ("baseline ms", "x baseline")),
                     (None, ("shape", "dtype"))))
    if not all(r["ok"] for r in results):
        fail("a distributed result differs from the float64 reference", 1)
