"""``tiledmm dist``: start N ranks on this machine, run a distributed GEMM, check it, time it
(the ranks' job is tiledmm.cli_dist; every input is checked here, before a rank starts)."""
from __future__ import annotations

import json
import os
from typing import List, Optional

import typer

from .._arrays import TiledmmError
from ..cli_dist import ALGOS, TOL, _check_gemm, default_backend, launch
from ._app import command, fail, fmt, parse_shape, positive, table

BACKENDS = ("nccl", "gloo")


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


def _check(nproc: int, shapes: list, dtype: str, algo: list, gemm: str, chunks: int, panel, backend) -> str:
    """Every refusal before a rank starts; the backend to use."""
    from .. import _backend
    positive("--nproc", nproc)
    positive("--chunks", chunks)
    positive("--panel", panel)
    for a in algo:
        if a not in ALGOS:
            raise TiledmmError(f"--algo {a!r}: choose from {', '.join(ALGOS)}")
    if dtype not in TOL:
        raise TiledmmError(f"--dtype {dtype!r}: choose from {', '.join(TOL)}")
    if backend is not None and backend not in BACKENDS:
        raise TiledmmError(f"--backend {backend!r}: choose nccl or gloo")
    _check_gemm(gemm)
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
    return be


@command("dist")
def dist(nproc: int = typer.Option(2, "--nproc", "-n", metavar="N",
                                   help="ranks to start on this machine (one per GPU)."),
         shape: List[str] = typer.Option(["64x48x40"], "--shape", "-s", metavar="JxKxL",
                                         help="C (JxL) = A (JxK) @ B (KxL), the whole product; repeatable."),
         dtype: str = typer.Option("float32", metavar="|".join(TOL), help="element type."),
         algo: List[str] = typer.Option(["summa"], "--algo", "-a", metavar="|".join(ALGOS),
                                        help="the algorithm; repeatable."),
         gemm: str = typer.Option("tiledmm", metavar="NAME",
                                  help="local GEMM: tiledmm (default kernel), torch, or a kernel name with "
                                       "options after a colon (triton:variant=blocked)."),
         chunks: int = typer.Option(2, metavar="N", help="row chunks for allgather and reducescatter."),
         panel: Optional[int] = typer.Option(None, metavar="N",
                                             help="SUMMA K-panel width (default: the block's K range)."),
         backend: Optional[str] = typer.Option(None, metavar="nccl|gloo",
                                               help="default: nccl with enough GPUs, else gloo."),
         timing: bool = typer.Option(True, "--time/--no-time", metavar="",
                                     help="Time it and its baseline (time_calls)."),
         as_json: bool = typer.Option(False, "--json", metavar="", help="Print JSON instead of a table.")):
    """Distributed GEMM on N local ranks (torch.distributed): check against float64, time, print."""
    shapes = [parse_shape(s, batch=False) for s in shape]
    be = _check(nproc, shapes, dtype, algo, gemm, chunks, panel, backend)
    cases = [dict(algo=a, shape=s, dtype=dtype, gemm=gemm, chunks=chunks, panel=panel,
                  time_it=timing, baseline=timing) for s in shapes for a in algo]
    results = launch(nproc, cases, backend=be)
    if as_json:
        print(json.dumps(results, indent=1))
    else:
        table(f"tiledmm dist — {nproc} ranks, {be}",
              ("algo", "ranks", "shape", "dtype", "ms", "TFLOP/s per rank", "baseline ms", "x baseline",
               "baseline", "rel err", "check"),
              [(r["algo"] + (f" {r['grid'][0]}x{r['grid'][1]}" if r.get("grid") else ""), r["nproc"],
                "x".join(map(str, r["shape"])), r["dtype"], fmt(r.get("ms"), ".3f"),
                fmt(r.get("tflops_per_gpu"), ".3g"), fmt(r.get("baseline_ms"), ".3f"), fmt(r.get("speedup"), ".2f"),
                r.get("baseline"), f"{r['rel_err']:.2e}", "ok" if r["ok"] else "WRONG") for r in results],
              right=("ranks", "ms", "TFLOP/s per rank", "baseline ms", "x baseline", "rel err"),
              whole=("shape", "dtype", "check"),
              stack=((None, ("ms", "TFLOP/s per rank")), (None, ("baseline ms", "x baseline")),
                     (None, ("shape", "dtype"))))
    if not all(r["ok"] for r in results):
        fail("a distributed result differs from the float64 reference", 1)
