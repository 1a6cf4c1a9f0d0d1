"""Pictures: the slides' tiled example drawn from a recorded trace, and a roofline chart (each made as
a matplotlib Figure without pyplot, then saved).

``explain_figure`` has two views, chosen by ``check_explain`` from the problem size:

* detail (toy sizes: every dimension <= 8, TILE_WIDTH <= 4, at most 16 steps): one row per block and step
  (Phase 0..n-1, then the store): the M, N and P grids with every element named, the two
  shared tiles with what each cell received (``M0,2``, or a grey ``0`` where the lectures
  write 0 for a missing element), and which thread (threadIdx.x,y) stored each P element;
* summary (up to 36 blocks and 16 phases, J*K*L <= 64^3): one row per block: M and N with
  each phase's tile outlined and numbered, P with the block's tile and the elements it
  stored, and a text column per phase (tile rows and columns, zero-filled cells, stores). A summary
  taller than a laptop screen (PAGE_MAX_PX) is split into pages of SUMMARY_ROWS_PER_PAGE blocks
  after an index page (P's block tiles marked with the page that draws each, and the pages' files).

Past those limits it refuses with the reason, before any work.
"""
from __future__ import annotations

import math
from pathlib import Path

DETAIL_MAX_DIM, DETAIL_MAX_TILE, DETAIL_MAX_STEPS = 8, 4, 16
SUMMARY_MAX_BLOCKS, SUMMARY_MAX_PHASES = 36, 16
PAGE_MAX_PX, DPI = 1600, 100       # a laptop screen's height: a taller summary is split into pages
SUMMARY_WIDTH_IN, SUMMARY_ROW_IN, SUMMARY_TOP_IN, INDEX_HEIGHT_IN = 15.0, 2.45, 0.9, 8.0
PAGE_LINE_IN = 0.2      # the title's second line on a page of a split summary
SUMMARY_ROWS_PER_PAGE = int((PAGE_MAX_PX / DPI - SUMMARY_TOP_IN - PAGE_LINE_IN) // SUMMARY_ROW_IN)
DODGE = 0.03        # roofline: decades between measured points that share an intensity

C_M, C_N, C_STORE, C_BLOCK, C_ZERO = "#7fb3ff", "#ffb37f", "#7fdf7f", "#eeeeee", "#bbbbbb"
C_SM, C_SN = "#cfe1ff", "#ffe1cc"


def check_explain(shape: tuple, tile: int) -> str:
    """'detail' or 'summary' for a J x K x L product with TILE_WIDTH ``tile``; raises TiledmmError
    past the limits (checked before any work)."""
    from .. import registry
    from .._arrays import TiledmmError
    from .trace import check_request
    check_request("tiled", shape, tile)
    J, K, L = shape
    blocks = math.ceil(J / tile) * math.ceil(L / tile)
    phases = math.ceil(K / tile)
    if max(shape) <= DETAIL_MAX_DIM and tile <= DETAIL_MAX_TILE and blocks * (phases + 1) <= DETAIL_MAX_STEPS:
        return "detail"
    if blocks > SUMMARY_MAX_BLOCKS or phases > SUMMARY_MAX_PHASES:
        sizes = [t for t in registry.get("tiled").tiles
                 if math.ceil(J / t) * math.ceil(L / t) <= SUMMARY_MAX_BLOCKS and math.ceil(K / t) <= SUMMARY_MAX_PHASES]
        raise TiledmmError(
            f"explain draws at most {SUMMARY_MAX_BLOCKS} blocks and {SUMMARY_MAX_PHASES} phases; {J}x{K}x{L} with "
            f"TILE_WIDTH {tile} has {blocks} blocks and {phases} phases: "
            + (f"use --tile {' or '.join(map(str, sizes))}" if sizes else "use a smaller --shape"))
    return "summary"


def _frame(ax, rows, cols, title):
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=8)


def _grid(ax, rows, cols, title, fill: dict, labels: dict):
    import matplotlib.patches as patches
    _frame(ax, rows, cols, title)
    # a panel is about 135 pt wide: the label font shrinks with the cells, so labels never touch
    widest = max((len(v) for v in labels.values()), default=1)
    fontsize = min(7.0, 1.15 * 135 / max(rows, cols) / widest)
    for r in range(rows):
        for c in range(cols):
            ax.add_patch(patches.Rectangle((c, r), 1, 1, fill=True, lw=0.8, ec="black", fc=fill.get((r, c), "white")))
            if (r, c) in labels:
                ax.text(c + 0.5, r + 0.5, labels[(r, c)], ha="center", va="center", fontsize=fontsize)


def _block_name(st) -> str:
    return f"blockIdx.x={st['block'][0]}, blockIdx.y={st['block'][1]}"


def _legend(fig, entries, y):
    import matplotlib.patches as patches
    handles = [patches.Patch(fc=c, ec="black", label=t) for c, t in entries]
    fig.legend(handles=handles, loc="upper center", ncol=min(4, len(handles)), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, y))


def summary_pages(shape: tuple, tile: int) -> int:
    """Pages of the summary view of a J x K x L product with TILE_WIDTH ``tile``: 1 when its rows fit
    PAGE_MAX_PX, else that many pages of at most SUMMARY_ROWS_PER_PAGE blocks (after an index)."""
    J, _, L = shape
    return len(_split(list(range(math.ceil(J / tile) * math.ceil(L / tile)))))


def _split(blocks: list) -> list[list]:
    """``blocks`` in pages of at most SUMMARY_ROWS_PER_PAGE, as even as they go (25: 5 pages of 5)."""
    pages = math.ceil(len(blocks) / SUMMARY_ROWS_PER_PAGE)
    per = math.ceil(len(blocks) / pages)
    return [blocks[i:i + per] for i in range(0, len(blocks), per)]


def page_paths(path: Path, pages: int) -> list[Path]:
    """Where the pages of a summary split in ``pages`` go beside its index ``path``: NAME-page1.png, ..."""
    return [path.with_name(f"{path.stem}-page{i}{path.suffix}") for i in range(1, pages + 1)]


def explain_figures(tr, view: str | None = None, progress=None, path: Path | None = None) -> list:
    """The matplotlib Figures of ``tr`` (a trace of the tiled kernel): one, or for a summary taller
    than PAGE_MAX_PX an index and then its pages (the index names each page's file beside ``path``,
    or its page of a PDF); ``progress(done, total)`` after each row."""
    view = view or check_explain(tr.shape, tr.tile)
    if view == "detail":
        return [_detail(tr, progress)]
    steps = tr.phases()
    blocks = sorted({p["block"] for p in steps}, key=lambda b: (b[1], b[0]))
    pages = _split(blocks)
    if len(pages) == 1:
        return [_summary(tr, steps, blocks, progress)]
    path = Path(path or "explain.png")
    names = ([f"page {i + 1} of {path.name}" for i in range(1, len(pages) + 1)] if path.suffix == ".pdf"
             else [p.name for p in page_paths(path, len(pages))])
    figs = [_index(tr, pages, names)]
    done = 0
    for n, page in enumerate(pages, start=1):
        figs.append(_summary(tr, steps, page, progress and (lambda d, t, o=done: progress(o + d, len(blocks))),
                             page=(n, len(pages))))
        done += len(page)
    return figs


def explain_figure(tr, path: Path, view: str | None = None, progress=None) -> list[Path]:
    """Draw ``tr`` (a trace of the tiled kernel) to ``path`` (.svg, .png, .pdf); ``progress(done, total)``
    after each row. A summary taller than a screen (PAGE_MAX_PX) becomes an index at ``path`` and its
    pages beside it (``page_paths``), or for a PDF the pages of that one file. Returns the files written."""
    path = Path(path)
    return save_figures(explain_figures(tr, view, progress, path), path)


def save_figures(figs: list, path: Path) -> list[Path]:
    """``explain_figures``' figures at ``path``: the first there, any more beside it (``page_paths``) or,
    for a PDF, as further pages of that file. Returns the files written."""
    path = Path(path)
    if len(figs) > 1 and path.suffix == ".pdf":
        from matplotlib.backends.backend_pdf import PdfPages
        with PdfPages(path) as pdf:
            for f in figs:
                pdf.savefig(f)
        return [path]
    paths = [path] + page_paths(path, len(figs) - 1)
    for f, p in zip(figs, paths):
        f.savefig(p, dpi=DPI)
    return paths


def _detail(tr, progress):
    from matplotlib.figure import Figure
    J, K, L = tr.shape
    T = tr.tile
    steps = [p for p in tr.phases() if p["M"] or p["N"] or p["stored"] or p["shared"]]
    top = 0.9   # inches for title and legend
    h = 2.7 * len(steps) + top
    fig = Figure(figsize=(13, h))
    axes = fig.subplots(len(steps), 5, squeeze=False)
    held = {}     # per block: the shared tiles as the last phase left them (the store reads them)
    for n, (row, st) in enumerate(zip(axes, steps)):
        head = f"{_block_name(st)} — {st['step']}"
        shared = held[st["block"]] = st["shared"] or held.get(st["block"], {})
        _grid(row[0], J, K, f"{head}\nM (J x K): M[row,col] loaded this step", {i: C_M for i in st["M"]},
              {i: f"{i[0]},{i[1]}" for i in st["M"]})
        _grid(row[1], K, L, "N (K x L): N[row,col] loaded this step", {i: C_N for i in st["N"]},
              {i: f"{i[0]},{i[1]}" for i in st["N"]})
        for ax, name, c in ((row[2], "subTileM", C_SM), (row[3], "subTileN", C_SN)):
            cells = shared.get(name, {})
            _grid(ax, T, T, f"shared {name}[ty][tx]\n" + ("as the last phase left it" if not st["shared"]
                                                          else "after this step's loads"),
                  {i: (C_ZERO if v == "0" else c) for i, v in cells.items()}, cells)
        blk = {(st["block"][1] * T + r, st["block"][0] * T + c) for r in range(T) for c in range(T)}
        fills = {i: C_BLOCK for i in blk if i[0] < J and i[1] < L}
        fills.update({tuple(i): C_STORE for i in st["stored"]})
        labels = {tuple(i): f"{t[0]},{t[1]}" for i, t in zip(st["stored"], st["storing_threads"])}
        _grid(row[4], J, L, "P (J x L): stored by thread\n(threadIdx.x,threadIdx.y)", fills, labels)
        if progress:
            progress(n + 1, len(steps))
    fig.suptitle(f"{tr.kernel} kernel, TILE_WIDTH {T}: P ({J}x{L}) = M ({J}x{K}) @ N ({K}x{L}); "
                 f"grid {tr.grid[0]}x{tr.grid[1]} blocks of {T}x{T} threads, "
                 f"{_phases(K, T)}, then the store", fontsize=10, y=1 - 0.25 / h)
    _legend(fig, [(C_M, "M element loaded from global memory"), (C_N, "N element loaded"),
                  (C_SM, "shared cell: the M element it received"), (C_SN, "shared cell: the N element it received"),
                  (C_ZERO, "shared cell zero-filled (no element: 0)"), (C_BLOCK, "P: this block's tile"),
                  (C_STORE, "P: stored this step (label: threadIdx.x,y)"), ("white", "not touched")],
            1 - 0.4 / h)
    fig.tight_layout(rect=(0, 0, 1, 1 - top / h))
    return fig


def _summary(tr, steps, blocks, progress, page: tuple | None = None):
    """One row per block of ``blocks``; ``page``: (this page, of pages) for a summary split in pages."""
    import matplotlib.patches as patches
    import numpy as np
    from matplotlib.figure import Figure
    J, K, L = tr.shape
    T = tr.tile
    nph = math.ceil(K / T)
    cmap = _phase_cmap(nph)
    top = SUMMARY_TOP_IN + (PAGE_LINE_IN if page else 0)
    h = SUMMARY_ROW_IN * len(blocks) + top
    fig = Figure(figsize=(SUMMARY_WIDTH_IN, h))
    axes = fig.subplots(len(blocks), 4, squeeze=False, gridspec_kw={"width_ratios": [1, 1, 1, 1.6]})
    for n, (row, b) in enumerate(zip(axes, blocks)):
        mine = [p for p in steps if p["block"] == b]
        bx, by = b[0], b[1]
        for ax, name, rows, cols, title in ((row[0], "M", J, K, f"blockIdx.x={bx}, blockIdx.y={by}\nM: tile of each phase"),
                                            (row[1], "N", K, L, "N: tile of each phase")):
            img = np.full((rows, cols), np.nan)
            for p in mine:
                for i in p[name]:
                    img[i] = p["phase"]
            ax.imshow(img, cmap=cmap, vmin=-0.5, vmax=cmap.N - 0.5, extent=(0, cols, rows, 0), alpha=0.6,
                      interpolation="nearest")
            _frame(ax, rows, cols, title)
            for ph in range(nph):   # the tile the block's threads cover in this phase (clipped)
                r0, c0 = (by * T, ph * T) if name == "M" else (ph * T, bx * T)
                ax.add_patch(patches.Rectangle((c0, r0), T, T, fill=False, lw=1.2, ec=cmap(ph % cmap.N),
                                               ls="-" if r0 + T <= rows and c0 + T <= cols else "--"))
                ax.text(min(c0 + T / 2, cols - 0.5), min(r0 + T / 2, rows - 0.5), str(ph), ha="center",
                        va="center", fontsize=8, weight="bold")
        img = np.zeros((J, L, 3)) + 1.0
        for r in range(by * T, min(by * T + T, J)):
            for c in range(bx * T, min(bx * T + T, L)):
                img[r, c] = (0.93, 0.93, 0.93)
        stored = [i for p in mine for i in p["stored"]]
        for i in stored:
            img[tuple(i)] = matplotlib_rgb(C_STORE)
        row[2].imshow(img, extent=(0, L, J, 0), interpolation="nearest")
        _frame(row[2], J, L, f"P: this block's tile,\n{len(stored)} elements stored")
        row[2].add_patch(patches.Rectangle((bx * T, by * T), T, T, fill=False, lw=1.2, ec="black",
                                           ls="-" if by * T + T <= J and bx * T + T <= L else "--"))
        row[3].axis("off")
        lines = []
        for p in mine:
            z = ", ".join(f"{k} {len(v)}" for k, v in p["zero_filled"].items()) or "none"
            if p["step"] == "the store":
                lines.append(f"the store: {_cells(p['stored'])} of P by {len(p['stored'])} threads")
            else:
                lines.append(f"Phase {p['phase']}: M {_cells(p['M'])}; N {_cells(p['N'])}; zero-filled: {z}"
                             + (f"; stored {_cells(p['stored'])}" if p["stored"] else ""))
        row[3].text(0, 0.5, "\n".join(lines), fontsize=7.5 if len(lines) <= 8 else 6.5, va="center",
                    family="monospace")
        if progress:
            progress(n + 1, len(blocks))
    where = "" if page is None else f"\npage {page[0]} of {page[1]}: blocks {_block_list(blocks)}"
    fig.suptitle(_summary_title(tr) + where, fontsize=10, y=1 - 0.25 / h)
    _summary_legend(fig, nph, 1 - (top - 0.5) / h)
    fig.tight_layout(rect=(0, 0, 1, 1 - top / h))
    return fig


def _phase_cmap(nph: int):
    import matplotlib
    return matplotlib.colormaps["tab10" if nph <= 10 else "tab20"]


def _summary_title(tr) -> str:
    J, K, L = tr.shape
    T = tr.tile
    return (f"{tr.kernel} kernel, TILE_WIDTH {T}: P ({J}x{L}) = M ({J}x{K}) @ N ({K}x{L}); grid "
            f"{tr.grid[0]}x{tr.grid[1]} blocks of {T}x{T} threads, {_phases(K, T)}, then the store "
            "(summary: one row per block)")


def _summary_legend(fig, nph: int, y: float) -> None:
    cmap = _phase_cmap(nph)
    _legend(fig, [(cmap(i), f"Phase {i}") for i in range(min(nph, 8))]
            + [("white", "dashed outline: tile reaches past the matrix (those cells zero-filled)"),
               ("#eeeeee", "P: this block's tile"), (C_STORE, "P: stored by this block")], y)


def _block_list(blocks) -> str:
    """(blockIdx.x, blockIdx.y) of consecutive blocks, by rows of the grid: '(0,0)..(4,0), (0,1)'."""
    rows: dict[int, list[int]] = {}
    for b in blocks:
        rows.setdefault(b[1], []).append(b[0])
    parts = []
    for y, xs in rows.items():
        parts.append(f"({xs[0]},{y})" if len(xs) == 1 else f"({xs[0]},{y})..({xs[-1]},{y})")
    return ", ".join(parts)


def _index(tr, pages: list[list], names: list[str]):
    """The first page of a summary split in pages: the title and legend, P with each block's tile
    marked with the page that draws it, and the list of pages."""
    import matplotlib
    import matplotlib.patches as patches
    from matplotlib.figure import Figure
    J, K, L = tr.shape
    T = tr.tile
    h = INDEX_HEIGHT_IN
    fig = Figure(figsize=(SUMMARY_WIDTH_IN, h))
    grid, text = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
    colours = matplotlib.colormaps["Pastel1"].colors
    _frame(grid, J, L, "P (J x L): each block's tile, (blockIdx.x,blockIdx.y) and the page that draws it")
    grid.set_title(grid.get_title(), fontsize=9)
    cell = min(1.0, 6.0 / max(J / T, L / T))     # font scale: the tiles shrink as the grid grows
    for n, page in enumerate(pages, start=1):
        for b in page:
            x0, y0 = b[0] * T, b[1] * T
            w, hh = min(T, L - x0), min(T, J - y0)
            grid.add_patch(patches.Rectangle((x0, y0), w, hh, lw=1, ec="black", fc=colours[(n - 1) % len(colours)]))
            narrow = min(w, hh) < 0.6 * T       # a tile clipped by the matrix's edge: the page alone
            grid.text(x0 + w / 2, y0 + hh / 2, f"p{n}" if narrow else f"({b[0]},{b[1]})\np{n}", ha="center",
                      va="center", fontsize=max(5.0, 9 * cell * (0.7 if narrow else 1)))
    text.axis("off")
    lines = [f"This summary is {len(pages)} pages of up to {len(pages[0])} blocks (one row per block), so",
             "that each fits a screen. Per block: M and N with each phase's tile outlined and",
             "numbered, P with the block's tile and the elements it stored, and per phase what was",
             "loaded, zero-filled and stored.", ""]
    lines += [f"page {n}: {name}\n         blocks {_block_list(page)}" for n, (page, name) in
              enumerate(zip(pages, names), start=1)]
    text.text(0, 1, "\n".join(lines), va="top", fontsize=8.5, family="monospace")
    top = SUMMARY_TOP_IN + PAGE_LINE_IN
    fig.suptitle(_summary_title(tr) + f"\nindex of {len(pages)} pages", fontsize=10, y=1 - 0.25 / h)
    _summary_legend(fig, math.ceil(K / T), 1 - (top - 0.5) / h)
    fig.tight_layout(rect=(0, 0, 1, 1 - top / h))
    return fig


def _phases(K: int, T: int) -> str:
    n = math.ceil(K / T)
    return f"{n} phase{'s' if n != 1 else ''} (Phase 0..{n - 1})" if n > 1 else "1 phase (Phase 0)"


def matplotlib_rgb(c):
    from matplotlib.colors import to_rgb
    return to_rgb(c)


def _cells(cells) -> str:
    from .trace import region
    return region(cells)


def roofline_points(measured: dict) -> list[dict]:
    """The roofline's points: each SIMT kernel (what the traffic model describes) at its default and
    largest tile where their intensities differ, with its measured GFLOP/s from ``measured``
    ((kernel, tile) -> GFLOP/s) or None."""
    from .. import registry
    from .model import bytes_per_flop
    points = []
    for s in registry.all_specs():
        if s.make is None or s.block_tile is None:
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
    return points


def roofline_figure(dev, points: list[dict], path: Path, bandwidth_gbs: float | None = None) -> Path:
    """``roofline_fig`` saved to ``path`` (.png, .svg, .pdf)."""
    fig = roofline_fig(dev, points, bandwidth_gbs)
    fig.savefig(path, dpi=110)
    return Path(path)


def roofline_fig(dev, points: list[dict], bandwidth_gbs: float | None = None):
    """A matplotlib Figure. points: {"label", "intensity" (FLOP/B), "gflops" (measured) or None}; roofs
    from ``dev``. Kernels at the same intensity share one numbered open circle (the model's bound);
    the numbers are explained in a table beside the chart, so no two labels print over each other.
    Each measured point has its own colour and marker pair (``pictures.kernel_styles``), and its
    legend entry starts with its circle's number."""
    import numpy as np
    from matplotlib.figure import Figure
    from .._arrays import TiledmmError
    from ..pictures import kernel_styles
    bw = bandwidth_gbs or dev.dram_gbs
    peak = dev.fp32_tflops * 1000
    if not bw:
        raise TiledmmError(f"profile {dev.name!r} has no DRAM bandwidth: give --bandwidth")
    groups: dict[float, list[dict]] = {}
    for p in points:
        groups.setdefault(round(p["intensity"], 9), []).append(p)
    styles = kernel_styles(p["label"] for p in points if p.get("gflops"))
    xs = [p["intensity"] for p in points]
    x = np.logspace(math.floor(math.log10(min(xs + [1]))) - 1, math.ceil(math.log10(max(xs + [10]))) + 1, 200)
    fig = Figure(figsize=(11.5, 5.5))
    ax, side = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2.2, 1]})
    roof = np.minimum(bw * x, peak) if peak else bw * x
    ax.loglog(x, roof, color="black", lw=2,
              label=f"roof: {bw:,.0f} GB/s" + (f", {peak:,.0f} GFLOP/s FP32" if peak else ""))
    lines = []
    for n, (inten, ps) in enumerate(sorted(groups.items()), start=1):
        bound = min(bw * inten, peak) if peak else bw * inten
        ax.scatter([inten], [bound], marker="o", s=60, facecolors="white", edgecolors="black", zorder=3)
        ax.annotate(str(n), (inten, bound), fontsize=8, ha="center", va="bottom",
                    xytext=(0, 6 + 9 * (n % 2)), textcoords="offset points")
        lines.append(f"{n}  {inten:.3g} FLOP/B, bound {bound:,.0f}: " + ", ".join(p["label"] for p in ps))
        shown = [p for p in ps if p.get("gflops")]
        for j, p in enumerate(shown):   # spread sideways (a few % of a decade) so that none hides another
            colour, marker = styles[p["label"]]
            ax.scatter([inten * 10 ** (DODGE * (j - (len(shown) - 1) / 2))], [p["gflops"]], s=45, zorder=4,
                       color=colour, marker=marker, edgecolors="black", linewidths=0.4,
                       label=f"{n}  {p['label']}: {p['gflops']:,.0f} measured")
    ax.set_ylim(top=float(roof.max()) * 5)     # room for the numbers above the roof
    ax.set_xlabel("arithmetic intensity of global-memory requests (FLOP/byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"roofline — {dev.name}", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    side.axis("off")
    side.legend(*ax.get_legend_handles_labels(), fontsize=7, loc="lower left", frameon=False,
                title="number: the open circle of its bound", title_fontsize=7, borderaxespad=0)
    wrapped = []
    for ln in lines:   # wrap long kernel lists
        words, cur = ln.split(" "), ""
        for w in words:
            if len(cur) + len(w) > 46:
                wrapped.append(cur)
                cur = "     " + w
            else:
                cur = f"{cur} {w}" if cur else w
        wrapped.append(cur)
    side.text(0, 1, "open circles: the model's bound\n\n" + "\n".join(wrapped), va="top", fontsize=7.5,
              family="monospace")
    fig.tight_layout()
    return fig
