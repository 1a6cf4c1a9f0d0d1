"""The command line, as a user runs it: results, messages for every bad input, the help text."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tiledmm import bench as B
from tiledmm.cli import app

from .conftest import GPU

ROOT = Path(__file__).parent.parent


def tiledmm(*args, timeout=300):
    """A fresh process, as a user's shell runs it (banner on)."""
    env = dict(os.environ, TILEDMM_QUIET="0", COLUMNS="200")
    for var in ("NUMBA_ENABLE_CUDASIM", "TRITON_INTERPRET"):    # what this process's tiledmm set for itself
        env.pop(var, None)
    return subprocess.run([sys.executable, "-m", "tiledmm", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def cli(*args):
    """In this process (fast): exit code, stdout, stderr."""
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.skipif(GPU, reason="the emulation default of `tiledmm run`")
def test_run_defaults_in_emulation():
    """Four products, in this process (the banner of `tiledmm run` in a fresh one, once and saying why:
    the README's test, which runs it as a new user does)."""
    code, out, err = cli("run", "--json")
    assert code == 0, err
    doc = json.loads(out)
    rows = doc["results"]
    assert {(r["shape"], r["kernel"], r["tile"]) for r in rows} == {
        ("3x3x3", "naive", 2), ("3x3x3", "tiled", 2), ("19x7x21", "naive", 8), ("19x7x21", "tiled", 8)}
    assert all(r["ok"] and r["rel_err"] < 1e-5 and r["emulated"] for r in rows)
    assert doc["environment"]["mode"] == "emulation"


def test_commands_that_run_no_kernel_print_no_banner():
    p = tiledmm("model", "--profile", "g80")
    assert p.returncode == 0 and "emulation" not in p.stderr, p.stderr


def test_run_table_shows_the_tile_as_json_does_and_the_block():
    code, out, err = cli("run", "--shape", "5x6x7", "-k", "naive", "-k", "tiled", "--tile", "4", "--dtype", "float64")
    assert code == 0, out + err
    assert "fp64" in out.split("┏")[0]                     # the precision all rows share: in the title
    rows = [ln for ln in out.splitlines() if "5x6x7" in ln]
    naive = next(ln for ln in rows if " naive " in ln)
    tiled = next(ln for ln in rows if " tiled " in ln)
    assert "ok" in tiled and "ok" in naive
    # the tile column is the --tile value, as --json says (naive's: its block's width); the block beside it
    assert re.search(r"│\s+4\s+│\s+4x4\s+│", naive) and re.search(r"│\s+4\s+│\s+4x4\s+│", tiled)
    code, out, _ = cli("run", "--shape", "5x6x7", "-k", "naive", "--tile", "4", "--json")
    assert [r["tile"] for r in json.loads(out)["results"]] == [4]


def test_version_and_help():
    code, out, _ = cli("--version")
    assert code == 0 and re.fullmatch(r"tiledmm \d+\.\d+\.\d+\S*\n", out)
    code, out, _ = cli("bench", "--help")
    for s in B.SUITES:
        assert s in out
    cmd = typer.main.get_command(app)
    for name, c in cmd.commands.items():
        for p in c.params:
            if p.name != "help":
                assert p.help, f"tiledmm {name} {p.opts}: no help text"


@pytest.mark.parametrize("command", [None, "run", "bench", "dist", "tune", "outofcore", "trace", "occupancy"])
def test_help_has_no_type_tags_and_breaks_no_word(command):
    """--help at 80 columns: no '<bool>'/'<list[...]>' tags, and every word of every option's help is
    whole somewhere in it (a word wrapped mid-word is not)."""
    args = ([command] if command else []) + ["--help"]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "80"}, terminal_width=80)
    assert r.exit_code == 0, r.output
    assert "<bool>" not in r.output and "<list[" not in r.output and "<int>" not in r.output, r.output
    tokens = set(r.output.split())
    cmd = typer.main.get_command(app)
    target = cmd.commands[command] if command else cmd
    for p in target.params:
        if getattr(p, "hidden", False):
            continue
        for word in (p.help or "").split():
            assert word in tokens, f"tiledmm {command} --help: {word!r} broken or missing:\n{r.output}"
        if getattr(p, "metavar", None):
            assert p.metavar in tokens, (p.metavar, r.output)


def test_rich_markup_is_not_eaten():
    code, out, _ = cli("burst", "--index", "i", "--index", "[red]x")
    assert code == 2
    code, out, _ = cli("burst", "--index", "i")
    assert code == 0 and "A[i]" in out


def test_unknown_device_properties_show_a_dash():
    code, out, _ = cli("device", "--profile", "example150")
    assert code == 0
    assert re.search(r"│ sms\s+│ –", out) and re.search(r"│ dram_gbs\s+│ 150", out)


def _bench_json(tmp_path, emulated):
    p = tmp_path / f"bench{int(emulated)}.json"
    p.write_text(json.dumps({"environment": {"mode": "emulation" if emulated else "gpu"}, "rows": [
        {"precision": "fp32", "kernel": "tiled", "tile": 16, "tflops": 7.5, "emulated": emulated}]}))
    return str(p)


# every bad input: (args, a fragment of the one-line message); CPU-only cases marked
BAD = [
    (["burst", "--index", "i+"], "index expression", False),
    (["burst", "--index", "2**99999"], "index expression", False),
    (["burst", "--burst", "0"], "--burst must be > 0", False),
    (["burst", "--threads", "-3"], "--threads must be > 0", False),
    (["roofline", "--profile", "h100", "--bench", "missing.json"], "no such file", False),
    (["roofline", "--profile", "h100", "--bench", "README.md"], "not a bench.json", False),
    (["roofline", "--profile", "h100", "--bench", "EMULATED"], "emulation", False),
    (["roofline", "--profile", "h100", "--out", "r.txt"], ".png", False),
    (["roofline", "--out", "r.png"], "--profile", True),
    (["explain", "--out", "/nonexistent/x.svg"], "does not exist", False),
    (["explain", "--out", "x.txt"], ".svg", False),
    (["explain", "-s", "64x64x64", "-t", "8"], "at most 36 blocks", False),
    (["explain", "-s", "2x3x3x3"], "not a batch", False),
    (["explain", "-t", "3"], "supports tile", False),
    (["trace", "-s", "100x100x100"], "64^3", False),
    (["trace", "-k", "triton"], "SIMT", False),
    (["trace", "-k", "nope"], "unknown kernel", False),
    (["trace", "-t", "3"], "supports tile", False),
    (["run", "-s", "4x4x4", "-k", "tiled", "-t", "3"], "supports tile in [2, 4, 8, 16, 32], got tile=3", False),
    (["run", "-s", "5x6"], "JxKxL", False),
    (["run", "-s", "0x3x3"], "positive", False),
    (["run", "-s", "5x6x7", "-k", "nope"], "unknown kernel 'nope'", False),
    (["run", "--dtype", "float16"], "float32 or float64", False),
    (["run", "-s", "2x3x3x3", "-k", "tiled"], "takes no batch", False),
    (["run", "-s", "100x100x100"], "emulation limit", True),
    (["run", "-k", "cublas"], "needs a GPU", True),
    (["run", "--repeats", "0"], "--repeats must be > 0", False),
    (["bench", "--suite", "nope"], "unknown suite", False),
    (["bench", "-p", "fp8"], "unknown precision", False),
    (["bench", "-k", "tiled", "-t", "3"], "supports tile", False),
    (["bench", "--suite", "quick"], "nothing to run", True),
    (["bench", "--out", "README.md"], "not a folder", False),
    (["device", "--profile", "nope"], "unknown device profile", False),
    (["device"], "--profile", True),
    (["occupancy"], "give --tile", False),
    (["occupancy", "--tile", "0", "--profile", "g80"], "--tile must be > 0", False),
    (["occupancy", "--kernel", "tiled", "--profile", "g80"], "needs a GPU", True),
    (["occupancy", "--kernel", "triton", "--profile", "g80"], "not a SIMT kernel", False),
    (["model", "-k", "tiled", "-t", "3", "--profile", "g80"], "supports tile", False),
    (["model", "--profile", "g80", "--bandwidth", "-1"], "--bandwidth must be > 0", False),
    (["claims", "--markdown", "/nonexistent/x.md"], "does not exist", False),
    (["run", "--tile", "x"], "", False),   # a click usage error: its own message, exit 2
    (["tune"], "give the shapes", False),
    (["tune", "1024x1024"], "JxKxL", False),
    (["tune", "0x8x8"], "positive", False),
    (["tune", "64x64x64", "--dtype", "float8"], "--dtype 'float8'", False),
    (["tune", "64x64x64", "--dtype", "bfloat16", "--precision", "tf32"], "float32 only", False),
    (["tune", "64x64x64", "--dtype", "float32", "--dtype", "float16", "--precision", "ieee"], "float32 only", False),
    (["tune", "64x64x64", "--precision", "fp8"], "choose ieee or tf32", False),
    (["tune", "64x64x64", "--batch", "0"], "--batch must be > 0", False),
    (["tune", "2x64x64x64", "--batch", "3"], "give one of them", False),
    (["tune", "64x64x64", "--layout", "nx"], "--layout 'nx'", False),
    (["tune", "64x64x64", "-k", "nope"], "unknown kernel 'nope'", False),
    (["tune", "64x64x64", "-k", "tiled", "--dtype", "bfloat16"], "supports dtypes", False),
    (["tune", "64x64x64", "-k", "tiled", "--precision", "tf32"], "no precision option", False),
    (["tune", "--show", "--forget"], "not both", False),
    (["tune", "--show", "64x64x64"], "takes no shapes", False),
    (["tune", "64x64x64"], "nothing to tune without a GPU", True),
    (["tune", "64x64x64", "--dtype", "float64"], "nothing to tune without a GPU", True),
    (["outofcore", "-s", "64x48"], "JxKxL", False),
    (["outofcore", "-s", "2x64x48x80"], "not a batch", False),
    (["outofcore", "-s", "64x48x80", "--dtype", "float64"], "choose float32, float16 or bfloat16", False),
    (["outofcore", "-s", "64x48x80", "--max-device-bytes", "16GB?"], "write a byte count", False),
    (["outofcore", "-s", "64x48x80", "--max-device-bytes", "12 parsecs"], "write a byte count", False),
    (["outofcore", "-s", "64x48x80", "--max-device-bytes", "0"], "at least 1 byte", False),
    (["outofcore", "-s", "64x48x80", "--max-device-bytes", "12"], "cannot hold even 1x1 blocks", False),
    (["outofcore", "-s", "1000000x1000000x1000000"], "of host memory", False),
    (["outofcore", "-s", "64x48x80", "-k", "nope"], "unknown kernel 'nope'", False),
    (["outofcore", "-s", "64x48x80", "-k", "tiled", "--dtype", "bfloat16"], "supports dtypes", False),
    (["outofcore", "-s", "64x48x80", "--check-rows", "-1"], "--check-rows must be >= 0", False),
    (["outofcore", "-s", "64x48x80", "--check-cols", "0"], "--check-cols must be > 0", False),
    (["outofcore", "-s", "500x500x500"], "emulation limit", True),
    (["outofcore", "-s", "64x48x80", "--pinned"], "needs a GPU", True),
    (["outofcore", "-s", "64x48x80", "-k", "cublas"], "needs a GPU", True),
    (["dist", "-s", "0x0x0"], "positive integers", False),
    (["dist", "-s", "64x48"], "JxKxL", False),
    (["dist", "-s", "500x500x500"], "over the emulation limit", True),
    (["dist", "--panel", "-1"], "--panel must be > 0", False),
    (["dist", "--chunks", "0"], "--chunks must be > 0", False),
    (["dist", "--nproc", "0"], "--nproc must be > 0", False),
    (["dist", "--backend", "bogus"], "--backend 'bogus': choose nccl or gloo", False),
    (["dist", "--backend", "nccl"], "needs GPUs", True),
    (["dist", "--nproc", "64"], "--nproc 64: without a GPU", True),
    (["dist", "--algo", "cannon"], "--algo 'cannon'", False),
    (["dist", "--dtype", "int8"], "--dtype 'int8'", False),
    (["dist", "--gemm", "nope"], "--gemm 'nope'", False),
    (["dist", "--gemm", "tiled", "--dtype", "bfloat16"], "supports dtypes", False),
]


@pytest.mark.parametrize("args,msg,cpu_only", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_bad_input_is_one_message_and_an_error_exit(args, msg, cpu_only, tmp_path, monkeypatch):
    if cpu_only and GPU:
        pytest.skip("a CPU machine's refusal")
    args = [_bench_json(tmp_path, True) if a == "EMULATED" else a for a in args]
    monkeypatch.chdir(ROOT)
    code, out, err = cli(*args)
    assert code == 2, (code, out, err)
    assert "Traceback" not in out + err
    assert msg in err, err
    if msg:
        assert err.startswith("error: ") and err.count("\n") == 1, err


def test_roofline_places_measured_points(tmp_path):
    out = tmp_path / "r.png"
    code, o, e = cli("roofline", "--profile", "h100", "--bench", _bench_json(tmp_path, False), "--out", str(out))
    assert code == 0, o + e
    assert out.stat().st_size > 10000


@pytest.mark.slow
@pytest.mark.skipif(GPU, reason="the emulated bench; the GPU bench is benchmarks/gpu.sh suites")
def test_bench_in_emulation_writes_table_csv_json_png(tmp_path):
    code, out, err = cli("bench", "-k", "triton", "-k", "tiled", "-p", "fp32", "-p", "bf16", "--out", str(tmp_path))
    assert code == 0, out + err
    doc = json.loads((tmp_path / "bench.json").read_text())
    kernels = {(r["kernel"], r["precision"]) for r in doc["rows"]}
    assert kernels == {("triton", "fp32"), ("triton", "bf16"), ("tiled", "fp32")}  # SIMT: fp32 only, 2-D only
    assert all(r["ok"] and r["emulated"] for r in doc["rows"])
    assert (tmp_path / "bench.csv").read_text().startswith("suite,shape,precision,dtype,kernel")
    assert (tmp_path / "bench.png").stat().st_size > 10000
    assert not (tmp_path / B.PARTIAL).exists()          # the run's partial CSV is gone once it completed


@pytest.mark.skipif(GPU, reason="the emulated bench")
def test_a_bench_stopped_midway_keeps_its_whole_shapes(tmp_path, monkeypatch):
    """Rows are written shape by shape as the bench goes (bench.partial.csv): a run cut short by a
    time limit or Ctrl-C keeps every shape it finished, each with all its kernels."""
    from tiledmm.cli import run as cli_run
    points = B.plan(["emulation"], ["fp32"], ["triton", "tiled"], None)
    shapes = list(dict.fromkeys(p.shape for p in points))
    real = B.run

    def stop_after_first_shape(*a, on_rows=None, **k):
        def rows_then_stop(rows):
            on_rows(rows)
            raise KeyboardInterrupt
        return real(*a, on_rows=rows_then_stop, **k)
    monkeypatch.setattr(B, "run", stop_after_first_shape)
    with pytest.raises(KeyboardInterrupt):
        cli_run._run_points(points, repeats=1, warmup=0, seed=0, outdir=tmp_path / "out")
    lines = (tmp_path / "out" / B.PARTIAL).read_text().splitlines()
    first = [p for p in points if p.shape == shapes[0]]
    assert lines[0].startswith("suite,shape,precision") and len(lines) == 1 + len(first)
    assert {ln.split(",")[4] for ln in lines[1:]} == {p.kernel for p in first}
    assert all(ln.split(",")[1] == B.fmt_shape(shapes[0]) for ln in lines[1:])


@pytest.mark.skipif(GPU, reason="the emulated bench")
def test_bench_gpu_time_needs_a_gpu(tmp_path):
    code, out, err = cli("bench", "--gpu-time", "-k", "triton", "-p", "fp32", "--out", str(tmp_path))
    assert code != 0 and "Traceback" not in out + err
    assert (out + err).strip().splitlines()[-1].startswith("error: --gpu-time needs a GPU")


def test_bench_summary_takes_the_gpu_ratio_where_rows_have_it():
    row = dict(suite="s", precision="bf16", kernel="triton")
    rows = [dict(row, vs_cublas=0.5, gpu_vs_cublas=1.0), dict(row, vs_cublas=2.0, gpu_vs_cublas=4.0),
            dict(row, kernel="cublas", vs_cublas=None, gpu_vs_cublas=None), dict(row, precision="fp16", vs_cublas=1.0)]
    got = {s["precision"]: s for s in B.summary(rows)}
    assert got["bf16"]["geomean_vs_cublas"] == pytest.approx(1.0) and got["bf16"]["n"] == 2
    assert got["bf16"]["geomean_gpu_vs_cublas"] == pytest.approx(2.0)
    assert got["fp16"]["geomean_gpu_vs_cublas"] is None          # rows without --gpu-time


@pytest.mark.gpu
def test_gpu_bench_gpu_time_takes_the_gpu_and_host_apart():
    points = B.plan(["quick"], ["bf16"], ["triton"])
    rows = B.run(points, repeats=3, warmup=1, gpu_time=True)
    base, ours = (next(r for r in rows if (r["kernel"] == "cublas") == c) for c in (True, False))
    for r in (base, ours):
        assert r["ok"] and r["gpu_ms"] > 0 and r["host_us"] > 0
        assert 0.5 < r["gpu_ms"] / r["ms"] < 2                   # 4096^3: the GPU's time is the queued time
    assert ours["gpu_vs_cublas"] == pytest.approx(base["gpu_ms"] / ours["gpu_ms"])
    assert B.summary(rows)[0]["geomean_gpu_vs_cublas"] == pytest.approx(ours["gpu_vs_cublas"])


def test_transformer_suite_is_m_k_n():
    shapes = B.SUITES["transformer"]
    assert len(shapes) == 12 and {m for m, _, _ in shapes} == {1, 32, 256, 4096}
    # (N, K) = (13824, 5120): B is K x N = 5120 x 13824; (5120, 13824): K = 13824
    assert (32, 5120, 13824) in shapes and (32, 13824, 5120) in shapes and (1, 5120, 5120) in shapes


def test_bench_plan_and_refusals():
    assert B.why_not(B.Point("x", (3, 3, 3), "fp32", "tiled", 3)).endswith("got tile=3")
    assert "dtypes" in B.why_not(B.Point("x", (3, 3, 3), "bf16", "tiled"))
    assert "no tf32 mode" in B.why_not(B.Point("x", (3, 3, 3), "tf32", "tiled"))
    pts = B.plan(["emulation"], ["fp32", "tf32"], ["tiled", "triton"], [4, 8])
    assert {(p.kernel, p.tile, p.precision) for p in pts if p.shape == (40, 24, 33)} == {
        ("tiled", 4, "fp32"), ("tiled", 8, "fp32"), ("triton", None, "fp32"), ("triton", None, "tf32")}
    assert all(p.kernel == "triton" for p in pts if len(p.shape) == 4)
    if not GPU:
        assert B.plan(["quick"], ["fp32"], ["tiled", "triton"]) == []


# -- tiledmm tune ---------------------------------------------------------------------------------
@pytest.fixture
def store(tmp_path, monkeypatch):
    """tiledmm.tuning on an empty store in tmp_path."""
    from tiledmm import tuning
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    tuning.forget()
    yield tuning
    tuning.forget()


def _remember(tuning, key: str, choice: str) -> None:
    """A choice written the way every tuner writes one: tuning.choose with tuning on."""
    mode = tuning.mode()
    tuning.set_mode("on")
    try:
        assert tuning.choose(key, {choice: lambda: 1.0, "slower": lambda: 2.0}, "slower") == choice
    finally:
        tuning.set_mode(mode)


def _triton_key(a, b, c, precision="ieee", alpha=1.0, beta=0.0) -> str:
    """The store key the Triton family writes for these operands (its own plan_key, its own format)."""
    from tiledmm import tuning
    from tiledmm.kernels.block.dispatch import plan_key
    return tuning.key_of("triton", *(str(k) for k in plan_key(a, b, c, precision, alpha, beta)[:-1]))   # no device


def test_tune_show_and_forget_the_store_in_words(store, monkeypatch):
    import torch

    from tiledmm.cli import _app
    monkeypatch.setattr(_app.console, "width", 200)     # wide enough for the table unstacked (xdist's COLUMNS is 80)
    path = store.store_path()
    code, out, _ = cli("tune", "--show")
    words = " ".join(out.split())          # (a long store path wraps its line at the terminal's width)
    assert code == 0 and "no tuned choices" in words and "does not exist" in words
    a, b = torch.empty(1500, 3000), torch.empty(5000, 3000).t()        # a row-major, b transposed
    nt = _triton_key(a, b, torch.empty(1500, 5000))
    bf = _triton_key(torch.empty(4, 64, 64, dtype=torch.bfloat16), torch.empty(64, 64, dtype=torch.bfloat16),
                     torch.empty(4, 64, 64, dtype=torch.bfloat16), alpha=2.0, beta=1.0)
    _remember(store, nt, "tma-persistent:BLOCK_K=64-BLOCK_M=128")
    _remember(store, bf, "blocked:BLOCK_M=64")
    _remember(store, "simt-autotuned|float64|(6, 6, 6)", "t64x64")
    _remember(store, "future|x", "y")
    assert path.exists()
    code, out, err = cli("tune", "--show")
    assert code == 0, err
    assert "4 choices" in out and f"store: {path}" in "".join(out.split("\n")) and "|" + "torch" not in out
    rows = {ln.split("│")[1].strip() + ln.split("│")[2].strip(): [c.strip() for c in ln.strip("│").split("│")]
            for ln in out.splitlines() if ln.startswith("│")}
    tri = next(r for r in rows.values() if r[1] == "float32")
    assert tri[:8] == ["triton", "float32", "ieee", "nt", "1024–2047", "4096–8191", "2048–4095", "C = A@B"], tri
    assert tri[8].startswith("tma-persistent") and "BLOCK_K=64," in out and "BLOCK_M=128)" in out
    bfr = next(r for r in rows.values() if r[1] == "bfloat16")
    assert bfr[3:7] == ["nn", "64–127", "64–127", "64–127"] and bfr[7].startswith("C = αA@B + βC"), bfr
    assert "batched" in out
    simt = next(r for r in rows.values() if r[0] == "autotuned")
    assert simt[1] == "float64" and simt[4:7] == ["64–127"] * 3 and simt[-1] == "t64x64"
    assert "future|x" in out              # a key of no known format: shown as stored
    code, out, err = cli("tune", "--forget")
    assert code == 0, err
    assert "forgetting 4 tuned choices" in out and "autotuned" in out and f"removed {path}" in out
    assert not path.exists() and store.lookup(nt) is None
    code, out, _ = cli("tune", "--forget")
    assert code == 0 and "nothing to forget" in out
    path.write_text("not json")                      # a damaged store: --show says so, --forget removes it
    code, _, err = cli("tune", "--show")
    assert code == 2 and "not a tuning store" in err and err.count("\n") == 1
    code, out, _ = cli("tune", "--forget")
    assert code == 0 and not path.exists()


@pytest.mark.skipif(GPU, reason="the CPU's refusal")
def test_tune_without_a_gpu_is_one_line_in_a_fresh_process(store):
    p = tiledmm("tune", "1024x1024x1024")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines()[-1].startswith("error: nothing to tune without a GPU")
    assert tiledmm("tune", "--show").returncode == 0


@pytest.mark.gpu
def test_gpu_tune_tunes_remembers_and_shows(store, monkeypatch):
    monkeypatch.setenv("TILEDMM_TUNE", "off")        # the command turns tuning on for itself
    monkeypatch.delenv("TILEDMM_EMULATE", raising=False)
    p = tiledmm("tune", "512x512x512", timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "tuned now" in p.stdout and "store:" in p.stdout
    doc = json.loads(store.store_path().read_text())
    assert [k for k in doc if k.startswith("triton|")], doc
    again = tiledmm("tune", "600x512x512", "1000x512x512")     # the same class (log2 buckets), a new process
    assert again.returncode == 0, again.stdout + again.stderr
    assert "remembered" in again.stdout and "tuned now" not in again.stdout
    show = tiledmm("tune", "--show")
    assert show.returncode == 0 and f"{len(doc)} choice" in show.stdout and "512–1023" in show.stdout


# -- tiledmm outofcore -----------------------------------------------------------------------------
def _ooc_row(out: str) -> list[str]:
    """outofcore's result list (a line a quantity) as the values in order: shape, dtype, budget, GEMMs,
    s (sim s in emulation), tuning s, [TFLOP/s on a GPU,] rel err, check, busy."""
    return [ln.strip("│").split("│")[1].strip() for ln in out.splitlines() if ln.startswith("│")]


@pytest.mark.skipif(GPU, reason="emulation: the CPU stands in for the GPU")
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_outofcore_in_emulation_several_blocks_progress_to_the_end(dtype):
    code, out, err = cli("outofcore", "-s", "64x48x80", "--dtype", dtype, "--max-device-bytes", "12KiB")
    assert code == 0, out + err
    assert out.startswith("plan: ") and "GEMMs" in out.splitlines()[0]
    shape, dt, budget, gemms, secs, tuning_s, rel, check, busy = _ooc_row(out)      # (no rate in emulation)
    assert (shape, dt, budget) == ("64x48x80", f"{dtype} {'torch' if dtype == 'bfloat16' else 'numpy'}", "12 KiB")
    done, total = map(int, gemms.split("/"))
    assert done == total > 4                          # the progress callback reached the total
    assert check == "ok" and float(rel) < 1e-2 and tuning_s == "0" and len(busy.split(" / ")) == 3


@pytest.mark.skipif(GPU, reason="emulation's default budget")
def test_outofcore_default_budget_in_emulation_forces_blocks():
    code, out, err = cli("outofcore", "-s", "40x30x50", "--check-rows", "0", "--seed", "3")
    assert code == 0, out + err
    row = _ooc_row(out)
    assert int(row[3].split("/")[1]) > 1 and row[6] == "–" and row[7] == "skipped"


def _check_mem_available(monkeypatch):
    """mem_available reads MemAvailable from /proc/meminfo (kB -> bytes), None where the line or the file
    is missing; on Linux it agrees with the file as read here."""
    import io
    from tiledmm.cli import _app
    meminfo = "MemTotal:       16384 kB\nMemFree:         1024 kB\nMemAvailable:    8192 kB\n"
    monkeypatch.setattr(_app, "open", lambda path, *a, **k: io.StringIO(meminfo), raising=False)
    assert _app.mem_available() == 8192 * 1024
    monkeypatch.setattr(_app, "open", lambda path, *a, **k: io.StringIO("MemTotal: 16384 kB\n"), raising=False)
    assert _app.mem_available() is None

    def missing(path, *a, **k):
        raise FileNotFoundError(path)
    monkeypatch.setattr(_app, "open", missing, raising=False)
    assert _app.mem_available() is None
    monkeypatch.delattr(_app, "open")
    if os.path.exists("/proc/meminfo"):
        with open("/proc/meminfo") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
        assert abs(_app.mem_available() - kb * 1024) < (256 << 20)     # the same field, moments apart


def test_byte_sizes_and_host_helpers(monkeypatch):
    import numpy as np
    import torch
    from tiledmm import cli as C
    assert [C.parse_bytes("x", t) for t in ("123", "512MiB", "16GiB", "16gib", "1.5 KiB", "2GB")] == \
        [123, 512 << 20, 16 << 30, 16 << 30, 1536, 2 * 10 ** 9]
    assert C.human_bytes(16 << 30) == "16 GiB" and C.human_bytes(100) == "100 B"
    _check_mem_available(monkeypatch)
    from tiledmm.outofcore import runs as O
    monkeypatch.setattr(O, "FILL_CHUNK", 256)          # many chunks: the values do not depend on the thread pool
    x, y = torch.empty(50, 7), torch.from_numpy(np.empty((50, 7), np.float32))
    O.fill_random(x, 5)
    O.fill_random(y, 5)
    assert len(O.row_chunks(x)) == 6 and torch.equal(x, y) and x.std() > 0.5
    O.fill_random(y, 5, nan=True)
    assert torch.isnan(y).all()
    idx = O.sample_index(100, 30, 16, np.random.default_rng(0))
    assert {0, 29, 30, 59, 60, 89, 90, 99} <= set(idx.tolist()) and len(idx) <= 16


def test_check_sampled_finds_wrong_and_unwritten_results():
    import torch
    from tiledmm.outofcore import check_sampled, plan_out_of_core
    a, b = torch.randn(30, 20), torch.randn(20, 25)
    plan = plan_out_of_core(30, 25, 20, torch.float32, max_device_bytes=2000)
    c = a @ b
    rel, rows, cols = check_sampled(a, b, c, plan, 8, 10)
    assert rel < 1e-6 and rows <= 8 and cols <= 10
    c[:, :] = 0
    assert check_sampled(a, b, c, plan, 8, 10)[0] > 0.5
    c[:] = float("nan")
    assert check_sampled(a, b, c, plan, 8, 10)[0] == float("inf")
    as_dict = {"bm": plan.bm, "bn": plan.bn, "transposed": plan.transposed}     # stats["plan"] of a run
    assert check_sampled(a, b, a @ b, as_dict, 8, 10)[0] < 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,pinned", [("float32", False), ("bfloat16", True)])
def test_gpu_outofcore_forced_budget(dtype, pinned):
    code, out, err = cli("outofcore", "-s", "3000x2000x2500", "--dtype", dtype, "--max-device-bytes", "8MiB",
                         *(["--pinned"] if pinned else []))
    assert code == 0, out + err
    row = _ooc_row(out)
    assert row[1] == f"{dtype} {'pinned' if pinned else 'numpy'}" and row[8] == "ok"
    done, total = map(int, row[3].split("/"))
    assert done == total > 4


# -- the newcomer's failures (issue 21 items 6 and 7) -------------------------------------------------
def test_a_string_tile_is_named_a_string():
    import numpy as np
    import tiledmm
    a = np.ones((4, 4), np.float32)
    with pytest.raises(tiledmm.TiledmmError, match=r"tile='16' is a str: give a whole number \(e\.g\. tile=16\)"):
        tiledmm.matmul(a, a, kernel="tiled", tile="16")
    with pytest.raises(tiledmm.TiledmmError, match="tile=8.0 is a float"):
        tiledmm.matmul(a, a, kernel="tiled", tile=8.0)
    assert (tiledmm.matmul(a, a, kernel="tiled", tile=np.int64(2)) == 4).all()    # numpy integers are whole


@pytest.mark.skipif(GPU, reason="the emulation limit")
def test_a_bad_emulation_limit_names_the_variable(monkeypatch):
    monkeypatch.setenv("TILEDMM_EMULATION_LIMIT", "abc")
    code, out, err = cli("run", "-s", "4x4x4", "-k", "tiled")
    assert code == 2 and err.startswith("error: TILEDMM_EMULATION_LIMIT='abc'") and err.count("\n") == 1, err
    monkeypatch.setenv("TILEDMM_EMULATION_LIMIT", "1_000")          # a number (underscores too) is the limit
    assert cli("run", "-s", "4x4x4", "-k", "tiled", "-t", "2")[0] == 0   # 64 multiply-adds: within it
    code, out, err = cli("run", "-s", "16x16x16", "-k", "tiled", "-t", "2")   # 4,096: over it, refused
    assert code != 0 and "1,000" in out + err


@pytest.mark.skipif(GPU, reason="the emulated bench")
def test_bench_fp64_simt_says_why_without_suggesting_the_suite_in_use():
    code, out, err = cli("bench", "-p", "fp64", "-k", "tiled")
    assert code == 2 and err.count("\n") == 1, err
    assert "fp32 only" in err and "tiledmm run --dtype float64 -k tiled" in err and "--suite emulation" not in err


def test_bench_prints_no_debugging_lines(tmp_path):
    code, out, err = cli("bench", "-k", "triton", "-p", "fp32", "--out", str(tmp_path))
    assert code == 0, out + err
    assert "variant for" not in out + err and "{" not in out


@pytest.mark.parametrize("kernel", ["naive", "tiled", "autotuned"])
def test_nan_inputs_leak_no_runtime_warnings(kernel):
    import warnings

    import numpy as np
    import tiledmm
    a = np.ones((5, 6), np.float32)
    a[0, 0], a[1, 1] = np.nan, np.inf
    b = np.ones((6, 3), np.float32)
    b[2, 2] = -np.inf
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        p = tiledmm.matmul(a, b, kernel=kernel)
    assert np.isnan(p[0]).all() and np.isinf(p[1, :2]).all() and np.isnan(p[1, 2])
    assert not [w for w in seen if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in seen]


@pytest.mark.slow
@pytest.mark.skipif(GPU, reason="the emulation banner")
def test_banner_says_why_truly_and_dist_prints_it_once():
    """One banner for `dist` and its ranks, giving the reason where NUMBA_ENABLE_CUDASIM chose the simulator
    (where nothing chose it, `tiledmm run` in the README's test)."""
    env = dict(os.environ, TILEDMM_QUIET="0", NUMBA_ENABLE_CUDASIM="1", COLUMNS="200")
    for var in ("TILEDMM_EMULATE", "TRITON_INTERPRET"):
        env.pop(var, None)
    d = subprocess.run([sys.executable, "-m", "tiledmm", "dist", "--nproc", "2", "-s", "8x6x4", "--no-time"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert d.returncode == 0, d.stdout + d.stderr
    assert d.stderr.count("kernels run in emulation") == 1 and "asked for" not in d.stderr, d.stderr
    assert "NUMBA_ENABLE_CUDASIM=1 is set" in d.stderr, d.stderr
    assert "summa" in d.stdout and "ok" in d.stdout


def test_cli_modules_are_small_and_import_no_click():
    import ast
    pkg = ROOT / "src" / "tiledmm" / "cli"
    for f in pkg.glob("*.py"):
        text = f.read_text()
        assert len(text.splitlines()) < 600, f
        tree = ast.parse(text)
        for n in ast.walk(tree):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else \
                [n.module or ""] if isinstance(n, ast.ImportFrom) else []
            assert not any(x.split(".")[0] == "click" for x in names), f"{f.name} imports click"
        if f.name == "dist.py":      # the ranks import it too: torch and tiledmm.distributed only inside functions
            for n in tree.body:
                names = [a.name for a in n.names] if isinstance(n, ast.Import) else \
                    [n.module or ""] if isinstance(n, ast.ImportFrom) else []
                assert not any(x.split(".")[0] == "torch" or "distributed" in x for x in names), names


def test_emulate_on_a_gpu_machine_reruns_the_command_in_a_fresh_emulated_process(monkeypatch):
    """import tiledmm fixed the mode: on a GPU, --emulate runs the command again in a new process."""
    import subprocess as sp
    from tiledmm import _backend
    calls = []
    monkeypatch.setattr(_backend, "decide", lambda: "gpu")
    monkeypatch.setattr(sp, "call", lambda argv, env: calls.append((argv, env)) or 7)
    monkeypatch.setattr(sys, "argv", ["tiledmm", "--emulate", "trace", "-s", "4x4x4"])
    monkeypatch.delenv("TILEDMM_EMULATE", raising=False)
    code, _, _ = cli("--emulate", "trace", "-s", "4x4x4")
    assert code == 7
    [(argv, env)] = calls
    assert argv == [sys.executable, "-m", "tiledmm", "trace", "-s", "4x4x4"] and env["TILEDMM_EMULATE"] == "1"
