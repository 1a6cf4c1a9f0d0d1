"""The ``tiledmm`` command line."""
from __future__ import annotations

import datetime
import functools
import json
import os
import sys
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Tiled matrix multiplication on NVIDIA GPUs: run, check, time and explain the kernels.")
console = Console(width=None if sys.stdout.isatty() else 132)


def command(name: str | None = None):
    """``app.command`` that turns tiledmm's input errors into a message and exit code 2."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            from ._arrays import TiledmmError
            try:
                return fn(*args, **kwargs)
            except TiledmmError as e:
                console.print(f"[red]error:[/red] {e}")
                raise typer.Exit(2)
        return app.command(name)(wrapper)
    return deco


@app.callback()
def _main(emulate: bool = typer.Option(False, "--emulate", help="Run kernels in emulation even on a GPU machine.")):
    if emulate:
        os.environ["TILEDMM_EMULATE"] = "1"


def parse_shape(text: str) -> tuple:
    """'3000x2000x4000' -> (3000, 2000, 4000): P (JxL) = M (JxK) @ N (KxL); a leading 4th number is a batch."""
    try:
        dims = tuple(int(x) for x in text.lower().replace("*", "x").split("x"))
    except ValueError:
        dims = ()
    if len(dims) not in (3, 4) or min(dims) < 0:
        raise typer.BadParameter(f"shape {text!r}: write JxKxL (or BxJxKxL), e.g. 3000x2000x4000")
    return dims


def environment() -> dict:
    """Device and versions, for the record."""
    from importlib import metadata

    from . import _backend
    env = {"date": datetime.date.today().isoformat(), "mode": _backend.mode()}
    for pkg in ("tiledmm", "torch", "triton", "numba", "numba-cuda", "numpy"):
        try:
            env[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            env[pkg] = None
    if not _backend.emulating():
        import torch
        p = torch.cuda.get_device_properties(0)
        env["device"] = f"{p.name} (sm_{p.major}{p.minor}, {p.multi_processor_count} SMs)"
        env["cuda"] = torch.version.cuda
    else:
        env["device"] = "CPU emulation"
    return env


def _fmt(x, spec: str, none: str = "-") -> str:
    return none if x is None else format(x, spec)


def results_table(results, title: str) -> Table:
    t = Table(title=title)
    for col in ("shape", "dtype", "kernel", "tile", "time ms", "TFLOP/s", "x cuBLAS", "rel err", "check"):
        t.add_column(col, justify="right" if col not in ("kernel", "dtype", "check") else "left")
    for r in results:
        t.add_row("x".join(map(str, r.shape)), r.dtype + (f"/{r.precision}" if r.precision else ""),
                  r.kernel, _fmt(r.tile, "d"),
                  _fmt(r.ms, ".3f") + (" (emul.)" if r.emulated and r.ms is not None else ""),
                  _fmt(r.tflops, ".3g"), _fmt(r.vs_cublas, ".2f"), f"{r.rel_err:.1e}",
                  "ok" if r.ok else "[red]FAIL[/red]")
    return t


def run_suite(plan, *, dtype, seed, warmup, repeats, baseline: bool, precision=None):
    """plan: [(shape, kernel, tile)]; adds a cuBLAS row per shape on a GPU."""
    from . import _backend
    from .harness import check_and_time, compare_to, rotation_for
    results, base = [], {}
    shapes = list(dict.fromkeys(s for s, _, _ in plan))
    if baseline and not _backend.emulating():
        for s in shapes:
            base[s] = check_and_time("cublas", s, dtype, precision=precision or "ieee", seed=seed,
                                     warmup=warmup, repeats=repeats, rotate=rotation_for(s, dtype))
            results.append(base[s])
    for s, kernel, tile in plan:
        results.append(check_and_time(kernel, s, dtype, tile=tile, seed=seed, warmup=warmup, repeats=repeats,
                                      rotate=1 if _backend.emulating() else rotation_for(s, dtype)))
    compare_to(results, lambda r: base.get(r.shape))
    results.sort(key=lambda r: shapes.index(r.shape))
    return results


@command()
def run(shape: Optional[List[str]] = typer.Option(None, "--shape", "-s", help="JxKxL; repeatable."),
        kernel: Optional[List[str]] = typer.Option(None, "--kernel", "-k", help="kernel name; repeatable."),
        tile: Optional[List[int]] = typer.Option(None, "--tile", "-t", help="TILE_WIDTH; repeatable."),
        dtype: str = typer.Option("float32", help="float32 or float64 (SIMT kernels)."),
        seed: int = typer.Option(0),
        repeats: Optional[int] = typer.Option(None, help="timed runs (default 10; 1 in emulation)"),
        warmup: int = typer.Option(3),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")):
    """The main job: multiply random rectangular matrices with the lectures' kernels,
    verify each against float64, time them against cuBLAS and print a table."""
    from . import _backend, registry
    gpu = not _backend.emulating()
    repeats = repeats or (10 if gpu else 1)
    if shape:
        shapes = [parse_shape(s) for s in shape]
    else:  # sizes that are not multiples of any tile
        shapes = [(3000, 2000, 4000)] if gpu else [(3, 3, 3), (19, 7, 21)]
    kernels = kernel or ["naive", "tiled"]
    plan = []
    for s in shapes:
        for k in kernels:
            spec = registry.get(k)
            if tile:
                tiles = [t for t in tile if t in spec.tiles] or [None]
            elif not spec.tiles:
                tiles = [None]
            elif gpu:
                tiles = [16, 32] if k != "naive" else [16]
            else:  # the slides' toy case is Width 3, TILE 2
                tiles = [2] if max(s) <= 4 else [8]
            plan += [(s, k, t) for t in tiles]
    results = run_suite(plan, dtype=dtype, seed=seed, warmup=warmup, repeats=repeats, baseline=True)
    env = environment()
    if as_json:
        print(json.dumps({"environment": env, "results": [r.as_dict() for r in results]}, indent=1))
    else:
        console.print(results_table(results, f"tiledmm run — {env['device']}"))
        if not gpu:
            console.print("times are emulation (CPU simulator) times; they say nothing about GPU speed")
    if not all(r.ok for r in results):
        raise typer.Exit(1)


@command()
def bench(suite: List[str] = typer.Option(None, "--suite", help="square, irregular, ladder (default: square+irregular; emulation: emulation)"),
          precision: List[str] = typer.Option(None, "--precision", "-p", help="fp32, tf32, bf16, fp16 (repeatable)"),
          kernel: Optional[List[str]] = typer.Option(None, "--kernel", "-k", help="kernels (default: every kernel)"),
          out: str = typer.Option("bench-out", help="folder for bench.csv, bench.json, bench.png"),
          repeats: int = typer.Option(20), warmup: int = typer.Option(5), seed: int = typer.Option(0)):
    """Sweep kernels x shapes x precisions against cuBLAS; write CSV/JSON and PNG plots."""
    from pathlib import Path

    from rich.progress import Progress

    from . import _backend, bench as B, registry
    gpu = not _backend.emulating()
    suites = suite or (["square", "irregular"] if gpu else ["emulation"])
    for s in suites:
        if s not in B.SUITES:
            raise typer.BadParameter(f"unknown suite {s!r}; choose from {list(B.SUITES)}")
    precs = precision or (["fp32", "tf32", "bf16"])
    for p in precs:
        if p not in B.PRECISIONS:
            raise typer.BadParameter(f"unknown precision {p!r}; choose from {list(B.PRECISIONS)}")
    kernels = [k for k in (kernel or registry.names()) if k != "cublas"]
    points = B.plan(suites, precs, kernels)
    with Progress(console=console, transient=True) as progress:
        rows = B.run(points, repeats=repeats if gpu else 1, warmup=warmup, seed=seed, progress=progress)
    env = environment()
    peaks = None
    if gpu:
        from .analysis.device import query
        d = query()
        peaks = {"fp32": d.fp32_tflops, **{("bf16" if k == "bf16" else k): v for k, v in d.tensor_tflops.items()}}
    paths = B.write(rows, Path(out), env, peaks)
    t = Table(title=f"tiledmm bench — {env['device']}")
    for col in ("suite", "shape", "prec", "kernel", "ms", "TFLOP/s", "x cuBLAS", "rel err", "check"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["suite"], r["shape"], r["precision"], r["kernel"], _fmt(r["ms"], ".3f"), _fmt(r["tflops"], ".1f"),
                  _fmt(r["vs_cublas"], ".2f"), f"{r['rel_err']:.1e}", "ok" if r["ok"] else "[red]FAIL[/red]")
    console.print(t)
    g = Table(title="geometric mean x cuBLAS")
    for col in ("suite", "prec", "kernel", "geomean", "n"):
        g.add_column(col)
    for s in B.summary(rows):
        g.add_row(s["suite"], s["precision"], s["kernel"], _fmt(s["geomean_vs_cublas"], ".3f"), str(s["n"]))
    console.print(g)
    if gpu:
        from .kernels.block import matmul as blk
        for k, v in blk.variant_choices().items():
            console.print(f"triton variant for {k}: {v}")
    console.print("wrote " + ", ".join(map(str, paths)))
    if not all(r["ok"] for r in rows):
        raise typer.Exit(1)


@command("kernels")
def list_kernels():
    """List the registered kernels."""
    from . import registry
    t = Table(title="tiledmm kernels")
    for col in ("name", "family", "dtypes", "tiles", "summary"):
        t.add_column(col)
    for s in registry.all_specs():
        t.add_row(s.name, s.family, ",".join(s.dtypes), ",".join(map(str, s.tiles)) or "-", s.summary)
    console.print(t)


def main() -> None:  # console script entry
    app()


if __name__ == "__main__":
    sys.exit(main())
