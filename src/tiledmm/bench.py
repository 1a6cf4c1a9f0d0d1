"""``tiledmm bench`` and ``tiledmm run``: kernels x shapes x precisions against cuBLAS, in one process.

One run path for both commands: ``plan`` (or the caller) makes a list of ``Point``s,
``check`` refuses any that cannot run before anything runs, ``run`` checks each
against float64 before it is timed (a wrong kernel gets no time) and times it with
the harness (rotating input sets so that the L2 does not flatter small shapes),
returning one row (a dict) per point plus a cuBLAS row per (shape, precision) on a
GPU. ``write`` saves CSV, JSON and PNG plots.

Shapes are (m, k, n) -- P (m x n) = A (m x k) @ B (k x n) -- or (batch, m, k, n).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import NamedTuple

from . import _backend

# precision label -> (input dtype, precision option)
PRECISIONS = {"fp32": ("float32", "ieee"), "tf32": ("float32", "tf32"), "bf16": ("bfloat16", None),
              "fp16": ("float16", None), "fp64": ("float64", None)}

# shapes are (m, k, n) or (batch, m, k, n)
SUITES = {
    "square": [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192)],
    "irregular": [(4097, 4093, 4095), (3000, 2000, 4000), (8192, 8192, 128), (128, 8192, 8192),
                  (8192, 128, 8192), (127, 8191, 127), (64, 512, 512, 512)],
    "ladder": [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096)],
    "quick": [(4096, 4096, 4096)],
    # a transformer layer's GEMMs (hidden 5120, MLP 13824) at M = 1, 32, 256, 4096 tokens
    "transformer": [(m, k, n) for m in (1, 32, 256, 4096) for (n, k) in ((5120, 5120), (13824, 5120), (5120, 13824))],
    # LLM projection GEMMs: M tokens x (N, K) of 7B/70B-class layers (4096/11008 and 8192/28672)
    "llm": [(m, k, n) for m in (1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
            for (n, k) in ((4096, 4096), (11008, 4096), (4096, 11008), (8192, 8192), (28672, 8192), (8192, 28672))],
    "emulation": [(40, 24, 33), (3, 33, 17, 45)],
}
SUITE_HELP = {"square": "1024^3 .. 8192^3", "irregular": "odd and skinny shapes, one batched",
              "ladder": "1024^3 .. 4096^3 (the SIMT rungs)", "quick": "4096^3", "transformer":
              "M=1,32,256,4096 x (N,K) in (5120,5120), (13824,5120), (5120,13824)",
              "llm": "M=1,16,..,8192 x (N,K) in (4096,4096), (11008,4096), (4096,11008), (8192,8192), "
              "(28672,8192), (8192,28672)",
              "emulation": "toy shapes for a CPU machine (the default there)"}
SIMT_MAX_WORK = 4096 ** 3   # the SIMT rungs are slow: skip them above 4096^3 multiply-adds


class Point(NamedTuple):
    suite: str
    shape: tuple        # (m, k, n) or (batch, m, k, n)
    precision: str      # a PRECISIONS label
    kernel: str
    tile: int | None = None


def work(shape: tuple) -> int:
    """Multiply-adds of one product."""
    *batch, m, k, n = shape
    return (batch[0] if batch else 1) * m * k * n


def fmt_shape(shape: tuple) -> str:
    return "x".join(map(str, shape))


def why_not(p: Point) -> str | None:
    """Why this point cannot run here (the API's rules: tile, dtype, precision, rank, emulation limit),
    or None when it can."""
    from . import registry
    from ._arrays import TiledmmError
    spec = registry.get(p.kernel)
    try:
        spec.check_tile(p.tile)
    except TiledmmError as e:
        return str(e)
    dtype, prec = PRECISIONS[p.precision]
    if dtype not in spec.dtypes:
        return f"kernel {p.kernel!r} supports dtypes {list(spec.dtypes)}, not {dtype}"
    if prec not in (None, "ieee") and "precision" not in spec.options:
        return f"kernel {p.kernel!r} has no {p.precision} mode"
    if len(p.shape) == 4 and not spec.batched:
        return f"kernel {p.kernel!r} takes no batch (shape {fmt_shape(p.shape)})"
    if _backend.emulating():
        if spec.emulation_limit is None:
            return f"kernel {p.kernel!r} needs a GPU; none is in use (emulation)"
        limit = _backend.emulation_limit(spec.emulation_limit)
        if work(p.shape) > limit:
            return (f"{fmt_shape(p.shape)} is {work(p.shape):,} multiply-adds, over the emulation limit of "
                    f"{limit:,} for kernel {p.kernel!r} (raise TILEDMM_EMULATION_LIMIT if you will wait)")
    return None


def tiles_for(kernel: str, tiles: list[int] | None) -> list[int | None]:
    """The tiles to run ``kernel`` with: each of ``tiles`` if it takes a tile (the API's check: a tile it
    does not support is an error), else [None] (its default, or no tile)."""
    from . import registry
    spec = registry.get(kernel)
    if not tiles or not spec.tiles:
        return [None]
    return [spec.check_tile(t) for t in dict.fromkeys(tiles)]


def plan(suites: list[str], precisions: list[str], kernels: list[str],
         tiles: list[int] | None = None) -> list[Point]:
    """Every (suite, shape, precision, kernel, tile) that can run here; SIMT kernels in fp32 only and
    not above SIMT_MAX_WORK. ``tiles`` apply to the kernels that take them (default: the kernel's own)."""
    from . import registry
    points = []
    for suite in suites:
        for shape in SUITES[suite]:
            for p in precisions:
                for k in kernels:
                    spec = registry.get(k)
                    if spec.family == "simt" and (p != "fp32" or work(shape) > SIMT_MAX_WORK):
                        continue
                    for t in tiles_for(k, tiles):
                        pt = Point(suite, shape, p, k, t)
                        if why_not(pt) is None:
                            points.append(pt)
    return points


def run(points: list[Point], *, repeats: int, warmup: int, seed: int = 0, baseline: bool = True,
        progress=None, on_rows=None, gpu_time: bool = False) -> list[dict]:
    """Check and time every point; on a GPU also cuBLAS once per (shape, precision) when
    ``baseline``. Shape by shape: cuBLAS, then the kernels on that shape; ``on_rows(rows)`` after
    each (shape, precision) with every row so far (a run stopped midway keeps its whole shapes).
    gpu_time: each row also gets the GPU's time a call with the host's launch path apart
    (``gpu_ms``, ``host_us``, ``gpu_vs_cublas``; ``harness.check_and_time``), on a GPU.
    Returns rows in the points' shape order, cuBLAS first."""
    from . import registry
    from .harness import check_and_time, rotation_for
    gpu = not _backend.emulating()
    needed = list(dict.fromkeys((p.shape, p.precision) for p in points)) if baseline and gpu else []
    suite_of = {(p.shape, p.precision): p.suite for p in points}
    task = progress.add_task("bench", total=len(points) + len(needed)) if progress else None
    rows, base = [], {}

    def row(suite, r, p: str) -> dict:
        return {"suite": suite, "shape": fmt_shape(r.shape), "precision": p, "dtype": r.dtype, "kernel": r.kernel,
                "tile": r.tile, "ms": r.ms, "tflops": r.tflops, "rel_err": r.rel_err, "ok": r.ok,
                "vs_cublas": None, "emulated": r.emulated, "gpu_ms": r.gpu_ms,
                "host_us": None if r.host_ms is None else r.host_ms * 1e3, "gpu_vs_cublas": None}

    def timed(kernel, shape, p, tile, prec):
        dtype = PRECISIONS[p][0]
        if progress:
            progress.update(task, description=f"{kernel} {p} {fmt_shape(shape)}")
        r = check_and_time(kernel, shape, dtype, tile=tile, precision=prec, seed=seed, warmup=warmup,
                           repeats=repeats, rotate=rotation_for(shape, dtype) if gpu else 1, gpu_time=gpu_time)
        if progress:
            progress.advance(task)
        return r

    groups: dict[tuple, list[Point]] = {}
    for pt in points:
        groups.setdefault((pt.shape, pt.precision), []).append(pt)
    for (s, p), pts in groups.items():
        if (s, p) in needed:
            base[(s, p)] = timed("cublas", s, p, None, PRECISIONS[p][1] or "ieee")
            rows.append(row(suite_of[(s, p)], base[(s, p)], p))
        for pt in pts:
            spec = registry.get(pt.kernel)
            prec = PRECISIONS[pt.precision][1] if "precision" in spec.options else None
            r = timed(pt.kernel, pt.shape, pt.precision, pt.tile, prec)
            d = row(pt.suite, r, pt.precision)
            b = base.get((pt.shape, pt.precision))
            if b is not None and b.ms and r.ms:
                d["vs_cublas"] = b.ms / r.ms
            if b is not None and b.gpu_ms and r.gpu_ms:
                d["gpu_vs_cublas"] = b.gpu_ms / r.gpu_ms
            rows.append(d)
        if on_rows:
            on_rows(rows)
    order = [fmt_shape(s) for s in dict.fromkeys(p.shape for p in points)]
    rows.sort(key=lambda r: order.index(r["shape"]))
    return rows


def geomean(xs):
    import math
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summary(rows: list[dict]) -> list[dict]:
    """Geometric mean of x cuBLAS per (suite, precision, kernel), and of x cuBLAS in GPU time where
    the rows have it (``gpu_time``)."""
    out: dict[tuple, list] = {}
    for r in rows:
        if r["kernel"] == "cublas":
            continue
        out.setdefault((r["suite"], r["precision"], r["kernel"]), []).append(r)
    return [{"suite": s, "precision": p, "kernel": k, "geomean_vs_cublas": geomean([r["vs_cublas"] for r in v]),
             "geomean_gpu_vs_cublas": geomean([r.get("gpu_vs_cublas") for r in v]), "n": len(v)}
            for (s, p, k), v in out.items()]


PARTIAL = "bench.partial.csv"     # the rows so far while a bench runs; removed when the run completes


def write_csv(rows: list[dict], path: Path) -> Path:
    """``rows`` as CSV at ``path``, written whole to a temporary file first (a reader never sees half)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)
    return path


def write(rows: list[dict], outdir: Path, env: dict, peaks: dict | None, tuned: dict | None = None) -> list[Path]:
    """bench.csv, bench.json (with the environment, a summary and ``tuned``: what the autotuners
    chose) and bench.png in ``outdir``; the run's partial CSV (``PARTIAL``) is removed."""
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [write_csv(rows, outdir / "bench.csv"), outdir / "bench.json"]
    paths[1].write_text(json.dumps({"environment": env, "rows": rows, "summary": summary(rows),
                                    "triton": tuned or {}}, indent=1))
    paths.append(plot(rows, outdir / "bench.png", env.get("device", ""), peaks))
    (outdir / PARTIAL).unlink(missing_ok=True)
    return paths


def plot(rows: list[dict], path: Path, device: str, peaks: dict | None) -> Path:
    """The run's picture (``pictures.bench_figure``: bars for a shape or two, lines along a sweep,
    a table for unrelated shapes) at ``path``."""
    from .pictures import bench_figure, save
    return save(bench_figure(rows, device, peaks), path)
