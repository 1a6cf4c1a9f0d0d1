"""The ``tiledmm`` command line.

Every command checks its inputs before it does any work and reports a bad input as one
line (``error: ...``) on stderr with exit code 2; nothing a user types ends in a traceback
(``TILEDMM_DEBUG=1`` shows one for an unexpected failure). Tables go through ``table``.
"""
from __future__ import annotations

import contextlib
import datetime
import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import List, Optional

import click
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from . import __version__
from . import bench as B
from ._arrays import TiledmmError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Tiled matrix multiplication on NVIDIA GPUs: run, check, time and explain the kernels.")
console = Console(width=None if sys.stdout.isatty() else 132)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 132)

# commands that never run a kernel: no emulation banner for them
NO_KERNEL = {"kernels", "device", "occupancy", "model", "burst", "roofline", "tune"}
PROFILE_HELP = "a built-in profile (g80, lecture1536, example150, ampere, h100); default: the GPU in use"


def fail(message: str, code: int = 2):
    """One line on stderr and a non-zero exit."""
    err_console.print(Text("error: ", style="red") + Text(message), soft_wrap=True)
    raise typer.Exit(code)


def command(name: str | None = None):
    """``app.command`` that turns every error into a one-line message and a non-zero exit."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except (typer.Exit, typer.Abort, click.exceptions.ClickException):
                raise
            except KeyboardInterrupt:
                fail("interrupted", 130)
            except (TiledmmError, ValueError, OSError) as e:
                fail(str(e) or type(e).__name__)
            except Exception as e:  # noqa: BLE001 -- a bug in tiledmm: still a message, not a traceback
                if os.environ.get("TILEDMM_DEBUG"):
                    raise
                fail(f"unexpected {type(e).__name__}: {e} (TILEDMM_DEBUG=1 shows the traceback)", 1)
        return app.command(name)(wrapper)
    return deco


def _version(value: bool):
    if value:
        print(f"tiledmm {__version__}")
        raise typer.Exit()


@app.callback()
def _main(ctx: typer.Context,
          emulate: bool = typer.Option(False, "--emulate", metavar="",
                                       help="Run kernels in emulation even on a GPU machine."),
          version: bool = typer.Option(False, "--version", metavar="", callback=_version, is_eager=True,
                                       help="Print tiledmm's version and exit.")):
    if emulate:
        os.environ["TILEDMM_EMULATE"] = "1"
    if ctx.invoked_subcommand in NO_KERNEL:
        os.environ["TILEDMM_QUIET"] = "1"


# -- output --------------------------------------------------------------------------------------
def cell(v) -> Text | str:
    """A table cell: None -> '–', numbers with separators, lists joined; text is never read as markup."""
    if isinstance(v, Text):
        return v
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.4g}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, (list, tuple)):
        return escape(", ".join(map(str, v)) or "–")
    return escape(str(v))


def table(title: str, columns, rows, *, header: bool = True, right=(), fold=()) -> None:
    """The one table helper: columns named, rows of cells (see ``cell``); cells of the ``fold``
    columns wrap anywhere (long keys without spaces), never cut short."""
    t = Table(title=escape(title), show_header=header, min_width=min(len(title) + 4, 120))
    for c in columns:
        t.add_column(escape(c), justify="right" if c in right else "left", overflow="fold" if c in fold else "ellipsis")
    for r in rows:
        t.add_row(*map(cell, r))
    console.print(t)


def kv(title: str, d: dict) -> None:
    table(title, ("what", "value"), d.items(), header=False)


def fmt(x, spec: str):
    return None if x is None else format(x, spec)


def ok_cell(ok: bool) -> Text:
    return Text("ok") if ok else Text("FAIL", style="bold red")


def progress_bar():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err_console, transient=True)


# -- input ---------------------------------------------------------------------------------------
def parse_shape(text: str, *, batch: bool = True) -> tuple:
    """'3000x2000x4000' -> (3000, 2000, 4000): P (JxL) = M (JxK) @ N (KxL); a leading 4th number is a batch."""
    try:
        dims = tuple(int(x) for x in text.lower().replace("*", "x").split("x"))
    except ValueError:
        dims = ()
    if len(dims) not in ((3, 4) if batch else (3,)) or min(dims) < 1:
        if len(dims) == 4 and min(dims) >= 1:
            raise TiledmmError(f"shape {text!r}: this command takes one JxKxL product, not a batch; "
                               f"drop the leading batch size (e.g. {'x'.join(map(str, dims[1:]))})")
        raise TiledmmError(f"shape {text!r}: write JxKxL{' (or BxJxKxL)' if batch else ''} with positive "
                           "integers, e.g. 3000x2000x4000")
    return dims


_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12}


def parse_bytes(name: str, text: str) -> int:
    """'123', '512MiB', '16GiB', '1.5GB' -> bytes (binary KiB..TiB, decimal kB..TB); refused otherwise."""
    import re
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text or "")
    unit = m and m.group(2).lower()
    if not m or unit not in _UNITS:
        raise TiledmmError(f"{name} {text!r}: write a byte count as 123, 512MiB or 16GiB "
                           "(units B, KiB, MiB, GiB, TiB or kB, MB, GB, TB)")
    n = int(float(m.group(1)) * _UNITS[unit])
    if n < 1:
        raise TiledmmError(f"{name} {text!r}: must be at least 1 byte")
    return n


def human_bytes(n: float) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def mem_available() -> Optional[int]:
    """Host memory available for new allocations (MemAvailable in /proc/meminfo), None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def writable(path: str, suffixes=None) -> Path:
    """Check before any work that ``path`` can be written (and has a known suffix)."""
    p = Path(path)
    if suffixes and p.suffix.lower() not in suffixes:
        raise TiledmmError(f"{path}: the file name must end in {' or '.join(suffixes)}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise TiledmmError(f"{path}: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise TiledmmError(f"{path}: not writable")
    return p


def positive(name: str, v, allow_zero: bool = False):
    if v is not None and (v < 0 or (v == 0 and not allow_zero)):
        raise TiledmmError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {v}")


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


def _tile_cells(kernel: str, tile, shape) -> tuple:
    """(TILE_WIDTH or P tile per block, threads per block) for a results table: for a kernel without
    shared tiles (block tile 1x1, e.g. naive) the tile option is only the block's width."""
    from . import registry
    spec = registry.get(kernel)
    if tile is None or spec.launch_config is None:
        return tile, None
    *_, m, k, n = shape
    block = spec.launch_config(tile, m, k, n)[1]
    bt = spec.block_tile(tile) if spec.block_tile else None
    return (None if bt == (1, 1) else tile), "x".join(map(str, block))


def _results(rows: list[dict], title: str, suite: bool = False) -> None:
    cols = (("suite",) if suite else ()) + ("shape", "prec", "kernel", "tile", "block", "ms", "TFLOP/s",
                                            "x cuBLAS", "rel err", "check")
    out = []
    for r in rows:
        tile, block = _tile_cells(r["kernel"], r["tile"], tuple(map(int, r["shape"].split("x"))))
        ms = fmt(r["ms"], ".3f")
        out.append(((r["suite"],) if suite else ()) + (
            r["shape"], r["precision"], r["kernel"], tile, block,
            None if ms is None else ms + (" (emul.)" if r["emulated"] else ""),
            fmt(r["tflops"], ".3g"), fmt(r["vs_cublas"], ".2f"), f"{r['rel_err']:.1e}", ok_cell(r["ok"])))
    table(title, cols, out, right=("tile", "block", "ms", "TFLOP/s", "x cuBLAS", "rel err"))


def _check_points(points) -> None:
    for p in points:
        why = B.why_not(p)
        if why:
            raise TiledmmError(why)


def _run_points(points, *, repeats: int, warmup: int, seed: int) -> list[dict]:
    with progress_bar() as progress:
        return B.run(points, repeats=repeats, warmup=warmup, seed=seed, progress=progress)


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
    from . import _backend, registry
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
            console.print("times are emulation (CPU simulator) times; they say nothing about GPU speed")
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
          seed: int = typer.Option(0, metavar="N", help="seed of the random inputs.")):
    """Sweep kernels x shapes x precisions against cuBLAS; write CSV/JSON and PNG plots."""
    from . import _backend, registry
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
        where = "in emulation (no GPU): SIMT kernels up to 64^3 multiply-adds, triton up to 2^24" if not gpu else ""
        raise TiledmmError(f"nothing to run: no kernel of {kernels} runs suite(s) {suites} in {precs} {where}; "
                           + ("try --suite emulation, or a GPU" if not gpu else "choose other kernels"))
    rows = _run_points(points, repeats=repeats if gpu else 1, warmup=warmup, seed=seed)
    env = environment()
    peaks = tuned = None
    if gpu:
        from .analysis.device import query
        d = query()
        peaks = {"fp32": d.fp32_tflops, **d.tensor_tflops}
        tuned = _triton_choices()
    paths = B.write(rows, outdir, env, peaks, tuned)
    _results(rows, f"tiledmm bench — {env['device']}", suite=True)
    table("geometric mean x cuBLAS", ("suite", "prec", "kernel", "geomean", "n"),
          [(s["suite"], s["precision"], s["kernel"], fmt(s["geomean_vs_cublas"], ".3f"), s["n"])
           for s in B.summary(rows)], right=("geomean", "n"))
    for k, v in (tuned or {}).get("variants", {}).items():
        console.print(escape(f"triton variant for {k}: {v}"))
    console.print(escape("wrote " + ", ".join(map(str, paths))))
    if not all(r["ok"] for r in rows):
        raise typer.Exit(1)


def _triton_choices() -> dict:
    """What the Triton autotuners chose, for bench.json (empty where the block family says nothing)."""
    try:
        from .kernels.block import matmul as blk
    except ImportError:
        return {}
    return {name: getattr(blk, fn)() for name, fn in (("configs", "tuned_configs"), ("variants", "variant_choices"))
            if hasattr(blk, fn)}


def _profile_or_device(profile: Optional[str]):
    from .analysis.device import current_or
    return current_or(profile)


@command()
def device(profile: Optional[str] = typer.Option(None, metavar="NAME", help=PROFILE_HELP + "."),
           measure: bool = typer.Option(True, help="also measure device-to-device copy bandwidth (GPU only)."),
           as_json: bool = typer.Option(False, "--json", metavar="", help="Print JSON instead of a table.")):
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
    rows["cc"] = None if d.cc == (0, 0) else f"{d.cc[0]}.{d.cc[1]}"
    rows["tensor_tflops"] = ", ".join(f"{k} {v:g}" for k, v in d.tensor_tflops.items()) or None
    # a profile leaves what the lectures do not say at 0: unknown, shown as '–'
    kv(f"device — {d.name}", {k: (None if v in (0, 0.0, "") else v) for k, v in rows.items()})


@command()
def occupancy(tile: Optional[int] = typer.Option(None, metavar="T", help="the lectures' tiled kernel with "
                                                 "TILE_WIDTH T (T*T threads, two T x T float32 shared tiles)."),
              kernel: Optional[str] = typer.Option(None, metavar="NAME", help="a registered SIMT kernel: "
                                                   "resources read from its compiled code (GPU only)."),
              threads: Optional[int] = typer.Option(None, metavar="N", help="threads per block."),
              shared: int = typer.Option(0, metavar="BYTES", help="shared memory per block."),
              regs: int = typer.Option(0, metavar="N", help="registers per thread."),
              profile: Optional[str] = typer.Option(None, metavar="NAME", help=PROFILE_HELP + "."),
              as_json: bool = typer.Option(False, "--json", metavar="", help="Print JSON instead of a table.")):
    """Blocks per SM and the limiting factor, by the CUDA rules for the device."""
    from . import _backend, registry
    from .analysis.occupancy import numba_resources, occupancy as occ, tiled_shared_bytes
    positive("--tile", tile)
    positive("--threads", threads)
    positive("--shared", shared, allow_zero=True)
    positive("--regs", regs, allow_zero=True)
    if not (tile or kernel or threads):
        raise TiledmmError("give --tile, --kernel or --threads")
    d = _profile_or_device(profile)
    if kernel:
        spec = registry.get(kernel)
        if spec.make is None:
            raise TiledmmError(f"--kernel {kernel}: not a SIMT kernel (occupancy reads a compiled numba kernel)")
        if _backend.emulating():
            raise TiledmmError("--kernel reads the compiled kernel's registers: needs a GPU; "
                               "without one give --tile, or --threads/--shared/--regs")
        res = numba_resources(kernel, spec.check_tile(tile))
        threads, shared, regs = res["threads_per_block"], res["shared_per_block"], res["regs_per_thread"]
    elif tile:
        threads, shared = tile * tile, shared or tiled_shared_bytes(tile)
    if not threads:
        raise TiledmmError("give --tile, --kernel or --threads")
    o = occ(d, threads, shared_per_block=shared, regs_per_thread=regs, loads_per_thread=2)
    if as_json:
        print(json.dumps(o.as_dict(), indent=1))
        return
    kv(f"occupancy — {d.name}", {k: (v or None) if k == "why_not" else v for k, v in o.as_dict().items()})


@command()
def model(kernel: Optional[List[str]] = typer.Option(None, "--kernel", "-k", metavar="NAME",
                                                     help="repeatable; default naive and tiled."),
          tile: Optional[List[int]] = typer.Option(None, "--tile", "-t", metavar="T",
                                                   help="repeatable; default 16 and 32 where the kernel takes "
                                                        "them, else its own."),
          profile: Optional[str] = typer.Option(None, metavar="NAME", help=PROFILE_HELP + "."),
          bandwidth: Optional[float] = typer.Option(None, metavar="GB/s", help="instead of the profile's peak."),
          peak: Optional[float] = typer.Option(None, metavar="GFLOP/s", help="instead of the profile's FP32 peak."),
          as_json: bool = typer.Option(False, "--json", metavar="", help="Print JSON instead of a table.")):
    """Global bytes per FLOP, the bandwidth-bound ceiling BW/(B/FLOP), and which bound binds."""
    from . import registry
    from .analysis.model import roofline
    positive("--bandwidth", bandwidth)
    positive("--peak", peak)
    d = _profile_or_device(profile)
    rows = []
    for k in kernel or ["naive", "tiled"]:
        spec = registry.get(k)
        if tile:
            tiles = B.tiles_for(k, tile)
        else:
            tiles = [t for t in (16, 32) if t in spec.tiles] or [spec.default_tile]
        seen = {}
        for t in tiles:
            r = roofline(k, d, t, bandwidth_gbs=bandwidth, peak_gflops=peak).as_dict()
            if r["bytes_per_flop"] in seen:     # traffic independent of the tile (naive): one row, tile '–'
                seen[r["bytes_per_flop"]]["tile"] = None
                continue
            seen[r["bytes_per_flop"]] = r
            rows.append(r)
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table(f"traffic model — {d.name}",
          ("kernel", "tile", "B/FLOP", "FLOP/B", "BW GB/s", "BW-bound GFLOP/s", "peak GFLOP/s", "binds"),
          [(r["kernel"], r["tile"], f"{r['bytes_per_flop']:.4g}", f"{r['intensity']:.3g}", f"{r['bandwidth_gbs']:.4g}",
            f"{r['memory_bound_gflops']:,.1f}", fmt(r["compute_peak_gflops"] or None, ",.1f"), r["binds"])
           for r in rows], right=("tile", "B/FLOP", "FLOP/B", "BW GB/s", "BW-bound GFLOP/s", "peak GFLOP/s"))


@command()
def burst(burst_bytes: int = typer.Option(512, "--burst", metavar="BYTES", help="DRAM burst size."),
          peak: float = typer.Option(240.0, metavar="GB/s", help="peak bandwidth."),
          index: List[str] = typer.Option(["4*i", "4*i+1"], "--index", metavar="EXPR",
                                          help="element index each thread i reads (i, integers, + - *); "
                                               "repeatable."),
          threads: int = typer.Option(1024, metavar="N", help="threads reading."),
          itemsize: int = typer.Option(4, metavar="BYTES", help="bytes per element."),
          as_json: bool = typer.Option(False, "--json", metavar="", help="Print JSON instead of a table.")):
    """Useful fraction of each DRAM burst for an access pattern, and the data rate it allows."""
    from .analysis.burst import burst_efficiency, parse_index, pattern
    for name, v in (("--burst", burst_bytes), ("--peak", peak), ("--threads", threads), ("--itemsize", itemsize)):
        positive(name, v)
    if threads * len(index) > 2 ** 22:
        raise TiledmmError(f"--threads {threads} x {len(index)} indices: at most {2 ** 22:,} accesses")
    fns = [parse_index(e) for e in index]
    r = burst_efficiency(pattern(fns, threads, itemsize), burst_bytes, peak)
    if as_json:
        print(json.dumps(r.as_dict(), indent=1))
        return
    kv(f"burst model — each thread i reads {' and '.join(f'A[{e}]' for e in index)}", r.as_dict())


def _ensure_emulation() -> None:
    """Traces need the CUDA simulator: on a GPU process, re-run this command in emulation."""
    from . import _backend
    if _backend.emulating():
        return
    import subprocess
    env = dict(os.environ, TILEDMM_EMULATE="1", TILEDMM_QUIET="1")
    raise typer.Exit(subprocess.call([sys.executable, "-m", "tiledmm.cli", *sys.argv[1:]], env=env))


def _traced(kernel: str, shape: tuple, tile, what: str):
    """Record a trace with a progress bar (one step per block)."""
    from .analysis.trace import trace as run_trace
    with progress_bar() as progress:
        task = progress.add_task(f"{what}: simulating {kernel} {'x'.join(map(str, shape))}", total=None)
        return run_trace(kernel, shape, tile,
                         progress=lambda done, total: progress.update(task, completed=done, total=total))


@command()
def trace(kernel: str = typer.Option("tiled", "--kernel", "-k", metavar="NAME", help="a SIMT kernel."),
          shape: str = typer.Option("3x3x3", "--shape", "-s", metavar="JxKxL", help="P = M (JxK) @ N (KxL); "
                                    "J*K*L <= 64^3."),
          tile: Optional[int] = typer.Option(None, "--tile", "-t", metavar="T", help="TILE_WIDTH (default: the "
                                             "slides' 2 where the kernel takes it, else its own)."),
          phases: bool = typer.Option(True, help="print the per block and phase table."),
          as_json: bool = typer.Option(False, "--json", metavar="", help="Print JSON instead of tables.")):
    """Record every memory access of a SIMT kernel (in the simulator) and report reuse,
    coalescing, bank conflicts, and per block and phase what was loaded, zero-filled and stored."""
    from . import registry
    from .analysis.trace import check_request, describe_step
    spec = registry.get(kernel)
    if tile is None and spec.tiles:
        tile = 2 if 2 in spec.tiles else spec.default_tile
    dims = parse_shape(shape, batch=False)
    tile = check_request(kernel, dims, tile)
    _ensure_emulation()
    tr = _traced(kernel, dims, tile, "trace")
    summ = tr.summary()
    if as_json:
        summ["phases"] = [dict(p, shared={a: {",".join(map(str, i)): v for i, v in cells.items()}
                                          for a, cells in p["shared"].items()}) for p in tr.phases()]
        print(json.dumps(summ, indent=1, default=str))
        return
    kv(f"trace — {kernel}{f' TILE_WIDTH {tile}' if tile else ''} {shape}: gridDim {tr.grid}, blockDim {tr.block}, "
       f"result {'correct' if tr.result_ok else 'WRONG'}", summ["counts"])
    table("reuse: global loads per element", ("array", "loads", "unique", "per element", "min", "max"),
          [(a, r["loads"], r["unique"], f"{r['loads_per_element']:.3g}", r["min"], r["max"])
           for a, r in summ["reuse"].items()], right=("loads", "unique", "per element", "min", "max"))
    table("coalescing: per warp request", ("access", "requests", "sectors/request", "128B lines/request",
                                           "threads/request"),
          [(a, r["requests"], f"{r['sectors_per_request']:.3g}", f"{r['lines_per_request']:.3g}",
            f"{r['threads_per_request']:.3g}") for a, r in summ["coalescing"].items()],
          right=("requests", "sectors/request", "128B lines/request", "threads/request"))
    table("shared memory bank conflicts", ("access", "requests", "extra wavefronts", "worst n-way"),
          [(a, r["requests"], r["extra_wavefronts"], r["worst_ways"]) for a, r in summ["bank_conflicts"].items()],
          right=("requests", "extra wavefronts", "worst n-way"))
    if phases:
        table("per block and phase (blockIdx.x, blockIdx.y; threads as threadIdx.x,y)",
              ("blockIdx.x", "blockIdx.y", "step", "M loaded", "N loaded", "zero-filled", "P stored", "by threads"),
              [describe_step(p) for p in tr.phases()], right=("blockIdx.x", "blockIdx.y"))


@command()
def explain(shape: str = typer.Option("3x3x3", "--shape", "-s", metavar="JxKxL",
                                      help="P = M (JxK) @ N (KxL); per-thread detail up to 8 in each dimension, "
                                           "a per-block summary beyond."),
            tile: int = typer.Option(2, "--tile", "-t", metavar="T", help="TILE_WIDTH of the tiled kernel."),
            out: str = typer.Option("explain.svg", metavar="FILE", help="output file: .svg, .png or .pdf.")):
    """Draw the slides' tiled example from a trace: per block and phase, the tiles loaded,
    the shared-tile contents (zero-filled cells grey), and the threads that store P."""
    from .analysis.explain import check_explain, explain_figure
    dims = parse_shape(shape, batch=False)
    path = writable(out, (".svg", ".png", ".pdf"))
    view = check_explain(dims, tile)
    _ensure_emulation()
    tr = _traced("tiled", dims, tile, "explain")
    with progress_bar() as progress:
        task = progress.add_task("drawing", total=None)
        explain_figure(tr, path, view=view,
                       progress=lambda done, total: progress.update(task, completed=done, total=total))
    console.print(escape(f"wrote {path} ({view} view)"))


@command()
def roofline(bench_json: Optional[str] = typer.Option(None, "--bench", metavar="FILE",
                                                      help="a bench.json from a GPU run: its fp32 rates are placed "
                                                           "as measured points."),
             profile: Optional[str] = typer.Option(None, metavar="NAME", help=PROFILE_HELP + "."),
             out: str = typer.Option("roofline.png", metavar="FILE", help="output file: .png, .svg or .pdf."),
             bandwidth: Optional[float] = typer.Option(None, metavar="GB/s",
                                                       help="instead of the profile's peak (e.g. the measured "
                                                            "copy rate).")):
    """Roofline chart: each SIMT kernel at its modelled intensity and, with --bench, its measured rate."""
    from . import registry
    from .analysis.explain import roofline_figure
    from .analysis.model import bytes_per_flop
    positive("--bandwidth", bandwidth)
    path = writable(out, (".png", ".svg", ".pdf"))
    d = _profile_or_device(profile)
    measured = _measured(bench_json) if bench_json else {}
    points = []
    for s in registry.all_specs():
        if s.make is None or s.block_tile is None:     # the SIMT kernels (what the model describes)
            continue
        seen = set()
        for t in dict.fromkeys([s.default_tile, max(s.tiles, default=None)]):
            i = 1 / bytes_per_flop(s.name, t)
            if i in seen:
                continue
            seen.add(i)
            label = s.name + (f" T{t}" if len(s.tiles) > 1 and len({bytes_per_flop(s.name, u) for u in s.tiles}) > 1
                              else "")
            points.append({"label": label, "intensity": i, "gflops": measured.get((s.name, t))})
    console.print(escape(f"wrote {roofline_figure(d, points, path, bandwidth)}"))


def _measured(path: str) -> dict:
    """(kernel, tile) -> best fp32 GFLOP/s from a bench.json; emulation timings are refused."""
    try:
        doc = json.loads(Path(path).read_text())
        rows = doc["rows"]
        emulated = doc.get("environment", {}).get("mode") == "emulation" or any(r.get("emulated") for r in rows)
    except FileNotFoundError:
        raise TiledmmError(f"--bench {path}: no such file") from None
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        raise TiledmmError(f"--bench {path}: not a bench.json written by `tiledmm bench`") from None
    if emulated:
        raise TiledmmError(f"--bench {path}: its times are emulation (CPU simulator) times, which say nothing "
                           "about GPU speed; give a bench.json from a GPU run, or leave --bench out")
    measured = {}
    for r in rows:
        if r.get("precision") == "fp32" and r.get("tflops"):
            key = (r["kernel"], r.get("tile"))
            measured[key] = max(measured.get(key, 0), r["tflops"] * 1000)
    return measured


@command()
def claims(markdown: Optional[str] = typer.Option(None, metavar="FILE", help="also write the table as Markdown "
                                                  "(docs/claims.md is written this way).")):
    """Every quantitative claim in the lectures, recomputed by tiledmm (traces need emulation)."""
    from . import _backend
    from .analysis.claims import markdown as md, table as claims_table
    path = writable(markdown) if markdown else None
    _ensure_emulation()
    rows = claims_table(_backend.emulating())
    if path:
        path.write_text(md(rows))
    notes = [r for r in rows if r["note"]]
    mark = {r["id"]: f" ({i})" for i, r in enumerate(notes, start=1)}
    table("the lectures' numbers, recomputed", ("seed", "claim", "slide", "tiledmm", "agrees"),
          [(r["seed"], r["claim"], str(r["slide"]), str(r["tiledmm"]),
            {True: Text("yes"), False: Text("no", style="yellow"), None: Text("–")}[r["agrees"]]
            + Text(mark.get(r["id"], ""))) for r in rows])
    for r in notes:   # why a slide and tiledmm differ (and other notes), unwrapped
        console.print(Text(f"({mark[r['id']].strip()[1:-1]}) {r['id']}: {r['note']}"), soft_wrap=True)
    if path:
        console.print(escape(f"wrote {path}"))


# -- tuning --------------------------------------------------------------------------------------
TUNE_DTYPES = ("float32", "float16", "bfloat16", "float64")
LAYOUTS = ("nn", "nt", "tn", "tt")


@contextlib.contextmanager
def _recording_choices(record: list):
    """While inside, note every ``tuning.choose`` call: its key, the choice, what was stored before,
    the seconds it took (the timing of candidates, when it tuned)."""
    from . import tuning
    real = tuning.choose

    def choose(key, candidates, model_pick, **kw):
        before = tuning.lookup(key)
        t0 = time.perf_counter()
        name = real(key, candidates, model_pick, **kw)
        record.append({"key": key, "choice": name, "before": before, "stored": tuning.lookup(key),
                       "candidates": len(candidates), "s": time.perf_counter() - t0})
        return name
    tuning.choose = choose
    try:
        yield record
    finally:
        tuning.choose = real


def _how(rec: dict) -> str:
    if rec["stored"] is None:
        return "model's pick (one candidate: nothing to time)" if rec["candidates"] == 1 else \
            "model's pick (no candidate ran)"
    if rec["before"] == rec["choice"]:
        return "remembered"
    return f"tuned now ({rec['candidates']} candidates timed)"


def _tune_operand(batch: int, rows: int, cols: int, transposed: bool, dtype):
    """A random rows x cols CUDA operand (batched when batch > 1); 't': the transpose of a row-major array."""
    import torch
    shape = ((batch,) if batch > 1 else ()) + ((cols, rows) if transposed else (rows, cols))
    t = torch.randn(shape, device="cuda", dtype=dtype)
    return t.transpose(-1, -2) if transposed else t


def _read_store(strict: bool = True):
    """(path, {key: choice} or None when there is no store file) for this GPU and library versions."""
    from . import tuning
    path = tuning.store_path()
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return path, None
    except (ValueError, UnicodeDecodeError):
        doc = None
    if not isinstance(doc, dict):
        if strict:
            raise TiledmmError(f"{path}: not a tuning store (not a JSON object); `tiledmm tune --forget` removes it")
        doc = {}
    return path, doc


def _show_store() -> None:
    path, doc = _read_store()
    if not doc:
        console.print(escape(f"no tuned choices stored for this GPU and these library versions "
                             f"({path} {'is empty' if doc == {} else 'does not exist'})"), soft_wrap=True)
        return
    table(f"tuning store: {len(doc)} choice{'s' * (len(doc) != 1)}", ("key", "choice"), sorted(doc.items()),
          fold=("key", "choice"))
    console.print(escape(f"store: {path}"), soft_wrap=True)


def _forget_store() -> None:
    from . import tuning
    path, doc = _read_store(strict=False)
    if doc is None:
        console.print(escape(f"nothing to forget: {path} does not exist"), soft_wrap=True)
        return
    if doc:
        table(f"forgetting {len(doc)} tuned choice{'s' * (len(doc) != 1)}", ("key", "choice"), sorted(doc.items()),
              fold=("key", "choice"))
    path.unlink()
    tuning.forget()
    console.print(escape(f"removed {path}"), soft_wrap=True)


@command()
def tune(shapes: Optional[List[str]] = typer.Argument(None, metavar="JxKxL", hidden=True,   # (told above)
                                                       help="shapes P (JxK @ KxL) to tune; a leading 4th number "
                                                            "is a batch."),
         dtype: Optional[List[str]] = typer.Option(None, "--dtype", metavar="|".join(TUNE_DTYPES),
                                                   help="repeatable; default float32."),
         precision: Optional[str] = typer.Option(None, metavar="ieee|tf32",
                                                 help="float32 only: ieee (default) or tf32 (tensor cores)."),
         kernel: Optional[str] = typer.Option(None, "--kernel", "-k", metavar="NAME",
                                              help="default: tiledmm.matmul's for the dtype (triton; autotuned "
                                                   "for float64)."),
         batch: int = typer.Option(1, metavar="B", help="batch size of every shape."),
         layout: str = typer.Option("nn", metavar="nn|nt|tn|tt",
                                    help="storage of a and b: n row-major, t the transpose of a row-major array."),
         show: bool = typer.Option(False, "--show", metavar="",
                                   help="List the tuned choices stored for this GPU and library versions."),
         forget: bool = typer.Option(False, "--forget", metavar="", help="Empty that store (listing what goes).")):
    """Tune ahead of time: for each shape JxKxL given (P = M (JxK) @ N (KxL), e.g. 4096x4096x4096
    128x4096x11008; a leading 4th number is a batch), time the candidate kernels and configs of its
    class on this GPU once (what tiledmm.matmul's first call does) and remember the fastest on disk."""
    from . import _backend, registry, tuning
    from .api import default_kernel, matmul
    if show and forget:
        raise TiledmmError("give --show or --forget, not both")
    if (show or forget) and shapes:
        raise TiledmmError(f"{'--show' if show else '--forget'} takes no shapes")
    if show:
        return _show_store()
    if forget:
        return _forget_store()
    if not shapes:
        raise TiledmmError("give the shapes to tune (e.g. tiledmm tune 1024x1024x1024 4096x4096x4096), "
                           "or --show / --forget")
    dtypes = list(dict.fromkeys(dtype or ["float32"]))
    for d in dtypes:
        if d not in TUNE_DTYPES:
            raise TiledmmError(f"--dtype {d!r}: choose from {', '.join(TUNE_DTYPES)}")
    if layout not in LAYOUTS:
        raise TiledmmError(f"--layout {layout!r}: choose nn, nt, tn or tt (a's then b's storage: "
                           "n row-major, t transposed)")
    positive("--batch", batch)
    problems = []
    for s in shapes:
        dims = parse_shape(s)
        if len(dims) == 4:
            if batch not in (1, dims[0]):
                raise TiledmmError(f"shape {s!r} has batch {dims[0]} and --batch is {batch}: give one of them")
            problems.append(dims)
        else:
            problems.append((batch, *dims))
    problems = list(dict.fromkeys(problems))
    if precision is not None:
        if precision not in ("ieee", "tf32"):
            raise TiledmmError(f"--precision {precision!r}: choose ieee or tf32")
        other = [d for d in dtypes if d != "float32"]
        if other:
            raise TiledmmError(f"--precision {precision}: float32 only; {other[0]} takes none "
                               "(drop --precision, or tune that dtype separately)")
    specs = {}
    for d in dtypes:
        spec = registry.get(kernel or default_kernel(d))
        if d not in spec.dtypes:
            raise TiledmmError(f"kernel {spec.name!r} supports dtypes {list(spec.dtypes)}, not {d}")
        if precision is not None and "precision" not in spec.options:
            raise TiledmmError(f"--precision: kernel {spec.name!r} has no precision option")
        specs[d] = spec
    if _backend.emulating():
        raise TiledmmError("nothing to tune without a GPU: in emulation each kernel runs one fixed configuration "
                           "(tiledmm tune --show and --forget still work)")
    import torch
    free = torch.cuda.mem_get_info()[0]
    for b, m, k, n in problems:
        for d in dtypes:
            need = b * (m * k + k * n + 2 * m * n) * getattr(torch, d).itemsize
            if need > 0.9 * free:
                raise TiledmmError(f"shape {'x'.join(map(str, (b, m, k, n) if b > 1 else (m, k, n)))} {d}: operands, "
                                   f"result and a tuning scratch need {human_bytes(need)} of GPU memory, "
                                   f"{human_bytes(free)} is free; a smaller shape of the same class tunes the same key")
    if tuning.mode() == "off":
        console.print("TILEDMM_TUNE=off does not apply here: tune times the candidates")
    rows, seen = [], []
    prev_mode = tuning.mode()
    tuning.set_mode("on")
    try:
        with progress_bar() as progress:
            task = progress.add_task("tuning", total=len(problems) * len(dtypes))
            for b, m, k, n in problems:
                label = "x".join(map(str, (b, m, k, n) if b > 1 else (m, k, n)))
                for d in dtypes:
                    progress.update(task, description=f"tuning {label} {d}")
                    dt = getattr(torch, d)
                    a = _tune_operand(b, m, k, layout[0] == "t", dt)
                    bb = _tune_operand(b, k, n, layout[1] == "t", dt)
                    torch.cuda.synchronize()
                    with _recording_choices([]) as record:
                        t0 = time.perf_counter()
                        matmul(a, bb, kernel=kernel, precision=precision)
                        torch.cuda.synchronize()
                        secs = time.perf_counter() - t0
                    del a, bb
                    spec = specs[d]
                    cls = (spec.name, d, precision, layout, b > 1, registry.shape_class(m, n, k))
                    if record:
                        key = "\n".join(r["key"] for r in record)
                        choice = "\n".join(r["choice"] for r in record)
                        how = "; ".join(dict.fromkeys(_how(r) for r in record))
                        seen.append((cls, key, choice, label))
                    else:
                        earlier = [s for s in seen if s[0] == cls]
                        if earlier:
                            _, key, choice, first = earlier[-1]
                            how = f"remembered (same class as {first})"
                        else:
                            key = choice = None
                            how = "chosen earlier in this process" if "config" in spec.options else \
                                f"no tuner: {spec.name} has one configuration"
                    dlabel = d + (f"/{precision}" if precision else "")
                    rows.append((label, dlabel, spec.name, key, choice, how, f"{secs:.3g}"))
                    progress.advance(task)
    finally:
        tuning.set_mode(prev_mode)
    table(f"tiledmm tune — {environment()['device']}, layout {layout}",
          ("shape", "dtype", "kernel", "tuning key", "choice", "how", "first call s"), rows,
          right=("first call s",), fold=("tuning key", "choice"))
    console.print(escape(f"store: {tuning.store_path()}"), soft_wrap=True)


# -- out of core ---------------------------------------------------------------------------------
OOC_DTYPES = ("float32", "float16", "bfloat16")
OOC_TOL = {"float32": 1e-4, "float16": 3e-3, "bfloat16": 1.5e-2}


def _host_matrix(rows: int, cols: int, dtype: str, pinned: bool, registered: list):
    """An uninitialised host operand: page-locked torch (registered with CUDA, no power-of-two rounding of
    torch's pinned allocator), else numpy for float32/float16 and a pageable torch tensor for bfloat16."""
    import numpy as np
    import torch
    if pinned:
        t = torch.empty((rows, cols), dtype=getattr(torch, dtype))
        err = torch.cuda.cudart().cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0)
        if int(err) != 0:
            raise TiledmmError(f"--pinned: page-locking {human_bytes(t.numel() * t.element_size())} failed "
                               f"(cudaHostRegister: {err}); run without --pinned")
        registered.append(t)
        return t
    if dtype == "bfloat16":
        return torch.empty((rows, cols), dtype=torch.bfloat16)
    return torch.from_numpy(np.empty((rows, cols), dtype=dtype))


@command()
def outofcore(shape: str = typer.Option(..., "--shape", "-s", metavar="JxKxL",
                                        help="P = M (JxK) @ N (KxL), random host operands; in emulation at most "
                                             "the kernel's emulation limit of multiply-adds."),
              dtype: str = typer.Option("float32", metavar="|".join(OOC_DTYPES),
                                        help="element type (float32, float16: numpy arrays; bfloat16: torch "
                                             "tensors); 16-bit products accumulate in float32 on the device."),
              max_device_bytes: Optional[str] = typer.Option(
                  None, "--max-device-bytes", metavar="BYTES",
                  help="device budget for tiles: 123, 512MiB, 16GiB (default: free GPU memory less a reserve; in "
                       "emulation a quarter of the operands, so that there are several blocks)."),
              pinned: bool = typer.Option(False, "--pinned", metavar="",
                                          help="Page-locked torch host operands (copies go straight to the GPU) "
                                               "instead of pageable ones. GPU only."),
              kernel: Optional[str] = typer.Option(None, "--kernel", "-k", metavar="NAME",
                                                   help="the device GEMM (default: tiledmm.matmul's for the dtype)."),
              check_rows: int = typer.Option(64, metavar="N", help="rows of the result checked against float64, "
                                             "block edges among them (0: no check)."),
              check_cols: int = typer.Option(2048, metavar="N", help="columns of those rows checked."),
              seed: int = typer.Option(0, metavar="N", help="seed of the random operands.")):
    """Out of core: multiply random host matrices larger than the GPU's memory, streamed through it in
    blocks (tiledmm.outofcore) under a progress bar; check sampled rows against float64; report the
    rate and how busy the copy-in, compute and copy-out streams were."""
    from . import _backend, registry
    from .api import default_kernel
    m, k, n = parse_shape(shape, batch=False)
    if dtype not in OOC_DTYPES:
        raise TiledmmError(f"--dtype {dtype!r}: choose float32, float16 or bfloat16")
    budget = None if max_device_bytes is None else parse_bytes("--max-device-bytes", max_device_bytes)
    positive("--check-rows", check_rows, allow_zero=True)
    positive("--check-cols", check_cols)
    spec = registry.get(kernel or default_kernel(dtype))
    if dtype not in spec.dtypes:
        raise TiledmmError(f"kernel {spec.name!r} supports dtypes {list(spec.dtypes)}, not {dtype}")
    gpu = not _backend.emulating()
    if pinned and not gpu:
        raise TiledmmError("--pinned: page-locked host memory needs a GPU; none is in use (emulation)")
    import torch
    from .outofcore import check_sampled, fill_random, matmul_out_of_core, plan_out_of_core, row_chunks, tiledmm_gemm
    tdtype = getattr(torch, dtype)
    host = (m * k + k * n + m * n) * tdtype.itemsize
    avail = mem_available()
    if avail is not None and host > 0.9 * avail:
        raise TiledmmError(f"{shape} {dtype}: A, B and C take {human_bytes(host)} of host memory, "
                           f"{human_bytes(avail)} is available (MemAvailable in /proc/meminfo)")
    if not gpu:
        if spec.emulation_limit is None:
            raise TiledmmError(f"kernel {spec.name!r} needs a GPU; none is in use (emulation)")
        limit = _backend.emulation_limit(spec.emulation_limit)
        if m * k * n > limit:
            raise TiledmmError(f"{shape}: {m * k * n:,} multiply-adds, over the emulation limit of {limit:,} for "
                               f"kernel {spec.name!r} (no GPU: the CPU stands in for it); try 64x48x80")
        budget = budget or max(host // 4, 4096)
    acc = torch.float32 if dtype != "float32" else None
    plan = plan_out_of_core(m, n, k, tdtype, acc_dtype=acc, max_device_bytes=budget,
                            direct=(pinned, pinned, pinned and acc is None))
    console.print(escape(f"plan: {plan.describe()}"), soft_wrap=True)
    registered: list = []
    done = [0, plan.steps]
    try:
        with progress_bar() as progress:
            a, b, c = (_host_matrix(r, q, dtype, pinned, registered) for r, q in ((m, k), (k, n), (m, n)))
            task = progress.add_task(f"random operands ({human_bytes(host)})",
                                     total=sum(len(row_chunks(t)) for t in (a, b, c)))
            for t, s, poison in ((a, 2 * seed + 1, False), (b, 2 * seed + 2, False), (c, 0, True)):
                fill_random(t, s, nan=poison, advance=lambda: progress.advance(task))   # C: NaN until written
            progress.remove_task(task)
            task = progress.add_task(f"out of core {shape} {dtype}", total=plan.steps)

            def on_progress(d, total):
                done[:] = [d, total]
                progress.update(task, completed=d, total=total)
            stats: dict = {}
            with _recording_choices([]) as tuned:     # a block shape's first GEMM may tune its class
                matmul_out_of_core(a, b, c, max_device_bytes=budget, gemm=tiledmm_gemm(kernel),
                                   progress=on_progress, stats=stats, acc_dtype=acc, plan=plan)
            if check_rows:
                progress.update(task, description=f"checking {check_rows} rows against float64")
                rel, _, _ = check_sampled(a, b, c, plan, check_rows, check_cols, seed)
            else:
                rel = None
    finally:
        for t in registered:
            torch.cuda.cudart().cudaHostUnregister(t.data_ptr())
    secs = stats["wall_s"]
    ok = rel is None or rel <= OOC_TOL[dtype]
    kind = "pinned" if pinned else ("torch" if dtype == "bfloat16" else "numpy")
    tuning_s = sum(r["s"] for r in tuned if r["stored"] is not None and r["before"] != r["choice"])
    table(f"tiledmm outofcore — {environment()['device']}",
          ("shape", "dtype", "budget", "GEMMs", "s", "tuning s", "TFLOP/s", "rel err", "check",
           "busy s: in / GEMM / out"),
          [(f"{m}x{k}x{n}", f"{dtype} {kind}", human_bytes(plan.budget), f"{done[0]:,}/{done[1]:,}", f"{secs:.3g}",
            f"{tuning_s:.3g}", f"{2.0 * m * n * k / secs / 1e12:.3g}", None if rel is None else f"{rel:.1e}",
            ok_cell(ok) if rel is not None else "skipped",
            " / ".join(f"{stats[f'{s}_ms'] / 1e3:.3g}" for s in ("copy_in", "compute", "copy_out")))],
          right=("budget", "GEMMs", "s", "tuning s", "TFLOP/s", "rel err", "busy s: in / GEMM / out"))
    console.print("busy: seconds the copy-in, GEMM and copy-out streams were working"
                  + (f"; s and GEMM busy include {tuning_s:.3g} s of first-call tuning of the block shapes' "
                     "classes, remembered now: a second run skips it" if tuning_s else ""))
    if not gpu:
        console.print("times are emulation (CPU simulator) times; they say nothing about GPU speed")
    if not ok:
        raise typer.Exit(1)


@command("kernels")
def list_kernels():
    """List the registered kernels."""
    from . import registry
    table("tiledmm kernels", ("name", "family", "dtypes", "tiles", "summary"),
          [(s.name, s.family, s.dtypes, s.tiles or None, s.summary) for s in registry.all_specs()])


from . import cli_dist  # noqa: E402,F401  (registers `tiledmm dist`)


def main() -> None:  # console script entry
    app()


if __name__ == "__main__":
    sys.exit(main())
