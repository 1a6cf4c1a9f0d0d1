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


def _print_kv(title: str, rows: dict) -> None:
    t = Table(title=title, show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right")
    for k, v in rows.items():
        t.add_row(str(k), v if isinstance(v, str) else (f"{v:,.4g}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)))
    console.print(t)


def _profile_or_device(profile: Optional[str]):
    from .analysis.device import current_or
    return current_or(profile)


@command()
def device(profile: Optional[str] = typer.Option(None, help="a built-in profile (g80, lecture1536, example150, "
                                                             "ampere, h100) instead of the GPU in use"),
           measure: bool = typer.Option(True, help="also measure device-to-device copy bandwidth (GPU only)"),
           as_json: bool = typer.Option(False, "--json")):
    """The properties the lectures query (cudaGetDeviceProperties), with derived peaks."""
    from . import _backend
    from .analysis.device import measure_copy_bandwidth
    d = _profile_or_device(profile)
    rows = d.as_dict()
    if measure and profile is None and not _backend.emulating():
        rows["measured copy GB/s (read+write)"] = measure_copy_bandwidth()
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    rows["cc"] = f"{d.cc[0]}.{d.cc[1]}"
    rows["tensor_tflops"] = ", ".join(f"{k} {v:g}" for k, v in d.tensor_tflops.items()) or "-"
    _print_kv(f"device — {d.name}", rows)


@command()
def occupancy(tile: Optional[int] = typer.Option(None, help="the lectures' tiled kernel with TILE_WIDTH tile"),
              kernel: Optional[str] = typer.Option(None, help="a registered SIMT kernel: resources read from its "
                                                              "compiled code (GPU)"),
              threads: Optional[int] = typer.Option(None, help="threads per block"),
              shared: int = typer.Option(0, help="shared memory per block, bytes"),
              regs: int = typer.Option(0, help="registers per thread"),
              profile: Optional[str] = typer.Option(None, help="built-in profile (default: the GPU in use)"),
              as_json: bool = typer.Option(False, "--json")):
    """Blocks per SM and the limiting factor, by the CUDA rules for the device."""
    from .analysis.occupancy import numba_resources, occupancy as occ, tiled_shared_bytes
    d = _profile_or_device(profile)
    loads = 2
    if kernel:
        res = numba_resources(kernel, tile or registry_default_tile(kernel))
        if not res:
            raise typer.BadParameter("--kernel reads a compiled kernel: needs a GPU and a SIMT kernel")
        threads, shared, regs = res["threads_per_block"], res["shared_per_block"], res["regs_per_thread"]
    elif tile:
        threads, shared = tile * tile, shared or tiled_shared_bytes(tile)
    if not threads:
        raise typer.BadParameter("give --tile, --kernel or --threads")
    o = occ(d, threads, shared_per_block=shared, regs_per_thread=regs, loads_per_thread=loads)
    if as_json:
        print(json.dumps(o.as_dict(), indent=1))
        return
    _print_kv(f"occupancy — {d.name}", {k: ("-" if v is None else ", ".join(v) if isinstance(v, list) else v)
                                        for k, v in o.as_dict().items()})


def registry_default_tile(kernel: str) -> int:
    from . import registry
    return registry.get(kernel).default_tile


@command()
def model(kernel: List[str] = typer.Option(["naive", "tiled"], "--kernel", "-k"),
          tile: List[int] = typer.Option([16, 32], "--tile", "-t"),
          profile: Optional[str] = typer.Option(None, help="built-in profile (default: the GPU in use)"),
          bandwidth: Optional[float] = typer.Option(None, help="GB/s instead of the profile's peak"),
          peak: Optional[float] = typer.Option(None, help="GFLOP/s instead of the profile's FP32 peak"),
          as_json: bool = typer.Option(False, "--json")):
    """Global bytes per FLOP, the bandwidth-bound ceiling BW/(B/FLOP), and which bound binds."""
    from . import registry
    from .analysis.model import roofline
    d = _profile_or_device(profile)
    rows = []
    for k in kernel:
        spec = registry.get(k)
        for t in ([None] if k.startswith("naive") or not spec.tiles else [t for t in tile if t in spec.tiles]
                  or [spec.default_tile]):
            rows.append(roofline(k, d, t, bandwidth_gbs=bandwidth, peak_gflops=peak).as_dict())
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    t = Table(title=f"traffic model — {d.name}")
    for col in ("kernel", "tile", "B/FLOP", "FLOP/B", "BW GB/s", "BW-bound GFLOP/s", "peak GFLOP/s", "binds"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(r["kernel"], _fmt(r["tile"], "d"), f"{r['bytes_per_flop']:.4g}", f"{r['intensity']:.3g}",
                  f"{r['bandwidth_gbs']:.4g}", f"{r['memory_bound_gflops']:,.1f}",
                  f"{r['compute_peak_gflops']:,.1f}", r["binds"])
    console.print(t)


@command()
def burst(burst_bytes: int = typer.Option(512, "--burst", help="DRAM burst size, bytes"),
          peak: float = typer.Option(240.0, help="peak bandwidth, GB/s"),
          index: List[str] = typer.Option(["4*i", "4*i+1"], "--index", help="element index each thread i reads"),
          threads: int = typer.Option(1024), itemsize: int = typer.Option(4),
          as_json: bool = typer.Option(False, "--json")):
    """Useful fraction of each DRAM burst for an access pattern, and the data rate it allows."""
    from .analysis.burst import burst_efficiency, parse_index, pattern
    r = burst_efficiency(pattern([parse_index(e) for e in index], threads, itemsize), burst_bytes, peak)
    if as_json:
        print(json.dumps(r.as_dict(), indent=1))
        return
    _print_kv(f"burst model — reads {' + '.join(f'A[{e}]' for e in index)}", r.as_dict())


def _ensure_emulation(argv_tail: list) -> None:
    """Traces need the CUDA simulator: on a GPU process, re-run this command in emulation."""
    from . import _backend
    if _backend.emulating():
        return
    import subprocess
    env = dict(os.environ, TILEDMM_EMULATE="1", TILEDMM_QUIET="1")
    raise typer.Exit(subprocess.call([sys.executable, "-m", "tiledmm.cli", *argv_tail], env=env))


@command()
def trace(kernel: str = typer.Option("tiled", "--kernel", "-k"), shape: str = typer.Option("3x3x3", "--shape", "-s"),
          tile: Optional[int] = typer.Option(None, "--tile", "-t", help="TILE_WIDTH (default: the slides' 2 "
                                                                          "where the kernel takes it, else its own)"),
          phases: bool = typer.Option(True, help="print per block/phase"),
          as_json: bool = typer.Option(False, "--json")):
    """Record every memory access of a SIMT kernel (in the simulator) and report reuse,
    coalescing, bank conflicts, and per block and phase what was loaded, zero-filled and stored."""
    _ensure_emulation(sys.argv[1:])
    from . import registry
    from .analysis.trace import trace as run_trace
    spec = registry.get(kernel)
    if tile is None and spec.tiles:
        tile = 2 if 2 in spec.tiles else spec.default_tile
    tr = run_trace(kernel, parse_shape(shape)[-3:], tile)
    summ = tr.summary()
    if as_json:
        summ["phases"] = tr.phases()
        print(json.dumps(summ, indent=1, default=str))
        return
    _print_kv(f"trace — {kernel}{f' TILE {tile}' if tile else ''} {shape}: grid {tr.grid}, block {tr.block}, "
              f"{'correct' if tr.result_ok else 'WRONG'}", summ["counts"])
    t = Table(title="reuse: global loads per element")
    for col in ("array", "loads", "unique", "per element", "min", "max"):
        t.add_column(col, justify="right")
    for a, r in summ["reuse"].items():
        t.add_row(a, str(r["loads"]), str(r["unique"]), f"{r['loads_per_element']:.3g}", str(r["min"]), str(r["max"]))
    console.print(t)
    t = Table(title="coalescing: per warp request")
    for col in ("access", "requests", "sectors/request", "128B lines/request", "threads/request"):
        t.add_column(col, justify="right")
    for a, r in summ["coalescing"].items():
        t.add_row(a, str(r["requests"]), f"{r['sectors_per_request']:.3g}", f"{r['lines_per_request']:.3g}",
                  f"{r['threads_per_request']:.3g}")
    console.print(t)
    t = Table(title="shared memory bank conflicts")
    for col in ("access", "requests", "extra wavefronts", "worst n-way"):
        t.add_column(col, justify="right")
    for a, r in summ["bank_conflicts"].items():
        t.add_row(a, str(r["requests"]), str(r["extra_wavefronts"]), str(r["worst_ways"]))
    console.print(t)
    if phases:
        for p in tr.phases():
            console.print(f"block {p['block'][:2]} phase {p['phase']}: M {p['M']} N {p['N']} "
                          f"zero-filled {p['zero_filled']} stored {p['stored']}")


@command()
def explain(shape: str = typer.Option("3x3x3", "--shape", "-s"), tile: int = typer.Option(2, "--tile", "-t"),
            out: str = typer.Option("explain.svg", help="output file: .svg or .png")):
    """Draw the slides' toy example from a trace: per block and phase, the loaded tiles,
    the zero-filled shared cells, and the threads that store P."""
    _ensure_emulation(sys.argv[1:])
    from .analysis.explain import explain_figure
    from .analysis.trace import trace as run_trace
    path = explain_figure(run_trace("tiled", parse_shape(shape)[-3:], tile), out)
    console.print(f"wrote {path}")


@command()
def roofline(bench_json: Optional[str] = typer.Option(None, "--bench", help="bench.json to place measured points"),
             profile: Optional[str] = typer.Option(None), out: str = typer.Option("roofline.png"),
             bandwidth: Optional[float] = typer.Option(None, help="GB/s (e.g. the measured copy rate)")):
    """Roofline chart (PNG): each SIMT kernel at its modelled intensity and, with --bench, its measured rate."""
    from . import registry
    from .analysis.explain import roofline_figure
    from .analysis.model import bytes_per_flop
    d = _profile_or_device(profile)
    measured = {}
    if bench_json:
        for r in json.loads(open(bench_json).read())["rows"]:
            if r["precision"] == "fp32" and r["tflops"]:
                key = (r["kernel"], r["tile"])
                measured[key] = max(measured.get(key, 0), r["tflops"] * 1000)
    points = []
    for s in registry.all_specs():
        if s.family != "simt":
            continue
        for t in ([s.default_tile] if s.name != "tiled" else [16, 32]):
            points.append({"label": f"{s.name}" + (f" T{t}" if s.name == "tiled" else ""),
                           "intensity": 1 / bytes_per_flop(s.name, t), "gflops": measured.get((s.name, t))})
    console.print(f"wrote {roofline_figure(d, points, out, bandwidth)}")


@command()
def claims(markdown: Optional[str] = typer.Option(None, help="write the table as Markdown to this file")):
    """Every quantitative claim in the lectures, recomputed by tiledmm (traces need emulation)."""
    from . import _backend
    from .analysis.claims import markdown as md, table
    _ensure_emulation(sys.argv[1:])
    rows = table(_backend.emulating())
    if markdown:
        open(markdown, "w").write(md(rows))
        console.print(f"wrote {markdown}")
    t = Table(title="the lectures' numbers, recomputed")
    for col in ("seed", "claim", "slide", "tiledmm", "agrees"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["seed"], r["claim"], str(r["slide"]), str(r["tiledmm"]),
                  {True: "yes", False: "[yellow]no[/yellow]", None: "-"}[r["agrees"]])
    console.print(t)


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
