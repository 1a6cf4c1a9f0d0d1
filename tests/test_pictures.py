"""The pictures, drawn at the README's sizes on the CPU (matplotlib Agg), checked for what can be checked:
the image's size in pixels, one bar or marker per kernel, distinct colour-marker pairs, the labels.

Bench pictures are drawn from rows that ``bench.plan`` and ``bench.run`` build as on an H100 (cuBLAS
baseline rows and x cuBLAS included), with the harness's check-and-time replaced by synthetic rates:
the picture's layout is under test here, not any speed.
"""
import random
import zlib

import numpy as np
import pytest
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer
from PIL import Image
from typer.testing import CliRunner

from tiledmm import _backend, bench as B, harness, registry
from tiledmm.analysis.device import current_or
from tiledmm.analysis.explain import (PAGE_MAX_PX, explain_figure, explain_figures, roofline_fig,
                                      roofline_points, save_figures, summary_pages)
from tiledmm.cli import app
from tiledmm.pictures import DPI, WIDTH, bench_figure, charts, kernel_styles, shape_groups

from .conftest import GPU

H100 = current_or("h100")
PEAKS = {"fp32": H100.fp32_tflops, **H100.tensor_tflops}
PRECISIONS = ["fp32", "tf32", "bf16"]


def synthetic_rows(monkeypatch, suites, precisions=PRECISIONS, kernels=None, gpu=True):
    """``bench.run``'s rows for ``suites`` as a GPU (``gpu``) or emulation run makes them, every point
    'measured' at a made-up rate that depends only on the point."""
    def fake(kernel, shape, dtype, *, tile=None, precision=None, **_):
        spec = registry.get(kernel)
        rnd = random.Random(zlib.crc32(f"{kernel}{shape}{dtype}{precision}".encode()))
        prec = "bf16" if dtype == "bfloat16" else "tf32" if precision == "tf32" else "fp32"
        tflops = PEAKS[prec] * (0.75 if kernel == "cublas" else rnd.uniform(0.02, 0.9)) * (1 if gpu else 1e-8)
        return harness.Result(kernel, spec.check_tile(tile), tuple(shape), dtype, precision, 1e-7, 1e-5,
                              ms=2 * B.work(shape) / tflops / 1e9, tflops=tflops, emulated=not gpu)
    monkeypatch.setattr(_backend, "emulating", lambda: not gpu)
    monkeypatch.setattr(harness, "check_and_time", fake)
    ks = [k for k in (kernels or registry.names()) if k != "cublas"]
    rows = B.run(B.plan(suites, precisions, ks), repeats=1, warmup=0)
    monkeypatch.undo()
    return rows


def png_size(fig, tmp_path, dpi=DPI):
    path = tmp_path / "p.png"
    fig.savefig(path, dpi=dpi)
    with Image.open(path) as im:
        return im.size


def bar_axes(fig):
    return [ax for ax in fig.axes if any(isinstance(c, BarContainer) for c in ax.containers)]


def texts(ax):
    return [t.get_text() for t in ax.texts]


def test_shape_groups_of_every_suite():
    kinds = {s: [k for k, _ in shape_groups(B.SUITES[s])] for s in B.SUITES}
    assert kinds["quick"] == ["bars"]
    assert kinds["square"] == ["square"] and kinds["ladder"] == ["square"]
    assert kinds["transformer"] == ["M"] * 3 and kinds["llm"] == ["M"] * 6
    assert kinds["irregular"] == ["table"]
    assert kinds["emulation"] == ["bars", "bars"]
    (_, ladder), *_ = shape_groups(B.SUITES["llm"])
    assert [s[0] for s in ladder] == [1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    assert {s[1:] for s in ladder} == {(4096, 4096)}


def test_quick_suite_bench_picture_is_one_bar_chart_per_precision(monkeypatch, tmp_path):
    rows = synthetic_rows(monkeypatch, ["quick"])
    fig = bench_figure(rows, "NVIDIA H100 (synthetic rates)", PEAKS)
    w, h = png_size(fig, tmp_path)
    assert w == WIDTH * DPI and h <= PAGE_MAX_PX, (w, h)
    axes = bar_axes(fig)
    assert len(axes) == 3 and len(fig.axes) == 3
    for ax, p in zip(axes, PRECISIONS):
        mine = [r for r in rows if r["precision"] == p]
        assert ax.get_title().startswith(f"{p} — 4096x4096x4096")
        (bars,) = ax.containers
        assert len(bars) == len(mine) >= 2                               # one bar per kernel, cuBLAS's too
        widths = [b.get_width() for b in bars]
        assert widths == sorted(widths, reverse=True)                     # fastest on top
        names = [t.get_text() for t in ax.get_yticklabels()]
        assert sorted(names) == sorted("cuBLAS" if r["kernel"] == "cublas" else r["kernel"] for r in mine)
        labels = texts(ax)
        assert len(labels) == len(mine)
        assert all("TFLOP/s" in t and "x cuBLAS" in t for t in labels)
        for r in mine:
            want = "1.00x cuBLAS" if r["kernel"] == "cublas" else f"{r['vs_cublas']:.2f}x cuBLAS"
            bar = names.index("cuBLAS" if r["kernel"] == "cublas" else r["kernel"])
            assert want in labels[bar], (r["kernel"], labels[bar])
            assert bars[bar].get_width() == pytest.approx(r["tflops"])
        peak_lines = [ln for ln in ax.lines if list(ln.get_xdata()) == [PEAKS[p]] * 2]
        assert len(peak_lines) == 1, "the peak as a vertical line"
    fp32 = [r for r in rows if r["precision"] == "fp32"]
    assert len(fp32) == 1 + len([k for k in registry.names() if k != "cublas" and "float32" in
                                 registry.get(k).dtypes])      # every kernel that runs fp32, and cuBLAS


def test_sweeps_plot_one_line_per_kernel_along_the_swept_size(monkeypatch, tmp_path):
    rows = synthetic_rows(monkeypatch, ["square", "transformer"], ["fp32", "bf16"])
    assert [c.kind for c in charts(rows)] == ["square"] * 2 + ["M"] * 6
    fig = bench_figure(rows, "NVIDIA H100 (synthetic rates)", PEAKS)
    w, h = png_size(fig, tmp_path)
    assert w == WIDTH * DPI and h <= 2 * PAGE_MAX_PX, (w, h)
    plots = [ax for ax in fig.axes if ax.get_xlabel()]
    assert len(plots) == 8
    square = plots[0]
    assert list(square.get_xticks()) == [1024, 2048, 4096, 8192] and square.get_xlabel() == "M = K = N"
    kernels = {r["kernel"] for r in rows if r["precision"] == "fp32" and r["suite"] == "square"}
    series = [ln for ln in square.lines if not ln.get_label().startswith(("_", "fp32 peak"))]
    assert sorted(ln.get_label() for ln in series) == sorted("cuBLAS" if k == "cublas" else k for k in kernels)
    pairs = [(ln.get_color() if isinstance(ln.get_color(), str) else tuple(ln.get_color()), ln.get_marker())
             for ln in series]
    assert len(set(pairs)) == len(pairs), "each kernel its own colour and marker"
    m_sweep = plots[2]
    assert m_sweep.get_xlabel() == "M (N=5120, K=5120)" and list(m_sweep.get_xticks()) == [1, 32, 256, 4096]
    for ln in series:                     # x: the swept size, in order
        assert list(ln.get_xdata()) == sorted(ln.get_xdata())


def test_unrelated_shapes_make_a_table_of_x_cublas(monkeypatch, tmp_path):
    rows = synthetic_rows(monkeypatch, ["irregular"], ["bf16"])
    (c,) = charts(rows)
    assert c.kind == "table"
    fig = bench_figure(rows, "NVIDIA H100 (synthetic rates)", PEAKS)
    (ax,) = fig.axes
    cells = [t for t in texts(ax) if t]
    assert len(cells) == len(rows)                           # one cell per measured (kernel, shape)
    for r in rows:
        want = "1.00x (" if r["kernel"] == "cublas" else f"{r['vs_cublas']:.2f}x ("
        assert any(t.startswith(want) for t in cells), (r["kernel"], r["shape"], want)
    assert "x cuBLAS" in ax.get_title()
    assert png_size(fig, tmp_path)[1] <= PAGE_MAX_PX


def test_emulated_bench_picture_says_so_and_scales_its_unit(monkeypatch, tmp_path):
    rows = synthetic_rows(monkeypatch, ["emulation"], ["fp32"], ["tiled", "triton"], gpu=False)
    assert not any(r["kernel"] == "cublas" for r in rows)
    fig = bench_figure(rows, "CPU emulation", None)
    axes = bar_axes(fig)
    assert len(axes) == 2                                      # the emulation suite's two unrelated shapes
    assert "nothing about GPU speed" in fig.get_suptitle()
    for ax in axes:
        assert all("MFLOP/s" in t and "cuBLAS" not in t for t in texts(ax))
        assert not ax.lines                                       # no peak without a device
    assert png_size(fig, tmp_path)[1] <= PAGE_MAX_PX


def test_bench_write_draws_the_picture(monkeypatch, tmp_path):
    rows = synthetic_rows(monkeypatch, ["quick"])
    paths = B.write(rows, tmp_path, {"device": "NVIDIA H100 (synthetic rates)", "mode": "gpu"}, PEAKS)
    assert paths[-1] == tmp_path / "bench.png"
    with Image.open(paths[-1]) as im:
        assert im.size[0] == WIDTH * DPI and im.size[1] <= PAGE_MAX_PX


def test_kernel_styles_are_distinct_pairs():
    styles = kernel_styles(f"k{i}" for i in range(70))
    assert len(set(styles.values())) == 70
    for i in range(60):       # a colour comes back after ten labels, with another marker
        assert styles[f"k{i}"][0] == styles[f"k{i + 10}"][0] and styles[f"k{i}"][1] != styles[f"k{i + 10}"][1]


def _measured_points(ax):
    return [c for c in ax.collections if isinstance(c, PathCollection) and "measured" in c.get_label()]


def test_roofline_every_measured_kernel_its_own_colour_and_marker(tmp_path):
    points = roofline_points({})
    assert len(points) > 10                               # more than tab10 has colours
    for i, p in enumerate(points):
        p["gflops"] = 1000.0 * (i + 1)
    fig = roofline_fig(H100, points)
    assert png_size(fig, tmp_path, 110) == (1265, 605)
    ax = fig.axes[0]
    dots = _measured_points(ax)
    assert len(dots) == len(points)                                     # one marker per kernel
    pairs = {(tuple(np.round(d.get_facecolor()[0], 4)), d.get_paths()[0].vertices.round(4).tobytes())
             for d in dots}
    assert len(pairs) == len(points), "a colour and marker pair per kernel"
    legend = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    for p in points:
        assert any(f"{p['label']}: {p['gflops']:,.0f} measured" in t for t in legend), p["label"]


def test_roofline_from_a_bench_json(monkeypatch, tmp_path):
    """What `tiledmm roofline --bench` reads: a GPU run's bench.json; every fp32 SIMT kernel becomes a point."""
    rows = synthetic_rows(monkeypatch, ["quick"], ["fp32"])
    B.write(rows, tmp_path, {"device": "NVIDIA H100 (synthetic rates)", "mode": "gpu"}, PEAKS)
    out = tmp_path / "roofline.png"
    r = CliRunner().invoke(app, ["roofline", "--profile", "h100", "--bench", str(tmp_path / "bench.json"),
                                 "--out", str(out)])
    assert r.exit_code == 0, r.stdout + r.stderr
    with Image.open(out) as im:
        assert im.size == (1265, 605)
    from tiledmm.cli.analysis import _measured
    points = roofline_points(_measured(str(tmp_path / "bench.json")))
    measured = [p for p in points if p["gflops"]]
    assert len(measured) >= 10
    dots = _measured_points(roofline_fig(H100, points).axes[0])
    assert len(dots) == len(measured)


@pytest.fixture(scope="module")
def summary_40(tmp_path_factory):
    """The README's summary, 40x40x40 with TILE_WIDTH 8 (25 blocks): its figures, drawn once."""
    from tiledmm.analysis.trace import trace
    return explain_figures(trace("tiled", (40, 40, 40), 8), path=tmp_path_factory.mktemp("explain") / "x.png")


@pytest.mark.slow
@pytest.mark.skipif(GPU, reason="traces run in emulation")
def test_explain_summary_pages_fit_a_screen(summary_40, tmp_path):
    """An index, then pages of at most 1,600 px that draw every block once, as the index says."""
    pages = summary_pages((40, 40, 40), 8)
    assert pages > 1 and len(summary_40) == pages + 1
    paths = save_figures(summary_40, tmp_path / "x.png")
    assert [p.name for p in paths] == ["x.png"] + [f"x-page{i}.png" for i in range(1, pages + 1)]
    for p in paths:
        with Image.open(p) as im:
            assert im.size[0] <= 1600 and im.size[1] <= PAGE_MAX_PX, (p.name, im.size)
    index, *rest = summary_40
    listed = "\n".join(t.get_text() for ax in index.axes for t in ax.texts)
    for i in range(1, pages + 1):
        assert f"page {i}: x-page{i}.png" in listed
    tiles = [t.get_text() for t in index.axes[0].texts]
    assert len(tiles) == 25                                     # every block's tile names the page that draws it
    per_page = [[t.split("\n")[0] for t in tiles if t.endswith(f"\np{i}")] for i in range(1, pages + 1)]
    drawn = [[ax.get_title().split("\n")[0] for ax in f.axes if ax.get_title().startswith("blockIdx")]
             for f in rest]
    assert [len(d) for d in drawn] == [len(p) for p in per_page] and sum(map(len, drawn)) == 25
    for listed_blocks, page in zip(per_page, drawn):            # the index and the pages agree
        assert [f"blockIdx.x={b[1:-1].split(',')[0]}, blockIdx.y={b[1:-1].split(',')[1]}"
                for b in listed_blocks] == page
    assert all(f"page {i} of {pages}" in f.get_suptitle() for i, f in enumerate(rest, start=1))
    (pdf,) = save_figures(summary_40, tmp_path / "x.pdf")
    assert f"/Count {pages + 1}".encode() in pdf.read_bytes()   # a PDF: index and pages in the one file
    assert not list(tmp_path.glob("x-page*.pdf"))


@pytest.mark.skipif(GPU, reason="traces run in emulation")
def test_explain_small_summary_stays_one_picture(tmp_path):
    """Up to SUMMARY_ROWS_PER_PAGE blocks: one picture, as before (19x7x21, TILE_WIDTH 8: 3 x 3 blocks split)."""
    from tiledmm.analysis.trace import trace
    assert summary_pages((10, 5, 7), 4) == 1 and summary_pages((19, 7, 21), 8) == 2
    paths = explain_figure(trace("tiled", (10, 5, 7), 4), tmp_path / "s.png")
    assert len(paths) == 1
    with Image.open(paths[0]) as im:
        assert im.size[1] <= PAGE_MAX_PX


def test_the_readme_shows_the_quick_bench_picture_from_a_gpu_run():
    """Every picture the README shows is in the repository and fits a screen's width; the quick suite's
    bench picture among them (docs/bench_quick_h100.png: the bench.png of an H100 run, committed by hand)."""
    import re
    from pathlib import Path
    root = Path(__file__).parent.parent
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", (root / "README.md").read_text())
    assert "docs/bench_quick_h100.png" in images
    for rel in images:
        assert (root / rel).is_file(), f"README shows {rel}, which is not in the repository"
        if rel.endswith(".png"):
            with Image.open(root / rel) as im:
                assert im.size[0] <= 1600 and im.size[1] <= PAGE_MAX_PX, (rel, im.size)
