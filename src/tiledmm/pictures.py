"""The bench's picture, and the look of each kernel that every chart shares.

``bench_figure`` draws a chart for each group of shapes of a (suite, precision), chosen so that it
reads at a glance (``shape_groups`` makes the groups):

* a sweep (three or more shapes that differ only in M, or three or more square sizes): TFLOP/s
  against the swept size, one line per kernel, cuBLAS dashed black, the device peak dotted;
* one or two shapes outside any sweep: a horizontal bar per kernel, fastest on top, each labelled
  with its TFLOP/s and its speed as a multiple of cuBLAS's, coloured by family (SIMT, Triton,
  cuBLAS), the device peak as a dotted line;
* three or more unrelated shapes: a table (kernels x shapes) of x cuBLAS, coloured around 1.0.

Figures are made without pyplot (no global state, nothing to close): ``fig.savefig`` writes them.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

MARKERS = "osD^vPX"     # seven markers against tab10's ten colours: see kernel_styles
MIN_SWEEP = 3           # points that make a sweep
WIDTH = 12.0            # inches; at DPI 110 the picture is 1,320 px wide
DPI = 110
LEGEND_WIDTH = 2.4      # inches beside a row of sweep charts
CUBLAS = "cublas"


def kernel_styles(labels) -> dict:
    """label -> (colour, marker). Label i gets tab10's colour i mod 10 and marker i mod 7: since 10 and
    7 share no factor, the first 70 labels all get different (colour, marker) pairs, and two
    labels that share a colour (i, i + 10) never share a marker."""
    import matplotlib
    colours = matplotlib.colormaps["tab10"].colors
    return {lab: (colours[i % len(colours)], MARKERS[i % len(MARKERS)])
            for i, lab in enumerate(dict.fromkeys(labels))}


def dims(shape: str) -> tuple:
    return tuple(int(x) for x in shape.split("x"))


def shape_groups(shapes: list[tuple]) -> list[tuple[str, list[tuple]]]:
    """Split ``shapes`` ((m, k, n) or (batch, m, k, n)) into charts, in the order of first appearance:
    ("M", shapes) for each M ladder (same batch, K and N; MIN_SWEEP or more Ms), ("square", shapes)
    for MIN_SWEEP or more square sizes among the rest, then ("bars", [shape]) for each of one or two
    shapes left, or ("table", shapes) for three or more. Each sweep is sorted by its swept size."""
    ladders: dict[tuple, list[tuple]] = {}
    for s in dict.fromkeys(shapes):
        *b, _, k, n = s
        ladders.setdefault((tuple(b), k, n), []).append(s)
    out, rest = [], []
    for ss in ladders.values():
        if len({s[-3] for s in ss}) >= MIN_SWEEP:
            out.append(("M", sorted(ss, key=lambda s: s[-3])))
        else:
            rest += ss
    rest = [s for s in shapes if s in rest]     # the order the suite lists them
    squares = [s for s in rest if len(s) == 3 and s[0] == s[1] == s[2]]
    if len(squares) >= MIN_SWEEP:
        out.append(("square", sorted(squares)))
        rest = [s for s in rest if s not in squares]
    if len(rest) >= MIN_SWEEP:
        out.append(("table", rest))
    else:
        out += [("bars", [s]) for s in rest]
    return out


class Chart(NamedTuple):
    kind: str           # "M", "square", "bars", "table"
    suite: str
    precision: str
    shapes: list        # tuples
    rows: list          # the bench rows of these shapes (cuBLAS's too)
    labels: dict        # id(row) -> series label (kernel, with its tile where the kernel ran several)


def _series_labels(rows: list[dict]) -> dict:
    tiles: dict[str, set] = {}
    for r in rows:
        tiles.setdefault(r["kernel"], set()).add(r.get("tile"))
    return {id(r): r["kernel"] + (f" T{r['tile']}" if len(tiles[r["kernel"]]) > 1 and r.get("tile") else "")
            for r in rows}


def charts(rows: list[dict]) -> list[Chart]:
    """The charts of a bench run: per suite and precision, one per group of ``shape_groups``."""
    out = []
    for suite in dict.fromkeys(r["suite"] for r in rows):
        for p in dict.fromkeys(r["precision"] for r in rows if r["suite"] == suite):
            sub = [r for r in rows if r["suite"] == suite and r["precision"] == p]
            labels = _series_labels(sub)
            for kind, ss in shape_groups([dims(s) for s in dict.fromkeys(r["shape"] for r in sub)]):
                mine = [r for r in sub if dims(r["shape"]) in ss]
                out.append(Chart(kind, suite, p, ss, mine, {id(r): labels[id(r)] for r in mine}))
    return out


def _rate(tflops: float) -> str:
    return f"{tflops:,.0f}" if tflops >= 100 else f"{tflops:.1f}" if tflops >= 10 else f"{tflops:.3g}"


def _unit(tflops: float) -> tuple[float, str]:
    """(scale, name) that puts ``tflops`` (the largest rate of a chart) between 0.1 and 1000 of the
    unit: emulation's rates are micro-TFLOP/s."""
    for scale, name in ((1.0, "TFLOP/s"), (1e3, "GFLOP/s"), (1e6, "MFLOP/s")):
        if tflops * scale >= 0.1:
            return scale, name
    return 1e9, "kFLOP/s"


def _fmt(shape: tuple) -> str:
    return "x".join(map(str, shape))


def _bar_height(c: Chart) -> float:
    return 0.85 + 0.27 * len(c.rows)


def _table_height(c: Chart) -> float:
    return 1.4 + 0.27 * len(dict.fromkeys(c.labels.values()))


SWEEP_HEIGHT = 3.3


def bench_figure(rows: list[dict], device: str = "", peaks: dict | None = None):
    """A matplotlib Figure of a bench run's rows (``bench.run``'s dicts): charts stacked top to bottom,
    sweeps up to three to a row with one legend beside them. ``peaks``: precision -> TFLOP/s."""
    from matplotlib.figure import Figure
    cs = charts(rows)
    emulated = any(r.get("emulated") for r in rows)
    styles = kernel_styles(lab for c in cs for r in c.rows for lab in [c.labels[id(r)]] if r["kernel"] != CUBLAS)
    # figure rows: up to three sweeps of one (suite, precision) side by side; a bar chart or a table alone
    lines: list[tuple[str, list[Chart]]] = []
    for c in cs:
        last = lines[-1] if lines else None
        if c.kind in ("M", "square") and last and last[0] == "sweeps" and len(last[1]) < 3 \
                and (last[1][0].suite, last[1][0].precision) == (c.suite, c.precision):
            last[1].append(c)
        else:
            lines.append(("sweeps" if c.kind in ("M", "square") else c.kind, [c]))
    heights = [SWEEP_HEIGHT if kind == "sweeps" else _bar_height(c[0]) if kind == "bars" else _table_height(c[0])
               for kind, c in lines]
    title = f"tiledmm bench — {device}" if device else "tiledmm bench"
    if emulated:
        title += ": times in the CPU simulator, which say nothing about GPU speed"
    fig = Figure(figsize=(WIDTH, sum(heights) + 0.5), layout="constrained", dpi=DPI)
    fig.suptitle(title, fontsize=11)
    gs = fig.add_gridspec(len(lines), 1, height_ratios=heights)
    for cell, (kind, group) in zip(gs, lines):
        if kind == "sweeps":
            n = len(group)
            sub = cell.subgridspec(1, n + 1, width_ratios=[(WIDTH - LEGEND_WIDTH) / n] * n + [LEGEND_WIDTH])
            axes = [fig.add_subplot(sub[0, i]) for i in range(n)]
            for ax, c in zip(axes, group):
                _sweep(ax, c, styles, peaks, emulated)
            handles = {}
            for ax in axes:
                for h, lab in zip(*ax.get_legend_handles_labels()):
                    handles.setdefault(lab, h)
            lax = fig.add_subplot(sub[0, n])
            lax.axis("off")
            lax.legend(list(handles.values()), list(handles), loc="upper left", fontsize=8, frameon=False,
                       borderaxespad=0)
        elif kind == "bars":
            _bars(fig.add_subplot(cell), group[0], peaks, emulated)
        else:
            _table(fig.add_subplot(cell), group[0], emulated)
    return fig


FAMILY_COLOURS = {"library": ("black", "cuBLAS (the baseline)"), "simt": ("#4c72b0", "SIMT kernel (numba)"),
                  "block": ("#dd8452", "block kernel (Triton)"), "other": ("#999999", "other")}


def _family(kernel: str) -> str:
    from . import registry
    from ._arrays import TiledmmError
    try:
        fam = registry.get(kernel).family
    except TiledmmError:    # a bench.json from a kernel this version does not have
        return "other"
    return fam if fam in FAMILY_COLOURS else "other"


def _peak(peaks, p):
    return (peaks or {}).get(p) or None


def _title(c: Chart, what: str) -> str:
    return f"{c.precision} — {what} ({c.suite} suite)"


def _sweep(ax, c: Chart, styles: dict, peaks, emulated: bool) -> None:
    """TFLOP/s against M (or the square size), one line per kernel."""
    x_of = (lambda s: s[-3]) if c.kind == "M" else (lambda s: s[0])
    series: dict[str, list] = {}
    for r in c.rows:
        if r.get("tflops"):
            series.setdefault(c.labels[id(r)], []).append((x_of(dims(r["shape"])), r["tflops"]))
    for lab in sorted(series, key=lambda lab: lab != CUBLAS):
        xs, ys = zip(*sorted(series[lab]))
        if lab == CUBLAS:
            ax.plot(xs, ys, color="black", ls="--", lw=2.2, marker="o", label="cuBLAS", zorder=3)
        else:
            colour, marker = styles[lab]
            ax.plot(xs, ys, color=colour, marker=marker, lw=1.4, ms=5, label=lab)
    peak = _peak(peaks, c.precision)
    if peak:
        ax.axhline(peak, color="gray", ls=":", lw=1.5, label=f"{c.precision} peak {_rate(peak)}")
    xs = sorted({x_of(s) for s in c.shapes})
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs], fontsize=7, rotation=45 if len(xs) > 5 else 0)
    ax.minorticks_off()
    _log_y(ax)
    *b, _, k, n = c.shapes[0]
    if c.kind == "M":
        ax.set_xlabel(f"M (N={n}, K={k}" + (f", batch {b[0]})" if b else ")"), fontsize=8)
        ax.set_title(_title(c, f"M sweep, N={n} K={k}"), fontsize=9)
    else:
        ax.set_xlabel("M = K = N", fontsize=8)
        ax.set_title(_title(c, "square sizes"), fontsize=9)
    ax.set_ylabel("TFLOP/s" + (" (emulation)" if emulated else ""), fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(alpha=0.3, which="both")


def _log_y(ax) -> None:
    """A log y scale labelled in plain numbers at 1, 2 and 5 of each decade (a sweep's rates may span
    less than a decade, where decades alone would leave the axis bare)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    ax.set_yscale("log")
    axis = ax.yaxis
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _bars(ax, c: Chart, peaks, emulated: bool) -> None:
    """One horizontal bar per kernel, fastest on top, labelled 'TFLOP/s, x cuBLAS'."""
    from matplotlib.patches import Patch
    order = sorted(c.rows, key=lambda r: -(r.get("tflops") or 0))
    labels = [("cuBLAS" if r["kernel"] == CUBLAS else c.labels[id(r)]) for r in order]
    peak = _peak(peaks, c.precision)
    scale, unit = _unit(max([r.get("tflops") or 0 for r in order] + [peak or 0]))
    widths = [(r.get("tflops") or 0) * scale for r in order]
    fams = [_family(r["kernel"]) for r in order]
    ax.barh(range(len(order)), widths, color=[FAMILY_COLOURS[f][0] for f in fams], height=0.7)
    ax.set_yticks(range(len(order)), labels, fontsize=8)
    ax.set_ylim(len(order) - 0.5, -0.5)     # fastest on top
    for i, r in enumerate(order):
        if not r.get("tflops"):
            text, colour = ("wrong result (rel err {:.1e}): not timed".format(r["rel_err"]) if not r.get("ok")
                            else "no time"), "tab:red"
        else:
            colour = "black"
            text = f"{_rate(r['tflops'] * scale)} {unit}"
            if r["kernel"] == CUBLAS:
                text += ", 1.00x cuBLAS (the baseline)"
            elif r.get("vs_cublas"):
                text += f", {r['vs_cublas']:.2f}x cuBLAS"
        ax.annotate(text, (widths[i], i), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8,
                    color=colour)
    top = max(widths + [(peak or 0) * scale]) or 1.0
    ax.set_xlim(0, top * 1.45)     # room for the labels right of the longest bar
    what = _fmt(c.shapes[0])
    if peak:     # the line, and where it meets the frame's top edge a tick that names it
        ax.axvline(peak * scale, color="dimgray", ls=":", lw=1.5)
        top_axis = ax.secondary_xaxis("top")
        top_axis.set_xticks([peak * scale], [f"{c.precision} peak {_rate(peak * scale)}"])
        top_axis.tick_params(labelsize=7, colors="dimgray")
        what += "; dotted line: the device's peak"
    ax.legend(handles=[Patch(color=col, label=name) for f, (col, name) in FAMILY_COLOURS.items() if f in fams],
              loc="lower right", fontsize=7, frameon=False)
    ax.set_title(_title(c, what), fontsize=9)
    ax.set_xlabel(unit + (" (emulation: not GPU speed)" if emulated else ""), fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(alpha=0.3, axis="x")


def _table(ax, c: Chart, emulated: bool) -> None:
    """Kernels x shapes: x cuBLAS (TFLOP/s), coloured by log2 of x cuBLAS; without cuBLAS (emulation)
    TFLOP/s, coloured by the fraction of the shape's best."""
    import numpy as np
    shapes = [_fmt(s) for s in c.shapes]
    cell = {(c.labels[id(r)], r["shape"]): r for r in c.rows}
    kernels = list(dict.fromkeys(c.labels[id(r)] for r in c.rows))
    base = any(r.get("vs_cublas") for r in c.rows)
    best = {s: max([r.get("tflops") or 0 for r in c.rows if r["shape"] == s] + [0]) or 1.0 for s in shapes}

    def value(lab, s):
        r = cell.get((lab, s))
        if not r or not r.get("tflops"):
            return None
        if base:
            return 1.0 if r["kernel"] == CUBLAS else r.get("vs_cublas")
        return r["tflops"] / best[s]

    def rank(lab):
        vs = [v for s in shapes if (v := value(lab, s))]
        return (lab != CUBLAS, -(math.exp(sum(map(math.log, vs)) / len(vs)) if vs else 0))
    kernels.sort(key=rank)
    grid = np.full((len(kernels), len(shapes)), np.nan)
    for i, lab in enumerate(kernels):
        for j, s in enumerate(shapes):
            v = value(lab, s)
            if v:
                grid[i, j] = math.log2(v) if base else v
    ax.imshow(grid, cmap="RdYlGn", vmin=-2 if base else 0, vmax=2 if base else 1, aspect="auto",
              interpolation="nearest", alpha=0.55)     # pale: the numbers stay readable on every colour
    for i, lab in enumerate(kernels):
        for j, s in enumerate(shapes):
            r = cell.get((lab, s))
            if r is None:
                text = ""
            elif not r.get("tflops"):
                text = "wrong" if not r.get("ok") else "–"
            elif base:
                text = f"{value(lab, s):.2f}x ({_rate(r['tflops'])})"
            else:
                text = _rate(r["tflops"])
            ax.text(j, i, text, ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(shapes)), shapes, fontsize=7, rotation=15)
    ax.set_yticks(range(len(kernels)), ["cuBLAS" if k == CUBLAS else k for k in kernels], fontsize=8)
    ax.set_title(_title(c, "x cuBLAS per kernel and shape (TFLOP/s in brackets)" if base else
                        "TFLOP/s per kernel and shape" + (" (emulation: not GPU speed)" if emulated else "")),
                 fontsize=9)


def save(fig, path: Path, dpi: int = DPI) -> Path:
    fig.savefig(path, dpi=dpi)
    return Path(path)
