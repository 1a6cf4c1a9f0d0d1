"""Lean dispatch (issue 10) on the CPU: the registry carries everything about a kernel, tuned
choices persist across processes, plans are reused, one timing method."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import tiledmm
from tiledmm import registry, tuning

from .conftest import GPU


def test_every_kernel_spec_is_complete():
    for spec in registry.all_specs():
        assert callable(spec.launch) and spec.dtypes and spec.block_tile is not None
        if spec.family == "simt":
            assert spec.make is not None and spec.launch_config is not None and spec.barriers_per_phase >= 1
            tile = spec.default_tile
            grid, block = spec.launch_config(tile, 100, 50, 70)
            assert all(g >= 1 for g in grid) and 1 <= int(np.prod(block)) <= 1024


def test_kernels_do_not_import_the_harness():
    code = ("import sys, tiledmm, tiledmm.registry as r; r.names(); "
            "print('tiledmm.harness' in sys.modules)")
    env = dict(os.environ, TILEDMM_QUIET="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False"


def test_tuning_chooses_the_fastest_and_a_new_process_reads_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    tuning.forget()
    tuning.set_mode("on")
    calls = []
    try:
        cands = {"slow": lambda: calls.append("slow") or 2.0, "fast": lambda: calls.append("fast") or 1.0,
                 "broken": lambda: 1 / 0}
        assert tuning.choose("k|test", cands, "slow") == "fast"
        assert sorted(calls) == ["fast", "slow"]
        assert tuning.choose("k|test", cands, "slow") == "fast" and len(calls) == 2   # remembered: no timing
        assert json.loads(tuning.store_path().read_text()) == {"k|test": "fast"}
    finally:
        tuning.set_mode("off")
        tuning.forget()
    code = "import tiledmm.tuning as t; print(t.lookup('k|test'))"
    env = dict(os.environ, TILEDMM_CACHE_DIR=str(tmp_path), TILEDMM_QUIET="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert r.stdout.strip().splitlines()[-1] == "fast"


def test_tuning_off_uses_the_model_pick(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    tuning.forget()
    assert tuning.mode() == "off"                  # the test session's setting
    assert tuning.choose("k|off", {"a": lambda: 1 / 0, "b": lambda: 1 / 0}, "b") == "b"
    assert not tuning.store_path().exists()
    with pytest.raises(ValueError):
        tuning.set_mode("sometimes")


def test_unwritable_cache_keeps_the_choice_in_memory(tmp_path, monkeypatch):
    f = tmp_path / "file"
    f.write_text("x")
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(f / "sub"))   # a folder under a file: cannot be made
    tuning.forget()
    tuning.set_mode("on")
    try:
        assert tuning.choose("k|ro", {"a": lambda: 3.0, "b": lambda: 1.0}, "a") == "b"
        assert tuning.lookup("k|ro") == "b"
    finally:
        tuning.set_mode("off")
        tuning.forget()


def test_block_plan_is_resolved_once_per_key():
    from tiledmm.kernels.block import matmul as m
    dev = "cuda" if GPU else "cpu"
    a, b = torch.randn(20, 30, device=dev), torch.randn(30, 10, device=dev)
    tiledmm.matmul(a, b)
    n = len(m._plans)
    tiledmm.matmul(torch.randn(21, 31, device=dev), torch.randn(31, 11, device=dev))   # same shape class
    assert len(m._plans) == n
    tiledmm.matmul(torch.randn(200, 30, device=dev), torch.randn(30, 10, device=dev))  # another class
    assert len(m._plans) == n + 1


def test_timing_returns_a_positive_median():
    from tiledmm.timing import time_calls, wall_us_per_call
    assert time_calls([lambda: sum(range(100))] * 3, batches=3) > 0
    assert wall_us_per_call(lambda: None, n=10, warmup=1, repeats=2) >= 0
    with pytest.raises(ValueError):
        time_calls([])
