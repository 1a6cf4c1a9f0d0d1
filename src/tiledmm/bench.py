"""``tiledmm bench``: kernels x shapes x precisions against cuBLAS, in one process.

Every point is checked against float64 before it is timed (a wrong kernel gets
no time), timed with CUDA events (warm-up, median), rotating input sets so that
the L2 does not flatter small shapes. Writes CSV, JSON and PNG plots.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from . import _backend
from .harness import Result, check_and_time, rotation_for

# precision label -> (input dtype, precision option)
PRECISIONS = {"fp32": ("float32", "ieee"), "tf32": ("float32", "tf32"), "bf16": ("bfloat16", None),
              "fp16": ("float16", None)}

SUITES = {
    "square": [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192)],
    "irregular": [(4097, 4093, 4095), (3000, 2000, 4000), (8192, 8192, 128), (128, 8192, 8192),
                  (8192, 128, 8192), (127, 8191, 127), (64, 512, 512, 512)],
    "ladder": [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096)],
    "quick": [(4096, 4096, 4096)],
    "emulation": [(40, 24, 33), (3, 33, 17, 45)],
}
SIMT_MAX_WORK = 4096 ** 3   # the SIMT rungs are slow: skip them above 4096^3 multiply-adds


def plan(suites: list[str], precisions: list[str], kernels: list[str]) -> list[tuple]:
    from . import registry
    points = []
    for suite in suites:
        for shape in SUITES[suite]:
            for p in precisions:
                dtype, prec = PRECISIONS[p]
                for k in kernels:
                    spec = registry.get(k)
                    if dtype not in spec.dtypes or (spec.family == "simt" and (p != "fp32" or len(shape) == 4)):
                        continue
                    if spec.family == "simt" and shape[0] * shape[1] * shape[2] > SIMT_MAX_WORK:
                        continue
                    if _backend.emulating() and spec.family != "block" and spec.emulation_limit is None:
                        continue
                    points.append((suite, shape, p, k))
    return points


def run(points, *, repeats: int, warmup: int, seed: int = 0, progress=None) -> list[dict]:
    rows, base = [], {}
    gpu = not _backend.emulating()
    needed = list(dict.fromkeys((s, p) for _, s, p, _ in points))
    total = len(points) + (len(needed) if gpu else 0)
    task = progress.add_task("bench", total=total) if progress else None

    def step(desc):
        if progress:
            progress.update(task, advance=1, description=desc)

    def row(suite, r: Result, p: str) -> dict:
        d = {"suite": suite, "shape": "x".join(map(str, r.shape)), "precision": p, "kernel": r.kernel,
             "tile": r.tile, "ms": r.ms, "tflops": r.tflops, "rel_err": r.rel_err, "ok": r.ok,
             "vs_cublas": None, "emulated": r.emulated}
        return d

    suite_of = {(s, p): suite for suite, s, p, _ in points}
    if gpu:
        for s, p in needed:
            dtype, prec = PRECISIONS[p]
            r = check_and_time("cublas", s, dtype, precision=prec or "ieee", seed=seed, warmup=warmup,
                               repeats=repeats, rotate=rotation_for(s, dtype))
            base[(s, p)] = r
            rows.append(row(suite_of[(s, p)], r, p))
            step(f"cublas {p} {'x'.join(map(str, s))}")
    for suite, s, p, k in points:
        dtype, prec = PRECISIONS[p]
        from . import registry
        spec = registry.get(k)
        tile = 32 if spec.family == "simt" and 32 in spec.tiles and k == "tiled" else None
        r = check_and_time(k, s, dtype, tile=tile, precision=prec if "precision" in spec.options else None,
                           seed=seed, warmup=warmup, repeats=repeats,
                           rotate=rotation_for(s, dtype) if gpu else 1)
        d = row(suite, r, p)
        b = base.get((s, p))
        if b is not None and b.ms and r.ms:
            d["vs_cublas"] = b.ms / r.ms
        rows.append(d)
        step(f"{k} {p} {'x'.join(map(str, s))}")
    return rows


def geomean(xs):
    import math
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summary(rows: list[dict]) -> list[dict]:
    """Geometric mean of x cuBLAS per (suite, precision, kernel)."""
    out = {}
    for r in rows:
        if r["kernel"] == "cublas":
            continue
        out.setdefault((r["suite"], r["precision"], r["kernel"]), []).append(r["vs_cublas"])
    return [{"suite": s, "precision": p, "kernel": k, "geomean_vs_cublas": geomean(v), "n": len(v)}
            for (s, p, k), v in out.items()]


def write(rows: list[dict], outdir: Path, env: dict, peaks: dict | None) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [outdir / "bench.csv", outdir / "bench.json"]
    with open(paths[0], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    tuned = {}
    if not _backend.emulating():
        from .kernels.block import matmul as blk
        tuned = {"configs": blk.tuned_configs(), "variants": blk.variant_choices()}
    paths[1].write_text(json.dumps({"environment": env, "rows": rows, "summary": summary(rows), "triton": tuned},
                                   indent=1))
    paths.append(plot(rows, outdir / "bench.png", env.get("device", ""), peaks))
    return paths


def plot(rows: list[dict], path: Path, device: str, peaks: dict | None) -> Path:
    """TFLOP/s per shape, one panel per precision; cuBLAS and the device peak as lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    precs = list(dict.fromkeys(r["precision"] for r in rows))
    fig, axes = plt.subplots(len(precs), 1, figsize=(12, 4.2 * len(precs)), squeeze=False)
    for ax, p in zip(axes[:, 0], precs):
        sub = [r for r in rows if r["precision"] == p]
        shapes = list(dict.fromkeys(r["shape"] for r in sub))
        colours = plt.get_cmap("tab20").colors      # 20 colours and 5 markers: no two kernels look alike
        for i, k in enumerate(dict.fromkeys(r["kernel"] for r in sub)):
            pts = [(shapes.index(r["shape"]), r["tflops"]) for r in sub if r["kernel"] == k and r["tflops"]]
            if pts:
                xs, ys = zip(*pts)
                cub = k == "cublas"
                ax.plot(xs, ys, marker="o" if cub else "osD^v"[i % 5], lw=2.5 if cub else 1.5,
                        ls="--" if cub else "-", color="black" if cub else colours[i % 20], label=k)
        if peaks and peaks.get(p):
            ax.axhline(peaks[p], color="gray", ls=":", label=f"peak {peaks[p]:.0f}")
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes, rotation=20, fontsize=8)
        ax.set_ylabel("TFLOP/s")
        ax.set_yscale("log")
        ax.set_title(f"{p} — {device}")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
