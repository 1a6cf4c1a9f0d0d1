"""``tiledmm run`` (the main job) and ``tiledmm bench`` (the sweep): verified against float64, timed."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape
from rich.text import Text

from .. import bench as B
from .._arrays import TiledmmError
from ._app import command, console, environment, fmt, num, ok_cell, parse_shape, positive, progress_bar, table

def _block(kernel: str, tile, shape) -> str | None:
    """Threads per block ('16x16') of a kernel at a tile, for a results table; None where it has no
    launch configuration (the block family)."""
    from .. import registry
    spec = registry.get(kernel)
    if tile is None or spec.launch_config is None:
        return None
    *_, m, k, n = shape
    return "x".join(map(str, spec.launch_config(tile, m, k, n)[1]))


# stacked one under another where a table is too wide for the terminal (run, bench)
_STACK = ((None, ("ms", "TFLOP/s")), (None, ("GPU ms", "host us", "x cuBLAS GPU")), (None, ("x cuBLAS", "rel err")),
          (None, ("kernel", "tile", "block")), (None, ("shape", "prec")))


def _results(rows: list[dict], title: str) -> None:
    """The results of run or bench as a table. The tile is the --tile value, as in --json (naive's is its
    block's width); a precision every row shares goes in the title. In emulation the simulator's time,
    the error and the check are all there is to say: no rates, no comparison with cuBLAS."""
    emulated = all(r["emulated"] for r in rows)
    gpu = any(r.get("gpu_ms") for r in rows)         # bench --gpu-time
    precs = list(dict.fromkeys(r["precision"] for r in rows))
    if len(precs) == 1:
        title = f"{title}, {precs[0]}"
    cols = ("shape",) + (("prec",) if len(precs) > 1 else ()) + ("kernel", "tile", "block") + (
        ("sim ms",) if emulated else ("ms", "TFLOP/s", "x cuBLAS")) + (
        ("GPU ms", "host us", "x cuBLAS GPU") if gpu else ()) + ("rel err", "check")
    out = []
    for r in rows:
        shape = tuple(map(int, r["shape"].split("x")))
        cells = {"shape": r["shape"], "prec": r["precision"], "kernel": r["kernel"], "tile": r["tile"],
                 "block": _block(r["kernel"], r["tile"], shape), "sim ms": num(r["ms"]), "ms": num(r["ms"]),
                 "TFLOP/s": num(r["tflops"]), "x cuBLAS": fmt(r["vs_cublas"], ".2f"),
                 "GPU ms": num(r.get("gpu_ms")), "host us": num(r.get("host_us")),
                 "x cuBLAS GPU": fmt(r.get("gpu_vs_cublas"), ".2f"), "rel err": num(r["rel_err"]),
                 "check": ok_cell(r["ok"])}
        out.append(tuple(cells[c] for c in cols))
    table(title, cols, out, right=("tile", "block", "sim ms", "ms", "TFLOP/s", "x cuBLAS", "GPU ms", "host us",
                                   "x cuBLAS GPU", "rel err"), whole=("shape", "prec", "kernel", "check"),
          stack=_STACK)


def _check_points(points) -> None:
    for p in points:
        why = B.why_not(p)
        if why:
            raise TiledmmError(why)


def _run_points(points, *, repeats: int, warmup: int, seed: int, outdir: Path | None = None,
                gpu_time: bool = False) -> list[dict]:
    """``bench.run`` under a progress bar; with ``outdir``, the rows so far go to its partial CSV after
    each shape (a run stopped by a time limit or Ctrl-C keeps what it measured)."""
    def partial(rows):
        outdir.mkdir(parents=True, exist_ok=True)
        B.write_csv(rows, outdir / B.PARTIAL)
    with progress_bar() as progress:
        return B.run(points, repeats=repeats, warmup=warmup, seed=seed, progress=progress,
                     on_rows=partial if outdir is not None else None, gpu_time=gpu_time)


# -- commands ------------------------------------------------------------------------------------
@command()
def run(shape: Optional[List[str]] = typer.Option(None, "--shape", "-s", metavar="JxKxL",
                                                   help="P = M (JxK) @ N (KxL); repeatable. Default: 3000x2000x4000 "
                                                        "on a GPU, 3x3x3 and 19x7x21 in emulation."),
        kernel: Optional[List[str]] = typer.Option(None, "--kernel", "-k", metavar="NAME",
                                                    help="a kernel from `tiledmm kernels`; repeatable. "
                                                         "Default: naive and tiled."),
        tile: Optional[List[int]] = typer.Option(None, "--tile", "-t", metavar="T",
                                                  help="TILE_WIDTH (for naive: the block width); repeatable; "
                                                       "checked as tiledmm.matmul checks it. Default: 16 and 32 "
                                                       "on a GPU, 2 or 8 in emulation."),
        dtype: str = typer.Option("float32", metavar="float32|float64", help="element type."),
        seed: int = typer.Option(0, metavar="N", help="seed of the random inputs."),
        repeats: Optional[int] = typer.Option(None, metavar="N", help="timed runs (default 10; 1 in emulation)."),
        warmup: int = typer.Option(3, metavar="N", help="untimed runs before timing."),
        as_json: bool = typer.Option(False, "--json", metavar="", help="Print JSON instead of a table.")):
    """The main job: multiply random rectangular matrices with the lectures' kernels,
    verify each against float64, time them against cuBLAS and print a table."""
    from .. import _backend, registry
    labels = {"float32": "fp32", "float64": "fp64"}
    if dtype not in labels:
        raise TiledmmError(f"--dtype {dtype!r}: choose float32 or float64")
    positive("--repeats", repeats)
    positive("--warmup", warmup, allow_zero=True)
    kernels = kernel or ["naive", "tiled"]
    for k in kernels:
        registry.get(k)
    gpu = not _backend.emulating()
    shapes = [parse_shape(s) for s in shape] if shape else \
        ([(3000, 2000, 4000)] if gpu else [(3, 3, 3), (19, 7, 21)])   # not multiples of any tile
    if tile and not any(registry.get(k).tiles for k in kernels):
        raise TiledmmError(f"--tile: none of {kernels} takes a tile")
    points = []
    for s in shapes:
        for k in kernels:
            spec = registry.get(k)
            if tile:
                tiles = B.tiles_for(k, tile)
            elif not spec.tiles:
                tiles = [None]
            else:   # on a GPU 16 and 32; in emulation the slides' toy case is Width 3, TILE 2
                want = (16, 32) if gpu else ((2,) if max(s[-3:]) <= 4 else (8,))
                tiles = [t for t in want if t in spec.tiles] or [None]
            points += [B.Point("run", s, labels[dtype], k, t) for t in tiles]
    _check_points(points)
    rows = _run_points(points, repeats=repeats or (10 if gpu else 1), warmup=warmup, seed=seed)
    env = environment()
    if as_json:
        print(json.dumps({"environment": env, "results": rows}, indent=1))
    else:
        _results(rows, f"tiledmm run — {env['device']}")
        if not gpu:
            console.print("sim ms: the CPU simulator's time, which says nothing about GPU speed")
    if not all(r["ok"] for r in rows):
        raise typer.Exit(1)


def _suite_help() -> str:
    return "; ".join(f"{k}: {v}" for k, v in B.SUITE_HELP.items())


@command()
def bench(suite: Optional[List[str]] = typer.Option(
              None, "--suite", metavar="NAME",
              help=f"repeatable. {_suite_help()}. Default: square and irregular on a GPU, emulation without one."),
          precision: Optional[List[str]] = typer.Option(None, "--precision", "-p", metavar="|".join(B.PRECISIONS),
                                                        help="repeatable; default fp32, tf32, bf16."),
          kernel: Optional[List[str]] = typer.Option(None, "--kernel", "-k", metavar="NAME",
                                                     help="repeatable; default: every kernel."),
          tile: Optional[List[int]] = typer.Option(None, "--tile", "-t", metavar="T",
                                                   help="tiles for the kernels that take one (default: each "
                                                        "kernel's own); repeatable."),
          out: str = typer.Option("bench-out", metavar="DIR", help="folder for bench.csv, bench.json, bench.png."),
          repeats: int = typer.Option(20, metavar="N", help="timed runs per point (1 in emulation)."),
          warmup: int = typer.Option(5, metavar="N", help="untimed runs before timing."),
          seed: int = typer.Option(0, metavar="N", help="seed of the random inputs."),
          gpu_time: bool = typer.Option(False, "--gpu-time", help="also time each point with the GPU's and the "
                                        "host's share apart (GPU ms, host us a call, x cuBLAS in GPU time): "
                                        "for calls shorter than their launch path, where the queued time "
                                        "follows the host. On a GPU only.")):
    """Sweep kernels x shapes x precisions against cuBLAS; write CSV/JSON and PNG plots."""
    from .. import _backend, registry
    gpu = not _backend.emulating()
    suites = suite or (["square", "irregular"] if gpu else ["emulation"])
    for s in suites:
        if s not in B.SUITES:
            raise TiledmmError(f"unknown suite {s!r}; choose from {list(B.SUITES)}")
    precs = precision or ["fp32", "tf32", "bf16"]
    for p in precs:
        if p not in B.PRECISIONS:
            raise TiledmmError(f"unknown precision {p!r}; choose from {list(B.PRECISIONS)}")
    positive("--repeats", repeats)
    positive("--warmup", warmup, allow_zero=True)
    kernels = [k for k in (kernel or registry.names()) if k != "cublas"]
    for k in kernels:
        B.tiles_for(k, tile)        # unknown kernel, unsupported tile: refused here
    outdir = Path(out)
    if outdir.exists() and not outdir.is_dir():
        raise TiledmmError(f"--out {out}: exists and is not a folder")
    base = next(p for p in (outdir, *outdir.absolute().parents) if p.exists())
    if not base.is_dir() or not os.access(base, os.W_OK):
        raise TiledmmError(f"--out {out}: cannot create or write it ({base} is not a writable folder)")
    points = B.plan(suites, precs, kernels, tile)
    if not points:
        raise TiledmmError(_nothing_to_run(suites, precs, kernels, tile, gpu))
    if gpu_time and not gpu:
        raise TiledmmError("--gpu-time needs a GPU: in emulation there is no GPU time to take apart")
    rows = _run_points(points, repeats=repeats if gpu else 1, warmup=warmup, seed=seed, outdir=outdir,
                       gpu_time=gpu_time)
    env = environment()
    peaks = tuned = None
    if gpu:
        from ..analysis.device import query
        d = query()
        peaks = {"fp32": d.fp32_tflops, **d.tensor_tflops}
        tuned = _triton_choices()
    paths = B.write(rows, outdir, env, peaks, tuned)
    for s in dict.fromkeys(r["suite"] for r in rows):     # a table a suite: the suite in its title
        _results([r for r in rows if r["suite"] == s], f"tiledmm bench: suite {s} — {env['device']}")
    if not gpu:
        console.print("sim ms: the CPU simulator's time, which says nothing about GPU speed")
    summ = [s for s in B.summary(rows) if s["geomean_vs_cublas"] is not None]   # none in emulation: no table
    if summ:
        g = ("GPU geomean",) if any(s["geomean_gpu_vs_cublas"] for s in summ) else ()
        table("geometric mean x cuBLAS", ("suite", "prec", "kernel", "geomean") + g + ("n",),
              [(s["suite"], s["precision"], s["kernel"], fmt(s["geomean_vs_cublas"], ".3f"))
               + ((fmt(s["geomean_gpu_vs_cublas"], ".3f"),) if g else ()) + (s["n"],) for s in summ],
              right=("geomean", "n") + g, whole=("suite", "prec", "kernel"))
    for line in _skipped(suites, precs, kernels, tile):
        console.print(Text(line))
    console.print(escape("wrote " + ", ".join(map(str, paths))))
    if not all(r["ok"] for r in rows):
        raise typer.Exit(1)


def _nothing_to_run(suites: list, precs: list, kernels: list, tile, gpu: bool) -> str:
    """Why a bench plan is empty, and what would run: the suggestions never repeat what was asked."""
    from .. import registry
    simt = [k for k in kernels if registry.get(k).family == "simt"]
    head = f"nothing to run: no kernel of {kernels} runs suite(s) {suites} in {precs}"
    if simt and len(simt) == len(kernels) and "fp32" not in precs:
        return (f"{head}: the bench runs SIMT kernels in fp32 only; add -p fp32, or run "
                f"`tiledmm run --dtype float64 -k {simt[0]}` for float64")
    reasons = sorted({why for s in suites for shape in B.SUITES[s] for p in precs for k in kernels
                      for t in B.tiles_for(k, tile) if (why := B.why_not(B.Point(s, shape, p, k, t)))})
    hint = "; try --suite emulation" if not gpu and "emulation" not in suites else ""
    return f"{head} ({reasons[0]}{f' and {len(reasons) - 1} more reasons' if len(reasons) > 1 else ''}){hint}"


def _skipped(suites: list, precs: list, kernels: list, tile) -> list[str]:
    """What the plan left out and why, for the end of a bench: a line a reason ('not run: ...'), the
    points of a reason gathered (kernels and shapes named, counted where many)."""
    from .. import _backend, registry
    groups: dict[str, tuple[dict, dict]] = {}      # reason -> (kernels, shapes), in the order first met
    others = ", ".join(p for p in precs if p != "fp32")

    def note(why: str, kernel: str, shape: tuple) -> None:
        ks, ss = groups.setdefault(why, ({}, {}))
        ks[kernel] = ss[B.fmt_shape(shape)] = None
    for s in suites:
        for shape in B.SUITES[s]:
            for p in precs:
                for k in kernels:
                    spec = registry.get(k)
                    if spec.family == "simt" and p != "fp32":
                        note(f"the bench runs the SIMT kernels in fp32 only, not in {others} (`tiledmm run "
                             "--dtype float64` runs them in float64)", k, shape)
                    elif spec.family == "simt" and B.work(shape) > B.SIMT_MAX_WORK:
                        note(f"over {B.SIMT_MAX_WORK:,} multiply-adds, too slow for the SIMT kernels", k, shape)
                    elif len(shape) == 4 and not spec.batched:
                        note("a batch, which these kernels do not take", k, shape)
                    elif _backend.emulating() and spec.emulation_limit is not None and \
                            B.work(shape) > _backend.emulation_limit(spec.emulation_limit):
                        note("over the emulation limit (raise TILEDMM_EMULATION_LIMIT if you will wait)", k, shape)
                    else:
                        for t in B.tiles_for(k, tile):
                            why = B.why_not(B.Point(s, shape, p, k, t))
                            if why:
                                note(why, k, shape)

    def listed(names: dict, what: str) -> str:
        return ", ".join(names) if len(names) <= 4 else f"{len(names)} {what}"
    return [f"not run: {listed(ks, 'kernels')} on {listed(ss, 'shapes')}: {why}" for why, (ks, ss) in groups.items()]


def _triton_choices() -> dict:
    """What the Triton family's tuner chose in this process or read from the store, for bench.json:
    {"configs": {tuning key: "variant:config"}} (``tiledmm tune --show`` prints the store in words)."""
    from .. import tuning
    return {"configs": {k: v for k, v in tuning.remembered().items() if k.startswith("triton|")}}
