"""The lectures' kernels, checked in emulation (numba's CUDA simulator) on the
slides' toy cases and on every boundary case of a rectangular J x K x L."""
import itertools

import numpy as np
import pytest

import tiledmm
from tiledmm import _backend
from tiledmm.harness import check_and_time
from tiledmm.kernels.simt import k02_tiled, k10_autotune
from tiledmm.kernels.simt.k09_unsigned import Shape
from tiledmm.kernels.simt._launch import lecture_config

from .conftest import randn

SIMT = ["naive", "tiled"]


def check(kernel, shape, tile, dtype="float32", seed=0):
    r = check_and_time(kernel, shape, dtype, tile=tile, seed=seed, time_it=False)
    assert r.ok, f"{kernel} tile={tile} {shape} {dtype}: rel err {r.rel_err:.2e} > {r.bound:.0e}"
    return r


@pytest.mark.parametrize("kernel", SIMT)
def test_slides_width3_tile2(kernel):
    check(kernel, (3, 3, 3), 2)


@pytest.mark.parametrize("kernel", SIMT)
def test_slides_width4_tile2(kernel):
    check(kernel, (4, 4, 4), 2)


@pytest.mark.parametrize("kernel", SIMT)
def test_rectangular_around_tile_multiples(kernel):
    """Every dimension below, equal to, and just above a multiple of the tile."""
    T = 4
    for J, K, L in itertools.product((T - 1, T, T + 1), repeat=3):
        check(kernel, (J, K, L), T, seed=J * 100 + K * 10 + L)


@pytest.mark.parametrize("kernel", SIMT)
@pytest.mark.parametrize("shape,tile", [((1, 1, 1), 2), ((1, 1, 1), 8), ((7, 1, 9), 4), ((1, 13, 1), 4),
                                        ((13, 7, 11), 8), ((17, 31, 5), 8), ((9, 8, 7), 8)])
def test_small_and_prime_sizes(kernel, shape, tile):
    check(kernel, shape, tile)


@pytest.mark.parametrize("shape,tile", [((33, 17, 31), 16), ((33, 33, 34), 32), ((15, 16, 17), 8)])
def test_lecture_tile_widths(shape, tile):
    """TILE_WIDTH 8, 16 and 32 (32*32 = 1024 threads, the block limit)."""
    check("tiled", shape, tile)


@pytest.mark.parametrize("kernel", SIMT)
def test_float64(kernel):
    r = check(kernel, (9, 13, 7), 4, dtype="float64")
    assert r.rel_err < 1e-14


def test_launch_configuration_is_ceil():
    # dimGrid(ceil(L/TILE), ceil(J/TILE)), dimBlock(TILE, TILE); x runs along the columns of P
    assert lecture_config(16, 3000, 2000, 4000) == ((250, 188), (16, 16))
    assert lecture_config(2, 3, 3, 3) == ((2, 2), (2, 2))
    assert lecture_config(32, 32, 1, 64) == ((2, 1), (32, 32))


def _device_view_case(kernel_fn, tile=2):
    """Run a tiled kernel into the 3x3 interior of a poisoned 5x5 device buffer
    (the slides' Width 3, TILE 2 case: Block(1,1) covers P rows/cols 2..3, but only
    P[2,2] exists). Returns (whole buffer, reference)."""
    cuda = _backend.numba_cuda()
    rng = np.random.default_rng(7)
    M, N = randn(rng, (3, 3)), randn(rng, (3, 3))
    big = cuda.to_device(np.full((5, 5), np.nan, np.float32))
    view = big[1:4, 1:4]
    grid, block = lecture_config(tile, 3, 3, 3)
    kernel_fn[grid, block](cuda.to_device(M), cuda.to_device(N), view)
    return big.copy_to_host(), M.astype(np.float64) @ N.astype(np.float64)


def test_threads_outside_P_store_nothing():
    host, ref = _device_view_case(k02_tiled.make(2, "float32"))
    inner = host[1:4, 1:4]
    np.testing.assert_allclose(inner, ref, rtol=1e-5, atol=1e-6)
    ring = np.ones((5, 5), bool)
    ring[1:4, 1:4] = False
    assert np.isnan(host[ring]).all(), "a thread outside P stored into the buffer around it"


def test_unguarded_tiled_kernel_is_caught():
    """Proof that the boundary tests can fail: the slides' kernel without them is
    caught, by the simulator's bounds check or by a wrong/poisoned result on a GPU."""
    unguarded = k02_tiled.make(2, "float32", guarded=False)
    try:
        host, ref = _device_view_case(unguarded)
    except IndexError as e:  # the CUDA simulator names the thread that stepped outside
        assert "tid=" in str(e) or "index" in str(e).lower()
        return
    inner_ok = np.allclose(host[1:4, 1:4], ref, rtol=1e-5, atol=1e-6)
    ring = np.ones((5, 5), bool)
    ring[1:4, 1:4] = False
    assert not (inner_ok and np.isnan(host[ring]).all()), "unguarded kernel went unnoticed"


def test_harness_catches_an_unwritten_element():
    """The poison is what catches a kernel that forgets an element."""
    from tiledmm.harness import poisoned_like, reference, rel_error
    a = np.random.default_rng(1).standard_normal((5, 6)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((6, 4)).astype(np.float32)
    out = poisoned_like(a, (5, 4))
    tiledmm.matmul(a, b, kernel="naive", tile=4, out=out)
    assert rel_error(out, reference(a, b)) < 1e-6
    out[4, 3] = np.nan  # as if no thread had stored it
    assert not (rel_error(out, reference(a, b)) <= 1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel,tile", [("naive", 16), ("tiled", 8), ("tiled", 16), ("tiled", 32)])
@pytest.mark.parametrize("shape", [(1000, 777, 1234), (1024, 1024, 1024), (3000, 2000, 4000), (1, 4097, 33)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gpu_large_rectangular(kernel, tile, shape, dtype):
    check(kernel, shape, tile, dtype)


@pytest.mark.gpu
def test_gpu_threads_outside_P_store_nothing_for_real():
    """On real hardware there is no bounds check: only the guard keeps the ring NaN."""
    test_threads_outside_P_store_nothing()
    test_unguarded_tiled_kernel_is_caught()


LADDER = [("naive-uncoalesced", 4), ("coarsen", 64), ("regtile2d", 64), ("regtile2d", 128),
          ("conflict-free", 64), ("conflict-free", 128), ("double-buffer", 64), ("double-buffer", 128), ("flat-shared", 64), ("flat-shared", 128),
          ("warp-tile", 128), ("unsigned", 64), ("unsigned", 128), ("autotuned", None)]


@pytest.mark.parametrize("kernel,tile", LADDER)
@pytest.mark.parametrize("shape", [(70, 19, 65), (64, 16, 64), (1, 9, 130)])
def test_ladder_rungs(kernel, tile, shape):
    """Every rung: boundary blocks (zero-fill, guarded store) and interior blocks."""
    check(kernel, shape, tile)


@pytest.mark.parametrize("kernel", ["coarsen", "double-buffer"])
def test_ladder_float64(kernel):
    r = check(kernel, (33, 20, 17), 64, dtype="float64")
    assert r.rel_err < 1e-14


@pytest.mark.gpu
@pytest.mark.parametrize("kernel,tile", LADDER)
@pytest.mark.parametrize("shape", [(1000, 777, 1234), (2048, 2048, 2048), (129, 4097, 65)])
def test_gpu_ladder(kernel, tile, shape):
    check(kernel, shape, tile)


# rung 10: every candidate shape, forced (emulation and the GPU otherwise run only one / the tuned one)
CANDIDATES = [(d, sh.name) for d, shapes in k10_autotune.CANDIDATES.items() for sh in shapes]


@pytest.mark.parametrize("dtype,config", CANDIDATES)
def test_autotune_candidates(dtype, config):
    r = check_and_time("autotuned", (70, 45, 65), dtype, options={"config": config}, time_it=False)
    assert r.ok, f"{config} {dtype}: rel err {r.rel_err:.2e}"


@pytest.mark.parametrize("shape,config", [((128, 40, 128), "128x128x32-w32x64-t8x8"),
                                          ((64, 72, 64), "64x64x32-w32x32-t8x4")])
def test_autotune_interior_blocks(shape, config, monkeypatch):
    """Blocks wholly inside P take the loads without bounds tests, but a last phase that runs
    past K (40 = 32 + 8, 72 = 2 * 32 + 8) still needs the zero-fill."""
    monkeypatch.setenv("TILEDMM_EMULATION_LIMIT", str(10 ** 6))
    r = check_and_time("autotuned", shape, "float32", options={"config": config}, time_it=False)
    assert r.ok, f"{config} {shape}: rel err {r.rel_err:.2e}"


def test_unsigned_float64():
    r = check("unsigned", (33, 20, 17), 64, dtype="float64")
    assert r.rel_err < 1e-14


@pytest.mark.parametrize("config,why", [("128x128", "not like"), ("128x128x8-w32x32-t8x8", "inconsistent"),
                                        ("128x128x6-w32x64-t8x8", "multiple of 4"),
                                        ("128x128x8-w64x64-t8x8", "inconsistent")])
def test_autotune_bad_config(config, why):
    a = np.ones((8, 8), np.float32)
    with pytest.raises(tiledmm.TiledmmError, match=why):
        tiledmm.matmul(a, a, kernel="autotuned", config=config)


def test_tile_shape_names_round_trip():
    for shapes in k10_autotune.CANDIDATES.values():
        for sh in shapes:
            assert Shape.parse(sh.name) == sh
            LR, LC = sh.lanes
            assert LR * LC == 32 and sh.threads <= 1024


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,config", CANDIDATES)
def test_gpu_autotune_candidates(dtype, config):
    for shape in [(1000, 777, 1234), (129, 4097, 65)]:
        r = check_and_time("autotuned", shape, dtype, options={"config": config}, time_it=False)
        assert r.ok, f"{config} {dtype} {shape}: rel err {r.rel_err:.2e}"


@pytest.mark.gpu
def test_gpu_autotune_choice_is_persisted_and_read_by_a_new_process(tmp_path):
    """The tuned shape is written to the cache file and a second process reads it back
    without timing (its own timers would have to run otherwise: tuning is off there)."""
    import json
    import os
    import subprocess
    import sys

    from tiledmm import tuning
    old = os.environ.get("TILEDMM_CACHE_DIR")
    os.environ["TILEDMM_CACHE_DIR"] = str(tmp_path)
    tuning.forget()
    tuning.set_mode("on")
    try:
        check("autotuned", (1536, 1024, 2048), None)
        stored = json.loads(tuning.store_path().read_text())
        (key, name), = ((k, v) for k, v in stored.items() if k.startswith("simt-autotuned|float32"))
        assert name in {sh.name for sh in k10_autotune.CANDIDATES["float32"]}
        code = ("import tiledmm, tiledmm.tuning as t; from tiledmm.kernels.simt import k10_autotune as k; "
                f"print(t.lookup({key!r}))")
        env = dict(os.environ, TILEDMM_TUNE="off", TILEDMM_QUIET="1")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert r.stdout.strip().splitlines()[-1] == name
    finally:
        tuning.set_mode("off")
        tuning.forget()
        if old is None:
            os.environ.pop("TILEDMM_CACHE_DIR", None)
        else:
            os.environ["TILEDMM_CACHE_DIR"] = old


@pytest.mark.gpu
def test_gpu_unsigned_indices_give_wide_shared_loads():
    """The claim of rung 9, read from the compiled code: signed indices (rung 8) give scalar
    LDS only; uint64 indices give LDS.128 and fewer registers."""
    from tiledmm.analysis.occupancy import numba_resources
    signed, unsigned = numba_resources("warp-tile", 128), numba_resources("unsigned", 128)
    assert "LDS.128" not in signed["sass"] and signed["sass"].get("LDS", 0) > 0
    assert unsigned["sass"].get("LDS.128", 0) > 0 and "LDS" not in unsigned["sass"]
    assert unsigned["regs_per_thread"] < signed["regs_per_thread"]
