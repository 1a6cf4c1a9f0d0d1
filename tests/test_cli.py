"""The command line, as a user runs it."""
import json
import os
import subprocess
import sys

import pytest

from .conftest import GPU


def tiledmm(*args, timeout=300):
    env = dict(os.environ, TILEDMM_QUIET="0", COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "tiledmm.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.mark.skipif(GPU, reason="the emulation default of `tiledmm run`")
def test_run_defaults_in_emulation():
    p = tiledmm("run", "--json")
    assert p.returncode == 0, p.stderr
    assert "kernels run in emulation" in p.stderr
    doc = json.loads(p.stdout)
    rows = doc["results"]
    assert {(tuple(r["shape"]), r["kernel"], r["tile"]) for r in rows} == {
        ((3, 3, 3), "naive", 2), ((3, 3, 3), "tiled", 2), ((19, 7, 21), "naive", 8), ((19, 7, 21), "tiled", 8)}
    assert all(r["ok"] and r["rel_err"] < 1e-5 and r["emulated"] for r in rows)
    assert doc["environment"]["mode"] == "emulation"


def test_run_table_and_options():
    p = tiledmm("run", "--shape", "5x6x7", "--kernel", "tiled", "--tile", "4", "--dtype", "float64")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "5x6x7" in p.stdout and "tiled" in p.stdout and "ok" in p.stdout


def test_run_bad_shape_and_kernel():
    p = tiledmm("run", "--shape", "5x6")
    assert p.returncode == 2 and "JxKxL" in p.stderr
    p = tiledmm("run", "--shape", "5x6x7", "--kernel", "nope")
    assert p.returncode == 2 and "unknown kernel 'nope'" in p.stdout


def test_kernels_lists_the_registry():
    p = tiledmm("kernels")
    assert p.returncode == 0
    for name in ("naive", "tiled", "cublas"):
        assert name in p.stdout


@pytest.mark.skipif(GPU, reason="the emulated bench; the GPU bench is run by scripts/device_check.sh")
def test_bench_in_emulation_writes_table_csv_json_png(tmp_path):
    p = tiledmm("bench", "--kernel", "triton", "--kernel", "tiled", "-p", "fp32", "-p", "bf16", "--out", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((tmp_path / "bench.json").read_text())
    kernels = {(r["kernel"], r["precision"]) for r in doc["rows"]}
    assert kernels == {("triton", "fp32"), ("triton", "bf16"), ("tiled", "fp32")}  # SIMT: fp32 only, 2-D only
    assert all(r["ok"] for r in doc["rows"])
    assert (tmp_path / "bench.csv").read_text().startswith("suite,shape,precision,kernel")
    assert (tmp_path / "bench.png").stat().st_size > 10000
