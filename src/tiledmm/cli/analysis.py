"""``tiledmm device, occupancy, model, burst, trace, explain, roofline, claims, kernels``: the
lectures' analysis (device properties, occupancy, traffic and burst models, traces, pictures)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape
from rich.text import Text

from .. import bench as B
from .._arrays import TiledmmError
from ._app import PROFILE_HELP, command, console, fmt, kv, parse_shape, positive, progress_bar, \
    rerun_in_emulation, table, writable

CUDA_MAX_THREADS = 1024      # threads per block, the limit on every GPU since compute capability 2.0


def _profile_or_device(profile: Optional[str]):
    from ..analysis.device import current_or
    return current_or(profile)


@command()
def device(profile: Optional[str] = typer.Option(None, metavar="NAME", help=PROFILE_HELP + "."),
           measure: bool = typer.Option(True, help="also measure device-to-device copy bandwidth (GPU only)."),
           as_json: bool = typer.Option(False, "--json", metavar="", help="Print JSON instead of a table.")):
    """The properties the lectures query (cudaGetDeviceProperties), with derived peaks."""
    from .. import _backend
    from ..analysis.device import measure_copy_bandwidth
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
    from .. import _backend, registry
    from ..analysis.occupancy import numba_resources, occupancy as occ, tiled_shared_bytes
    positive("--tile", tile)
    positive("--threads", threads)
    positive("--shared", shared, allow_zero=True)
    positive("--regs", regs, allow_zero=True)
    compiled = False
    if not (tile or kernel or threads):
        raise TiledmmError("give --tile, --kernel or --threads")
    if tile and tile * tile > CUDA_MAX_THREADS:     # no GPU launches it: refused whatever the profile
        raise TiledmmError(f"--tile {tile}: {tile}x{tile} = {tile * tile:,} threads a block, over CUDA's limit of "
                           f"{CUDA_MAX_THREADS:,} threads per block on every GPU; the tiled kernel's TILE_WIDTH "
                           f"is at most {int(CUDA_MAX_THREADS ** 0.5)}")
    if threads and threads > CUDA_MAX_THREADS:
        raise TiledmmError(f"--threads {threads:,}: over CUDA's limit of {CUDA_MAX_THREADS:,} threads per block "
                           "on every GPU")
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
        if not regs and profile is None and not _backend.emulating() and tile in registry.get("tiled").tiles:
            regs = numba_resources("tiled", tile)["regs_per_thread"]    # the GPU in use: its compiled kernel's
            compiled = True
    if not threads:
        raise TiledmmError("give --tile, --kernel or --threads")
    o = occ(d, threads, shared_per_block=shared, regs_per_thread=regs, loads_per_thread=2)
    if as_json:
        print(json.dumps(o.as_dict(), indent=1))
        return
    rows = {k: (v or None) if k == "why_not" else v for k, v in o.as_dict().items()}
    if kernel or compiled:
        rows["regs_per_thread"] = f"{regs} (from the compiled kernel)"
    elif not regs:
        rows["regs_per_thread"] = Text("not counted (the lectures' rule leaves registers out; --regs N counts "
                                       "them, --kernel NAME on a GPU reads them from the compiled kernel)")
    kv(f"occupancy — {d.name}", rows)


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
    from .. import registry
    from ..analysis.model import roofline
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
    from ..analysis.burst import burst_efficiency, parse_index, pattern
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


def _traced(kernel: str, shape: tuple, tile, what: str):
    """Record a trace with a progress bar (one step per block)."""
    from ..analysis.trace import trace as run_trace
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
    from .. import registry
    from ..analysis.trace import check_request, describe_step
    spec = registry.get(kernel)
    if tile is None and spec.tiles:
        tile = 2 if 2 in spec.tiles else spec.default_tile
    dims = parse_shape(shape, batch=False)
    tile = check_request(kernel, dims, tile)
    rerun_in_emulation(quiet=True)
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
              [describe_step(p) for p in tr.phases()], right=("blockIdx.x", "blockIdx.y"), whole=("step",),
              stack=(("what the block did", ("M loaded", "N loaded", "zero-filled", "P stored", "by threads")),))


@command()
def explain(shape: str = typer.Option("3x3x3", "--shape", "-s", metavar="JxKxL",
                                      help="P = M (JxK) @ N (KxL); per-thread detail up to 8 in each dimension, "
                                           "a per-block summary beyond."),
            tile: int = typer.Option(2, "--tile", "-t", metavar="T", help="TILE_WIDTH of the tiled kernel."),
            out: str = typer.Option("explain.svg", metavar="FILE", help="output file: .svg, .png or .pdf.")):
    """Draw the slides' tiled example from a trace: per block and phase, the tiles loaded,
    the shared-tile contents (zero-filled cells grey), and the threads that store P."""
    from ..analysis.explain import check_explain, explain_figure, summary_pages
    dims = parse_shape(shape, batch=False)
    path = writable(out, (".svg", ".png", ".pdf"))
    view = check_explain(dims, tile)
    rerun_in_emulation(quiet=True)
    tr = _traced("tiled", dims, tile, "explain")
    with progress_bar() as progress:
        task = progress.add_task("drawing", total=None)
        paths = explain_figure(tr, path, view=view,
                               progress=lambda done, total: progress.update(task, completed=done, total=total))
    pages = summary_pages(dims, tile) if view == "summary" else 1
    console.print(escape(f"wrote {path} ({view} view)" if pages == 1 else
                         f"wrote {path} ({view} view: an index, then {pages} pages"
                         + (f" {paths[1].name} .. {paths[-1].name})" if len(paths) > 1 else " in the same file)")))


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
    from ..analysis.explain import roofline_figure, roofline_points
    positive("--bandwidth", bandwidth)
    path = writable(out, (".png", ".svg", ".pdf"))
    d = _profile_or_device(profile)
    points = roofline_points(_measured(bench_json) if bench_json else {})
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
    from .. import _backend
    from ..analysis.claims import markdown as md, table as claims_table
    path = writable(markdown) if markdown else None
    rerun_in_emulation(quiet=True)
    rows = claims_table(_backend.emulating())
    if path:
        path.write_text(md(rows))
    notes = [r for r in rows if r["note"]]
    mark = {r["id"]: f" ({i})" for i, r in enumerate(notes, start=1)}
    table("the lectures' numbers, recomputed", ("lecture", "claim", "slide", "tiledmm", "agrees"),
          [(r["lecture"], r["claim"], _value(r["slide"]), _value(r["tiledmm"]),
            {True: Text("yes"), False: Text("no", style="yellow"), None: Text("–")}[r["agrees"]]
            + Text(mark.get(r["id"], ""))) for r in rows], whole=("agrees",),
          stack=((None, ("slide", "tiledmm")),))
    for r in notes:   # why a slide and tiledmm differ (and other notes)
        console.print(Text(f"({mark[r['id']].strip()[1:-1]}) {r['id']}: {r['note']}"))
    if path:
        console.print(escape(f"wrote {path}"))



def _value(v) -> str:
    """A claim's value as a student writes it: 1200 not 1200.0, '3, 768, threads' not "(3, 768, ['threads'])"."""
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, tuple):
        return ", ".join(map(_value, v))
    if isinstance(v, list):
        return "[" + ", ".join(map(_value, v)) + "]" if any(isinstance(x, list) for x in v) or len(v) != 1 \
            else _value(v[0])
    return str(v)


@command("kernels")
def list_kernels():
    """List the registered kernels."""
    from .. import registry
    # one line of facts over the kernel's summary: five columns leave the summary a few words a line
    table("tiledmm kernels", ("name", "family · dtypes · tiles, then what it is"),
          [(s.name, Text(f"{s.family} · {', '.join(s.dtypes)}" + (f" · tiles {', '.join(map(str, s.tiles))}"
                                                                   if s.tiles else "") + "\n" + s.summary))
           for s in registry.all_specs()])

