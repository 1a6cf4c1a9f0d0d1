"""The command line, as a user runs it: results, messages for every bad input, the README's commands."""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tiledmm import bench as B
from tiledmm.cli import app

from .conftest import GPU

README = Path(__file__).parent.parent / "README.md"


def tiledmm(*args, timeout=300):
    """A fresh process, as a user's shell runs it (banner on)."""
    env = dict(os.environ, TILEDMM_QUIET="0", COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "tiledmm.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def cli(*args):
    """In this process (fast): exit code, stdout, stderr."""
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.skipif(GPU, reason="the emulation default of `tiledmm run`")
def test_run_defaults_in_emulation_and_one_banner():
    p = tiledmm("run", "--json")
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("kernels run in emulation") == 1
    doc = json.loads(p.stdout)
    rows = doc["results"]
    assert {(r["shape"], r["kernel"], r["tile"]) for r in rows} == {
        ("3x3x3", "naive", 2), ("3x3x3", "tiled", 2), ("19x7x21", "naive", 8), ("19x7x21", "tiled", 8)}
    assert all(r["ok"] and r["rel_err"] < 1e-5 and r["emulated"] for r in rows)
    assert doc["environment"]["mode"] == "emulation"


def test_commands_that_run_no_kernel_print_no_banner():
    p = tiledmm("model", "--profile", "g80")
    assert p.returncode == 0 and "emulation" not in p.stderr, p.stderr


def test_run_table_labels_naive_tile_as_block():
    code, out, err = cli("run", "--shape", "5x6x7", "-k", "naive", "-k", "tiled", "--tile", "4", "--dtype", "float64")
    assert code == 0, out + err
    rows = [ln for ln in out.splitlines() if "5x6x7" in ln]
    naive = next(ln for ln in rows if " naive " in ln)
    tiled = next(ln for ln in rows if " tiled " in ln)
    assert "fp64" in tiled and "ok" in tiled
    # naive: no TILE_WIDTH ('–'), its 4 is the block's width (4x4); tiled: TILE_WIDTH 4 on a 4x4 block
    assert re.search(r"│\s+–\s+│\s+4x4\s+│", naive) and re.search(r"│\s+4\s+│\s+4x4\s+│", tiled)


def test_version_and_help():
    code, out, _ = cli("--version")
    assert code == 0 and re.fullmatch(r"tiledmm \d+\.\d+\.\d+\S*\n", out)
    code, out, _ = cli("bench", "--help")
    for s in B.SUITES:
        assert s in out
    cmd = typer.main.get_command(app)
    for name, c in cmd.commands.items():
        if c.callback.__module__ != "tiledmm.cli":
            continue        # commands other modules register (tiledmm dist) are their owners' to test
        for p in c.params:
            if p.name != "help":
                assert p.help, f"tiledmm {name} {p.opts}: no help text"
        code, out, _ = cli(name, "--help")
        assert code == 0 and "<list[" not in out and not re.search(r"--json\s+<bool>", out), out


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
]


@pytest.mark.parametrize("args,msg,cpu_only", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_bad_input_is_one_message_and_an_error_exit(args, msg, cpu_only, tmp_path, monkeypatch):
    if cpu_only and GPU:
        pytest.skip("a CPU machine's refusal")
    args = [_bench_json(tmp_path, True) if a == "EMULATED" else a for a in args]
    monkeypatch.chdir(README.parent)
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


def readme_commands() -> list[tuple[str, bool]]:
    """Every `tiledmm ...` command in README.md's code blocks, and whether it is marked '# GPU'."""
    cmds = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", README.read_text(), re.S):
        for line in block.splitlines():
            code, _, comment = line.partition("#")
            for part in code.split("&&"):
                part = part.strip()
                if part.startswith("tiledmm "):
                    cmds.append((part, "GPU" in comment))
                elif part == "tiledmm":
                    cmds.append((part, "GPU" in comment))
    return cmds


def test_readme_has_commands():
    cmds = [c for c, _ in readme_commands()]
    for sub in ("run", "bench", "kernels", "device", "occupancy", "model", "burst", "trace", "explain", "roofline",
                "claims", "--version"):
        assert any(c.split()[1:2] == [sub] or f" {sub}" in c for c in cmds), f"README shows no `tiledmm {sub}`"


@pytest.mark.parametrize("command,gpu", readme_commands(), ids=[c for c, _ in readme_commands()])
def test_readme_command_runs(command, gpu, tmp_path, monkeypatch):
    if gpu and not GPU:
        pytest.skip("marked '# GPU' in the README")
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*shlex.split(command)[1:])
    assert code == 0, f"{command}: {out}{err}"
    assert "Traceback" not in out + err


@pytest.mark.skipif(GPU, reason="the emulated bench; the GPU bench is run by scripts/device_check.sh")
def test_bench_in_emulation_writes_table_csv_json_png(tmp_path):
    code, out, err = cli("bench", "-k", "triton", "-k", "tiled", "-p", "fp32", "-p", "bf16", "--out", str(tmp_path))
    assert code == 0, out + err
    doc = json.loads((tmp_path / "bench.json").read_text())
    kernels = {(r["kernel"], r["precision"]) for r in doc["rows"]}
    assert kernels == {("triton", "fp32"), ("triton", "bf16"), ("tiled", "fp32")}  # SIMT: fp32 only, 2-D only
    assert all(r["ok"] and r["emulated"] for r in doc["rows"])
    assert (tmp_path / "bench.csv").read_text().startswith("suite,shape,precision,dtype,kernel")
    assert (tmp_path / "bench.png").stat().st_size > 10000


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
