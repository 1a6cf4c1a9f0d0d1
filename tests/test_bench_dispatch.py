"""scripts/bench_dispatch.py (issue 22's benchmark) end to end in its tiny emulation mode: every part
runs in its own fresh child process, checks its products against float64 and lands in the JSON;
and the bench suite it compares picks over (llm) is the issue's grid."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from tiledmm import bench as B

from .conftest import GPU

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench_dispatch.py"


def _run(*args, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_llm_suite_is_the_issue_grid():
    shapes = B.SUITES["llm"]
    assert len(shapes) == 60 == len(set(shapes))
    assert {m for m, _, _ in shapes} == {1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192}
    # (N, K) = (11008, 4096): B is K x N = 4096 x 11008, stored (m, k, n)
    assert {(n, k) for _, k, n in shapes} == {(4096, 4096), (11008, 4096), (4096, 11008), (8192, 8192),
                                              (28672, 8192), (8192, 28672)}
    assert (16, 4096, 11008) in shapes and (16, 11008, 4096) in shapes


def test_bad_arguments_are_refused():
    r = _run("--suites", "square,nope", "--emulate")
    assert r.returncode == 2 and "unknown suite 'nope'" in r.stderr


@pytest.mark.skipif(GPU, reason="emulation on a GPU machine runs Triton 3.6's interpreter, which fails on the "
                    "blocked kernel (InterpreterError 'only 0-dimensional arrays...'; so did main before this round)")
def test_emulation_end_to_end(tmp_path):
    out = tmp_path / "bd.json"
    r = _run("--emulate", "--quick", "--dtypes", "bf16", "--out", str(out))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["environment"]["emulated"] is True and "errors" not in doc
    (first,) = doc["first"]
    assert first["dtype"] == "bfloat16" and first["first_s"] > 0 and first["rel_err"] < 2e-2
    assert first["new_class"] == [9, 40, 24] and first["new_class_s"] > 0
    (loop,) = doc["loop"]
    assert loop["calls"] == 12 and loop["distinct_m"] > 1 and loop["max_rel_err"] < 2e-2
    assert {(p["dtype"], p["n"]) for p in doc["percall"]} == {("bfloat16", 8), ("bfloat16", 16)}
    modes = {(p["mode"], tuple(p["shape"])) for p in doc["picks"]}
    assert modes == {("default", (40, 24, 33)), ("model", (40, 24, 33)), ("timed", (40, 24, 33)),
                     ("replay", (40, 24, 33))}
    (replay,) = [p for p in doc["picks"] if p["mode"] == "replay"]
    assert replay["default_choice"] and replay["timed_choice"] and "missing" not in replay
    assert replay["rel_err_default"] < 2e-2 and replay["rel_err_timed"] < 2e-2 and replay["ratio"] > 0
    s = doc["summary"]["picks"]["bfloat16"]
    assert s["n"] == 1 and s["geomean_timed_over_default"] > 0 and s["geomean_timed_over_model"] > 0
    assert s["replay"]["n"] == 1 and s["replay"]["geomean_timed_over_default"] > 0
    assert "picks bfloat16: timed/default geomean" in r.stdout and r.stdout.rstrip().endswith(f"wrote {out}")


def test_parse_choice_reads_back_candidate_names():
    """The replay binds a recorded choice from its name: the name's config, every value typed back."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import bench_dispatch
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    from tiledmm.kernels.block import matmul as bm
    cfg = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "EPI_SPLIT": 2, "WS": False, "num_stages": 3}
    variant, got = bench_dispatch.parse_choice(bm.candidate_name("gluon-ws", cfg))
    assert variant.name == "gluon-ws" and got == cfg and type(got["WS"]) is bool
    assert bench_dispatch.parse_choice("no-such-variant:BLOCK_M=64") is None
    assert bench_dispatch.parse_choice("blocked:BLOCK_M=x") is None

