"""What a student sees in a terminal: import order, tables at 80 and 120 columns, emulation output,
usage errors in one line, words and units a student knows."""
import json
import os
import re
import subprocess
import sys

import pytest

from .conftest import GPU


def fresh_env(**extra) -> dict:
    """This environment less what this process's tiledmm set for itself (a user's shell)."""
    env = dict(os.environ, **extra)
    for var in ("NUMBA_ENABLE_CUDASIM", "TRITON_INTERPRET"):
        env.pop(var, None)
    return env


def python(code: str, **extra) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter, in emulation (on a GPU machine too: TILEDMM_EMULATE)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=fresh_env(TILEDMM_EMULATE="1", **extra))


# -- 1. import order ---------------------------------------------------------------------------------
SQUARE = ("import numpy as np; a = np.ones((4, 4), np.float32); "
          "assert (tiledmm.matmul(a, a) == 4).all(); "
          "assert (tiledmm.matmul(a, a, kernel='tiled') == 4).all(); "
          "assert (tiledmm.matmul(a.astype(np.float64), a.astype(np.float64)) == 4).all(); print('ok')")


@pytest.mark.slow
def test_triton_imported_before_tiledmm_runs_the_default_kernel_in_the_interpreter():
    p = python("import triton; import tiledmm; " + SQUARE)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


def test_numba_imported_before_tiledmm_runs_the_simt_kernels_in_the_simulator():
    p = python("import numba; import tiledmm; " + SQUARE)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr
    assert "Warning" not in p.stderr, p.stderr


@pytest.mark.slow
def test_numba_and_triton_imported_first_both_work():
    p = python("import numba, triton; import tiledmm; " + SQUARE)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


@pytest.mark.slow
def test_numba_cuda_imported_first_warns_at_import_and_refuses_simt_kernels_naming_the_fix():
    """numba.cuda imported in its GPU mode cannot become the simulator: said at import, with the fix;
    the Triton kernels still run, a SIMT kernel is refused with the same words (no traceback of numba)."""
    code = ("import warnings; warnings.simplefilter('always'); import numba.cuda; import tiledmm\n"
            "import numpy as np; a = np.ones((4, 4), np.float32)\n"
            "assert (tiledmm.matmul(a, a) == 4).all()\n"
            "try:\n    tiledmm.matmul(a, a, kernel='tiled')\n"
            "except tiledmm.TiledmmError as e:\n    print('refused:', e)\n")
    p = python(code)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "RuntimeWarning" in p.stderr and "import tiledmm before numba.cuda" in p.stderr, p.stderr
    assert "refused:" in p.stdout and "NUMBA_ENABLE_CUDASIM=1" in p.stdout, p.stdout


# -- 7. the error's name -----------------------------------------------------------------------------
def test_tiledmm_error_is_named_tiledmm_dot_tiledmm_error_in_a_traceback():
    p = python("import numpy as np, tiledmm; tiledmm.matmul(np.ones((2, 3)), np.ones((2, 3)))")
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("tiledmm.TiledmmError: inner dimensions differ"), last
    import pickle

    import tiledmm
    e = pickle.loads(pickle.dumps(tiledmm.TiledmmError("x")))
    assert type(e) is tiledmm.TiledmmError and repr(e) == "TiledmmError('x')"


# -- 2. every table fits the terminal, numbers whole ---------------------------------------------------
def at_width(width: int, monkeypatch, *args) -> tuple[int, str, str]:
    """A command in this process with the terminal ``width`` columns wide (what rich reads from COLUMNS)."""
    from typer.testing import CliRunner

    from tiledmm.cli import _app, app
    monkeypatch.setattr(_app.console, "width", width)
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def fits(out: str, width: int) -> None:
    """No cell cut short ('…') and no line wider than the terminal (but a path printed whole, past the
    edge, for copying: what follows the edge is one word)."""
    from rich.cells import cell_len
    assert "…" not in out, out
    for line in out.splitlines():
        assert cell_len(line) <= width or " " not in line[width:], f"{cell_len(line)} > {width}:\n{line}\n{out}"


WIDTHS = [80, 120]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("args,whole", [
    (["kernels"], ["naive-uncoalesced", "conflict-free", "2, 4, 8, 16, 32"]),
    (["device", "--profile", "g80"], ["16,384", "shared_per_block_optin", "86.4"]),
    (["device", "--profile", "h100"], ["NVIDIA H100 80GB HBM3", "989.4", "52,428,800"]),
    (["occupancy", "--tile", "16", "--profile", "g80"], ["slide_blocks_by_shared", "1,536"]),
    (["model", "--profile", "g80"], ["345.6", "691.2", "0.125"]),
    (["model", "--profile", "h100", "-k", "naive", "-k", "tiled", "-k", "regtile2d"], ["66,900.0", "3350"]),
    (["burst"], ["16,384", "transferred_bytes"]),
    (["trace"], ["subTileM", "rows 0–1 × cols 0–1 (4)", "P[2,2] by (0,0)"]),
    (["run", "-s", "3x3x3", "-k", "naive", "-k", "tiled", "-k", "naive-uncoalesced", "-t", "2"],
     ["naive-uncoalesced", "3x3x3", "2x2"]),
    (["outofcore", "-s", "40x30x50", "--max-device-bytes", "8KiB", "--check-rows", "8"],
     ["40x30x50", "float32 numpy", "8 KiB"]),
])
def test_tables_fit_the_terminal_with_numbers_whole(width, args, whole, monkeypatch):
    if GPU and args[0] in ("run", "outofcore", "trace"):
        pytest.skip("emulation's tables")
    code, out, err = at_width(width, monkeypatch, *args)
    assert code == 0, out + err
    fits(out, width)
    for w in whole:
        assert w in out, (w, out)


@pytest.fixture(scope="module")
def claims_rows():
    """The claims recomputed once for the widths (each takes seconds: seven traces)."""
    from tiledmm.analysis.claims import table
    return table(True)


@pytest.mark.skipif(GPU, reason="traces are recorded in emulation")
@pytest.mark.parametrize("width", WIDTHS)
def test_claims_fit_with_lectures_named(width, monkeypatch, claims_rows):
    from tiledmm.analysis import claims
    monkeypatch.setattr(claims, "table", lambda emulating: claims_rows if emulating else pytest.fail("not emulating"))
    code, out, err = at_width(width, monkeypatch, "claims")
    assert code == 0, err
    fits(out, width)
    assert "lecture" in out and "seed" not in out and "Kirk/Hwu" in out and "004" not in out
    assert "347.6" in out and "345.6" in out and "sectors/request)" in out


@pytest.mark.parametrize("width", WIDTHS)
def test_results_tables_of_a_gpu_run_fit(width, monkeypatch):
    """run's and bench's table with a GPU's columns (ms, TFLOP/s, x cuBLAS, --gpu-time's three), long kernel
    names and shapes: stacked where needed, every number whole."""
    from tiledmm.cli import _app
    from tiledmm.cli import run as R
    monkeypatch.setattr(_app.console, "width", width)

    def row(shape, kernel, tile, prec="fp32"):
        return dict(suite="square", shape=shape, precision=prec, kernel=kernel, tile=tile, ms=12.3456, tflops=45.678,
                    vs_cublas=0.871, rel_err=1.234e-7, ok=True, emulated=False, gpu_ms=11.25, host_us=8.5,
                    gpu_vs_cublas=0.914)
    rows = [row("3000x2000x4000", "naive", 16), row("3000x2000x4000", "naive-uncoalesced", 32),
            row("8192x8192x8192", "conflict-free", 128, "bf16"), row("4x4096x4096x4096", "cublas", None, "tf32")]
    for rs in (rows, rows[:2], [dict(r, gpu_ms=None, host_us=None, gpu_vs_cublas=None) for r in rows]):
        with _app.console.capture() as captured:
            R._results(rs, "tiledmm run — NVIDIA H100 80GB HBM3")
        out = captured.get()
        fits(out, width)
        for w in ("3000x2000x4000", "naive-uncoalesced", "12.3", "45.7", "0.87", "1.23e-07", "16x16"):
            assert w in out, (w, out)
        if rs[0].get("gpu_ms"):
            assert "11.2" in out and "8.50" in out and "0.91" in out


@pytest.mark.parametrize("width", WIDTHS)
def test_the_tuning_store_fits(width, monkeypatch, tmp_path):
    from tiledmm import tuning
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    tuning.forget()
    mode = tuning.mode()
    tuning.set_mode("on")
    try:
        for key, choice in (("triton|float32|float32|ieee|2|2|True|False|True|True|True|(10, 12, 11)|True|True|True",
                             "tma-persistent:BLOCK_K=64-BLOCK_M=128"),
                            ("simt-autotuned|float64|(6, 6, 6)", "t64x64"), ("future|x", "y")):
            assert tuning.choose(key, {choice: lambda: 1.0, "slower": lambda: 2.0}, "slower") == choice
    finally:
        tuning.set_mode(mode)
    try:
        code, out, err = at_width(width, monkeypatch, "tune", "--show")
    finally:
        tuning.forget()
    assert code == 0, err
    fits(out, width)
    for w in ("1024–2047", "4096–8191", "2048–4095", "64–127", "tma-persistent", "t64x64", "future|x"):
        assert w in out, (w, out)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command", [None, "run", "bench", "trace", "occupancy", "outofcore", "dist", "tune"])
def test_help_fits_and_h_is_help(width, command, monkeypatch):
    from typer.testing import CliRunner

    from tiledmm.cli import app
    args = [command] if command else []
    r = CliRunner().invoke(app, args + ["-h"], env={"COLUMNS": str(width)}, terminal_width=width)
    assert r.exit_code == 0 and r.stdout.startswith("Usage: "), r.output
    fits(r.stdout, width)
    assert r.stdout == CliRunner().invoke(app, args + ["--help"], env={"COLUMNS": str(width)},
                                          terminal_width=width).stdout


def test_columns_reaches_the_tables_of_a_fresh_process():
    """COLUMNS, as a shell sets it, is the width (also when stdout is a pipe)."""
    for width in WIDTHS:
        p = subprocess.run([sys.executable, "-m", "tiledmm", "kernels"], capture_output=True, text=True, timeout=300,
                           env=fresh_env(COLUMNS=str(width)))
        assert p.returncode == 0, p.stderr
        fits(p.stdout, width)
        assert max(len(ln) for ln in p.stdout.splitlines()) == width      # the summaries fill the width


# -- 3. emulation output -------------------------------------------------------------------------------
@pytest.mark.skipif(GPU, reason="emulation's output")
def test_run_in_emulation_says_what_emulation_can(monkeypatch):
    code, out, err = at_width(120, monkeypatch, "run", "-s", "3x3x3", "-s", "5x4x3", "-k", "naive", "-k", "tiled")
    assert code == 0, err
    assert "TFLOP/s" not in out and "cuBLAS" not in out                 # nothing emulation cannot say
    assert "sim ms" in out and "simulator" in out and "says nothing about GPU speed" in out
    errs = re.findall(r"\d\.\d\de-\d\d", out)                           # rel err to 3 significant digits
    assert len(errs) == 4, out
    code, js, _ = at_width(120, monkeypatch, "run", "-s", "3x3x3", "-k", "naive", "-k", "tiled", "--json")
    rows = json.loads(js)["results"]
    assert [r["tile"] for r in rows] == [2, 2]


@pytest.mark.skipif(GPU, reason="emulation's bench")
def test_bench_lists_what_it_skipped_and_prints_no_empty_table(monkeypatch, tmp_path):
    from tiledmm import bench as B
    monkeypatch.setitem(B.SUITES, "emulation", [(3, 4, 5), (2, 3, 4, 5)])
    code, out, err = at_width(80, monkeypatch, "bench", "-k", "tiled", "-k", "triton", "-p", "fp32", "-p", "bf16",
                              "--out", str(tmp_path))
    assert code == 0, out + err
    fits(out, 80)
    assert "geometric mean" not in out                                   # no cuBLAS in emulation: no table
    words = " ".join(out.split())                                        # (the lines wrap at 80)
    assert "not run: tiled on 2x3x4x5: a batch, which these kernels do not take" in words, out
    assert "not run: tiled on 3x4x5, 2x3x4x5: the bench runs the SIMT kernels in fp32 only, not in bf16" in words
    assert "suite emulation" in out and "bf16" in out and "fp32" in out


# -- 4. usage errors in one line -----------------------------------------------------------------------
@pytest.mark.parametrize("args,words", [
    (["run", "-p", "fp32"], ["tiledmm run has no option -p", "--dtype"]),
    (["run", "--precision", "fp32"], ["--dtype float32|float64"]),
    (["bench", "--dtype", "float32"], ["--precision"]),
    (["occupancy", "-t", "16"], ["--tile"]),
    (["run", "--dtyp", "float32"], ["--dtype"]),
    (["nosuchcmd"], ["no command 'nosuchcmd'", "run, bench"]),
    (["bnech"], ["did you mean 'bench'"]),
    (["trcae"], ["did you mean 'trace'"]),
    (["outofcore"], ["missing option", "--shape"]),
    (["run", "--tile", "abc"], ["--tile"]),
    (["run", "extra"], ["extra"]),
])
def test_usage_errors_are_one_line_naming_what_was_meant(args, words):
    from typer.testing import CliRunner

    from tiledmm.cli import app
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Usage:" not in r.stderr and "Traceback" not in r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)


def test_usage_error_in_a_fresh_process():
    p = subprocess.run([sys.executable, "-m", "tiledmm", "run", "-p", "fp32"], capture_output=True, text=True,
                       timeout=300, env=fresh_env())
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == ["error: tiledmm run has no option -p (did you mean --dtype float32|float64?); "
                                     "`tiledmm run -h` lists its options"], p.stderr


# -- 5. words a student knows --------------------------------------------------------------------------
def test_device_profiles_name_their_lecture():
    from tiledmm.analysis.device import PROFILES
    for p in PROFILES.values():
        assert "seed" not in p.source, p.source
    assert "Kirk/Hwu" in PROFILES["g80"].source


def test_occupancy_explains_the_registers_it_leaves_out(monkeypatch):
    code, out, _ = at_width(80, monkeypatch, "occupancy", "--tile", "16", "--profile", "g80")
    assert code == 0 and "not counted" in out and "--regs" in out
    assert re.search(r"regs_per_thread\s+│ 0 ", out) is None
    code, out, _ = at_width(80, monkeypatch, "occupancy", "--tile", "16", "--profile", "g80", "--regs", "40")
    assert code == 0 and re.search(r"regs_per_thread\s+│ 40 ", out) and "blocks_by_regs" in out


def test_outofcore_plan_uses_units_that_fit_the_size():
    import torch

    from tiledmm.outofcore import plan_out_of_core
    small = plan_out_of_core(64, 80, 48, torch.float32, max_device_bytes=12 << 10).describe()
    assert "0.00" not in small and "KiB" in small and " GB" not in small, small
    big = plan_out_of_core(32768, 32768, 32768, torch.bfloat16, acc_dtype=torch.float32,
                           max_device_bytes=4 << 30).describe()
    assert "GiB" in big and " GB" not in big, big


@pytest.mark.skipif(GPU, reason="the emulation's rank limit")
def test_dist_says_how_many_ranks_it_starts():
    from typer.testing import CliRunner

    from tiledmm.cli import app
    r = CliRunner().invoke(app, ["dist", "--nproc", "64"])
    assert r.exit_code == 2
    assert "at most" in r.stderr and "ranks (one per CPU core" in r.stderr and "one a core" not in r.stderr


# -- 6. a block over CUDA's thread limit -----------------------------------------------------------------
@pytest.mark.parametrize("profile", [[], ["--profile", "g80"], ["--profile", "h100"]])
def test_occupancy_refuses_a_tile_over_1024_threads(profile):
    from typer.testing import CliRunner

    from tiledmm.cli import app
    for args in (["--tile", "33"], ["--threads", "1089"]):
        r = CliRunner().invoke(app, ["occupancy", *args, *profile])
        assert r.exit_code == 2 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.output
        assert "1,024 threads per block" in r.stderr and "1,089" in r.stderr, r.stderr


# -- 7. small things -----------------------------------------------------------------------------------
def test_help_lists_commands_in_teaching_order_with_whole_summaries():
    from typer.testing import CliRunner

    from tiledmm.cli import app
    from tiledmm.cli._app import SUMMARY
    out = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"}, terminal_width=80).stdout
    listed = [ln.split()[0] for ln in out.split("Commands:")[1].splitlines() if ln.strip()]
    assert listed[:2] == ["run", "bench"] and listed == list(SUMMARY), listed
    assert "..." not in out.split("Commands:")[1]
    for name, summary in SUMMARY.items():
        assert summary in " ".join(out.split()), summary


def test_enable_summary_prints_a_table():
    import torch

    import tiledmm
    x = torch.randn(4, 6)
    layer = torch.nn.Linear(6, 3)
    with tiledmm.enable() as routed:
        layer(x)
        torch.ones(2, 2, dtype=torch.int64) @ torch.ones(2, 2, dtype=torch.int64)
    s = routed.summary()
    assert s["calls"]["linear"] == {"tiledmm": 1, "torch": 0}                # still the dict it was
    text = str(s)
    assert text.splitlines()[0].startswith("tiledmm.enable") and "{" not in text
    assert re.search(r"linear\s+1\s+0", text) and "to torch: matmul: dtype torch.int64 (1 call)" in text


def test_readme_lists_every_rung():
    from pathlib import Path

    from tiledmm import registry
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    ladder = readme.split("then an optimisation ladder")[1].split("* `kernels/block/`")[0]
    for s in registry.all_specs():
        if s.family == "simt" and s.name not in ("naive", "tiled"):
            assert f"`{s.name}`" in ladder, s.name


@pytest.mark.slow
@pytest.mark.skipif(GPU, reason="explain records its trace in emulation (on a GPU it reruns itself)")
def test_explain_leaves_no_blank_lines_on_stderr(tmp_path):
    p = subprocess.run([sys.executable, "-m", "tiledmm", "explain", "--out", str(tmp_path / "e.svg")],
                       capture_output=True, text=True, timeout=300, env=fresh_env(TILEDMM_QUIET="0"))
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == [ln for ln in p.stderr.splitlines() if ln.strip()], repr(p.stderr)
    assert p.stderr.count("\n") <= 1 and p.stdout.startswith("wrote ")


@pytest.mark.skipif(GPU, reason="the README shows the output without a GPU")
def test_readme_shows_run_as_it_prints_at_80_columns(monkeypatch):
    """The README's `tiledmm run` output is what the command prints now (the simulator's times masked)."""
    from pathlib import Path
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    shown = readme.split("Without a GPU, `tiledmm run` prints")[1].split("```text\n")[1].split("```")[0]
    banner, *shown = shown.splitlines()
    assert banner.startswith("tiledmm: no CUDA GPU found; kernels run in emulation")
    code, out, _ = at_width(80, monkeypatch, "run")
    assert code == 0

    def masked(lines):          # the sim ms cells (the 6th column): digits vary from run to run
        return [ln.rstrip() if not ln.startswith("│") else
                "│".join(re.sub(r"[\d,.]+", "#", c).strip() if i == 5 else c for i, c in enumerate(ln.split("│")))
                for ln in lines]
    assert masked(out.splitlines()) == masked(shown)


# -- on a GPU ------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_run_table_fits_80_columns_with_rates():
    p = subprocess.run([sys.executable, "-m", "tiledmm", "run", "-s", "1000x700x900", "-k", "naive", "-k", "tiled",
                        "-k", "naive-uncoalesced", "-t", "16", "-t", "32"], capture_output=True, text=True,
                       timeout=600, env=fresh_env(COLUMNS="80"))
    assert p.returncode == 0, p.stdout + p.stderr
    fits(p.stdout, 80)
    assert "TFLOP/s" in p.stdout and "cuBLAS" in p.stdout and "sim ms" not in p.stdout
    assert "naive-uncoalesced" in p.stdout and "1000x700x900" in p.stdout and "32x32" in p.stdout


@pytest.mark.gpu
def test_gpu_occupancy_takes_the_registers_from_the_compiled_kernel(monkeypatch):
    code, out, err = at_width(80, monkeypatch, "occupancy", "--tile", "16")
    assert code == 0, err
    m = re.search(r"regs_per_thread\s+│ (\d+) \(from the compiled kernel\)", out)
    assert m and int(m.group(1)) > 0, out
    assert "blocks_by_regs" in out and not re.search(r"blocks_by_regs\s+│ –", out)
