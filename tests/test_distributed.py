"""Distributed GEMM on torch.distributed: every algorithm on local gloo ranks (CPU), uneven
shapes, against float64; the `tiledmm dist` command."""
import os
import subprocess
import sys

import pytest

from tiledmm import cli_dist
from tiledmm.distributed import block_range, grid_shape

from .conftest import GPU

pytestmark = pytest.mark.skipif(GPU, reason="gloo/CPU cases (the GPU runs scripts/bench_distributed.py)")

CASES2 = [
    dict(algo="summa", shape=(13, 11, 9), dtype="float64", gemm="torch"),
    dict(algo="summa", shape=(13, 11, 9), dtype="float64", gemm="torch", panel=2, depth=3),
    dict(algo="summa", shape=(5, 1, 7), dtype="float64", gemm="torch", panel=1, depth=1),
    dict(algo="allgather", shape=(13, 11, 9), dtype="float64", gemm="torch", chunks=1),
    dict(algo="allgather", shape=(17, 6, 5), dtype="float64", gemm="torch", chunks=3),
    dict(algo="allgather", shape=(3, 4, 2), dtype="float64", gemm="torch", chunks=4),
    dict(algo="reducescatter", shape=(13, 11, 9), dtype="float64", gemm="torch", chunks=2),
    dict(algo="reducescatter", shape=(17, 7, 5), dtype="float64", gemm="torch", chunks=3),
    dict(algo="reducescatter", shape=(3, 5, 4), dtype="float32", gemm="torch", chunks=2, time_it=True, baseline=True),
    dict(algo="summa", shape=(9, 7, 6), dtype="float32", gemm="tiledmm", timeline=True),   # tiledmm's default kernel
    dict(algo="allgather", shape=(6, 5, 4), dtype="float32", gemm="triton", chunks=2),
]


@pytest.fixture(scope="module")
def two_ranks():
    return cli_dist.launch(2, CASES2, backend="gloo")


@pytest.mark.parametrize("idx", range(len(CASES2)))
def test_two_ranks(two_ranks, idx):
    r, c = two_ranks[idx], CASES2[idx]
    assert (r["algo"], tuple(r["shape"]), r["dtype"], r["nproc"]) == (c["algo"], c["shape"], c["dtype"], 2)
    assert r["checked"] == "all"
    assert r["ok"] and r["rel_err"] <= (1e-12 if c["dtype"] == "float64" else 1e-5), r
    if c.get("time_it"):
        assert r["ms"] > 0 and r["baseline_ms"] > 0 and r["speedup"] > 0
    if c.get("timeline"):
        kinds = {s for s, *_ in r["timeline"]}
        assert kinds == {"compute", "comm"}          # 1x2 grid: A's panels broadcast along the row


def test_four_ranks_summa_2x2_uneven():
    cases = [dict(algo="summa", shape=(11, 9, 7), dtype="float64", gemm="torch", panel=2),
             dict(algo="summa", shape=(3, 2, 5), dtype="float64", gemm="torch"),
             dict(algo="reducescatter", shape=(10, 8, 3), dtype="float64", gemm="torch", chunks=2)]
    res = cli_dist.launch(4, cases, backend="gloo")
    assert [r["grid"] for r in res[:2]] == [[2, 2], [2, 2]]
    for r in res:
        assert r["ok"] and r["rel_err"] < 1e-12, r


def test_layout_helpers():
    assert [block_range(10, 3, i) for i in range(3)] == [(0, 4), (4, 7), (7, 10)]
    assert [block_range(2, 4, i) for i in range(4)] == [(0, 1), (1, 2), (2, 2), (2, 2)]
    assert [grid_shape(w) for w in (1, 2, 3, 4, 6, 8)] == [(1, 1), (1, 2), (1, 3), (2, 2), (2, 3), (2, 4)]


def test_cli_dist_command():
    env = dict(os.environ, TILEDMM_QUIET="1", COLUMNS="200")
    p = subprocess.run([sys.executable, "-m", "tiledmm.cli", "dist", "--nproc", "2", "--shape", "7x5x6",
                        "--algo", "summa", "--algo", "reducescatter", "--gemm", "torch", "--dtype", "float64",
                        "--no-time"], capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "summa 1x2" in p.stdout and "reducescatter" in p.stdout and "WRONG" not in p.stdout
    bad = subprocess.run([sys.executable, "-m", "tiledmm.cli", "dist", "--algo", "cannon"], capture_output=True,
                         text=True, timeout=60, env=env)
    assert bad.returncode == 2 and "cannon" in bad.stdout + bad.stderr


@pytest.mark.parametrize("gemm, word", [("nosuch", "nosuch"), ("triton:colour=red", "colour"),
                                        ("triton:variant", "variant")])
def test_cli_dist_refuses_a_bad_gemm_before_starting_ranks(gemm, word):
    from tiledmm import TiledmmError
    with pytest.raises(TiledmmError, match=word):
        cli_dist._check_gemm(gemm)


def test_cli_dist_gemm_check_takes_good_names():
    for gemm in ("tiledmm", "torch", "triton", "triton:variant=blocked", "triton:variant=tma,precision=tf32"):
        cli_dist._check_gemm(gemm)


def test_forced_env_in_every_rank(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")             # a default would not override this
    cli_dist.force_env()
    assert os.environ["NCCL_NVLS_ENABLE"] == "0"
    assert os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and os.environ["NVSHMEM_DISABLE_NVLS"] == "1"


def test_local_gemm_names_take_kernel_options():
    """``--gemm KERNEL:key=value,...`` (e.g. ``triton:variant=blocked``) forwards the options."""
    import torch
    from tiledmm.cli_dist import _gemm_for
    a, b = torch.randn(24, 16), torch.randn(16, 20)
    c = torch.full((24, 20), float("nan"))
    _gemm_for("triton:variant=blocked", "float32")(a, b, c, 1.0, 0.0)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(Exception, match="variant"):
        _gemm_for("triton:variant=no-such-variant", "float32")(a, b, c, 1.0, 0.0)


def test_sm_margin_is_read_from_the_environment(monkeypatch):
    from tiledmm.kernels.block import _vcommon
    for value, want in (("8", 8), ("", 0), ("x", 0), ("-3", 0)):
        monkeypatch.setenv("TILEDMM_SM_MARGIN", value)
        _vcommon._sm_margin.cache_clear()
        assert _vcommon._sm_margin() == want
    _vcommon._sm_margin.cache_clear()


def test_summa_prepares_each_distinct_local_product_once(monkeypatch):
    """Before its first collective SUMMA runs each distinct local product (layout and beta) once
    into a scratch output, so the dispatcher tunes on a quiet GPU; later calls skip it."""
    torch = pytest.importorskip("torch")
    from tiledmm.distributed import streams as D
    monkeypatch.setattr(D, "_prepared", set())
    seen = []

    def gemm(a, b, c, alpha, beta):
        seen.append((tuple(a.shape), tuple(b.shape), beta))
        c.fill_(1.0)
    a, b = torch.randn(8, 16), torch.randn(16, 8)
    out = torch.full((8, 8), 7.0)
    products = [(a[:, :8], b[:8], 0.0), (a[:, 8:], b[8:], 1.0), (a[:, 8:], b[8:], 1.0), (a[:, :8], b[:8], 1.0),
                (a[:, 1:9], b[1:9], 1.0)]
    D._prepare_local(gemm, products, out, 1.0)
    # the third and fourth: the second's layout (offsets of 32 bytes keep the 16-byte alignment);
    # the fifth starts 4 bytes in: another alignment, another kernel choice
    assert seen == [((8, 8), (8, 8), 0.0), ((8, 8), (8, 8), 1.0), ((8, 8), (8, 8), 1.0)]
    assert torch.equal(out, torch.full((8, 8), 7.0))                  # out untouched: a scratch took them
    D._prepare_local(gemm, products, out, 1.0)
    assert len(seen) == 3
