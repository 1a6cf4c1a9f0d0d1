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
                "claims", "tune", "outofcore", "--version"):
        assert any(c.split()[1:2] == [sub] or f" {sub}" in c for c in cmds), f"README shows no `tiledmm {sub}`"


@pytest.fixture(scope="module")
def readme_dir(tmp_path_factory):
    """One folder for all of the README's commands, in order: what one writes (bench-out), a later one reads."""
    d = tmp_path_factory.mktemp("readme")
    (d / "docs").mkdir()
    return d


# on a GPU these re-run themselves in emulation from sys.argv (pytest's here): a process of their own
REEXEC = {"trace", "explain", "claims", "--emulate"}


@pytest.mark.parametrize("command,gpu", readme_commands(), ids=[c for c, _ in readme_commands()])
def test_readme_command_runs(command, gpu, readme_dir, monkeypatch):
    if gpu and not GPU:
        pytest.skip("marked '# GPU' in the README")
    monkeypatch.chdir(readme_dir)
    monkeypatch.delenv("TILEDMM_EMULATE", raising=False)    # --emulate sets it in this process: undone after
    args = shlex.split(command)[1:]
    if GPU and REEXEC & set(args):
        p = tiledmm(*args)
        code, out, err = p.returncode, p.stdout, p.stderr
    else:
        code, out, err = cli(*args)
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
    from tiledmm.kernels.block.matmul import plan_key
    return tuning.key_of("triton", *(str(k) for k in plan_key(a, b, c, precision, alpha, beta)))


def test_tune_show_and_forget_the_store_in_words(store):
    import torch
    path = store.store_path()
    code, out, _ = cli("tune", "--show")
    assert code == 0 and "no tuned choices" in out and "does not exist" in out
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
    assert "4 choices" in out and f"store: {path}" in out and "|" + "torch" not in out
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
    row = next(ln for ln in out.splitlines() if ln.startswith("│"))
    return [c.strip() for c in row.strip("│").split("│")]


@pytest.mark.skipif(GPU, reason="emulation: the CPU stands in for the GPU")
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_outofcore_in_emulation_several_blocks_progress_to_the_end(dtype):
    code, out, err = cli("outofcore", "-s", "64x48x80", "--dtype", dtype, "--max-device-bytes", "12KiB")
    assert code == 0, out + err
    assert out.startswith("plan: ") and "GEMMs" in out.splitlines()[0]
    shape, dt, budget, gemms, secs, tuning_s, tflops, rel, check, busy = _ooc_row(out)
    assert (shape, dt, budget) == ("64x48x80", f"{dtype} {'torch' if dtype == 'bfloat16' else 'numpy'}", "12 KiB")
    done, total = map(int, gemms.split("/"))
    assert done == total > 4                          # the progress callback reached the total
    assert check == "ok" and float(rel) < 1e-2 and tuning_s == "0" and len(busy.split(" / ")) == 3


@pytest.mark.skipif(GPU, reason="emulation's default budget")
def test_outofcore_default_budget_in_emulation_forces_blocks():
    code, out, err = cli("outofcore", "-s", "40x30x50", "--check-rows", "0", "--seed", "3")
    assert code == 0, out + err
    row = _ooc_row(out)
    assert int(row[3].split("/")[1]) > 1 and row[7] == "–" and row[8] == "skipped"


def test_byte_sizes_and_host_helpers(monkeypatch):
    import numpy as np
    import torch
    from tiledmm import cli as C
    assert [C.parse_bytes("x", t) for t in ("123", "512MiB", "16GiB", "16gib", "1.5 KiB", "2GB")] == \
        [123, 512 << 20, 16 << 30, 16 << 30, 1536, 2 * 10 ** 9]
    assert C.human_bytes(16 << 30) == "16 GiB" and C.human_bytes(100) == "100 B"
    assert C.mem_available() > 0
    from tiledmm import outofcore as O
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
