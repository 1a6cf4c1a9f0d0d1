"""Pictures: the slides' toy examples drawn from a recorded trace, and a roofline chart.

``explain_figure`` draws one row per (block, phase) of a tiled run: the M, N and P
grids, with the elements loaded from global memory in that phase, the shared-tile
cells that were zero-filled (the lectures' "write 0 for missing elements"), and the
P elements stored (with the storing thread). Written as SVG or PNG by matplotlib.
"""
from __future__ import annotations

from pathlib import Path


def _grid(ax, rows, cols, title, fill: dict, labels: dict):
    import matplotlib.patches as patches
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=8)
    for r in range(rows):
        for c in range(cols):
            ax.add_patch(patches.Rectangle((c, r), 1, 1, fill=True, lw=0.8, ec="black",
                                           fc=fill.get((r, c), "white")))
            if (r, c) in labels:
                ax.text(c + 0.5, r + 0.5, labels[(r, c)], ha="center", va="center", fontsize=6)


def explain_figure(tr, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    J, K, L = tr.shape
    T = tr.tile
    steps = [p for p in tr.phases() if p["M"] or p["N"] or p["stored"] or p["zero_filled"]]
    fig, axes = plt.subplots(len(steps), 5, figsize=(12, 2.2 * len(steps)), squeeze=False)
    for row, st in zip(axes, steps):
        bx, by = st["block"][0], st["block"][1]
        ph = st["phase"]
        store_step = bool(st["stored"]) and not st["M"]
        head = f"Block(y={by},x={bx}) " + ("stores" if store_step else f"phase {ph}")
        _grid(row[0], J, K, f"{head}\nM (J x K) loaded", {i: "#7fb3ff" for i in st["M"]},
              {i: f"M{i[0]},{i[1]}" for i in st["M"]})
        _grid(row[1], K, L, "N (K x L) loaded", {i: "#ffb37f" for i in st["N"]},
              {i: f"N{i[0]},{i[1]}" for i in st["N"]})
        zM = set(map(tuple, st["zero_filled"].get("subTileM", [])))
        zN = set(map(tuple, st["zero_filled"].get("subTileN", [])))
        _grid(row[2], T, T, "shared M tile\n(grey: wrote 0)", {i: "#cccccc" for i in zM}, {i: "0" for i in zM})
        _grid(row[3], T, T, "shared N tile\n(grey: wrote 0)", {i: "#cccccc" for i in zN}, {i: "0" for i in zN})
        blk = {(by * T + r, bx * T + c) for r in range(T) for c in range(T)}
        fills = {i: "#eeeeee" for i in blk if i[0] < J and i[1] < L}
        fills.update({tuple(i): "#7fdf7f" for i in st["stored"]})
        labels = {tuple(i): f"t{t[1]},{t[0]}" for i, t in zip(st["stored"], st["storing_threads"])}
        _grid(row[4], J, L, "P (green: stored,\nlabel threadIdx y,x)", fills, labels)
    fig.suptitle(f"{tr.kernel}, TILE_WIDTH {T}, {J}x{K} @ {K}x{L}: grid {tr.grid[1]}x{tr.grid[0]} blocks", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / max(len(steps), 1)))
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def roofline_figure(dev, points: list[dict], path: Path, bandwidth_gbs: float | None = None) -> Path:
    """points: {"label", "intensity" (FLOP/B), "gflops" (measured) or None}; roofs from ``dev``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    bw = bandwidth_gbs or dev.dram_gbs
    peak = dev.fp32_tflops * 1000
    x = np.logspace(-2, 3, 200)
    fig, ax = plt.subplots(figsize=(7.5, 5))
    ax.loglog(x, np.minimum(bw * x, peak), color="black", lw=2, label=f"roof: {bw:.0f} GB/s, {peak:.0f} GFLOP/s FP32")
    for p in points:
        bound = min(bw * p["intensity"], peak)
        ax.scatter([p["intensity"]], [bound], marker="_", s=200, color="gray")
        if p.get("gflops"):
            ax.scatter([p["intensity"]], [p["gflops"]], s=40, label=f"{p['label']}: {p['gflops']:.0f} GFLOP/s")
        ax.annotate(p["label"], (p["intensity"], p.get("gflops") or bound), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("arithmetic intensity of global-memory requests (FLOP/byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"roofline — {dev.name}")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
