"""Rung 11 (cp.async into a ring of shared stages): in emulation the copies are synchronous
Python with the same zero-fill, the same indices, ring and barriers; on the GPU they are
PTX cp.async. Every boundary case of J x K x L around the tile sizes, K = 1, primes,
N's rows too narrow or misaligned for 16-byte copies, float32 and float64."""
import numpy as np
import pytest

import tiledmm
from tiledmm import _backend
from tiledmm.harness import check_and_time
from tiledmm.kernels.simt import k11_async
from tiledmm.kernels.simt.k11_async import AsyncKernel, Config, vector_rows_ok

from .conftest import randn

SMALL = "64x64x8-w32x32-t8x4-s3-m2"      # 128 threads: the cheapest block for the simulator


def run(cfg: str, shape, dtype="float32", seed=0):
    r = check_and_time("async", shape, dtype, options={"config": cfg}, seed=seed, time_it=False)
    assert r.ok, f"async {cfg} {shape} {dtype}: rel err {r.rel_err:.2e} > {r.bound:.0e}"
    return r


@pytest.mark.parametrize("shape", [(1, 1, 1), (64, 8, 64), (65, 9, 63), (63, 17, 65), (64, 1, 64),
                                   (7, 13, 5), (131, 3, 67), (70, 45, 68)])
def test_boundaries_small_config(shape):
    """Dims below / at / above 64 and BK = 8 multiples, K = 1, primes; L % 4 != 0 takes the
    element-wise copies of N, L % 4 == 0 the 16-byte ones."""
    run(SMALL, shape)


@pytest.mark.parametrize("cfg", ["64x64x8-w32x32-t8x4-s2-m2", "64x64x8-w32x32-t8x4-s4-m2",
                                 "64x64x16-w32x32-t8x4-s3-m2"])
def test_ring_depths(cfg):
    """2, 3 and 4 stages with more phases than stages (K = 45: 6 or 3 phases, the last partial)."""
    run(cfg, (66, 45, 64))


def test_default_candidate():
    run(k11_async.CANDIDATES["float32"][0].name, (70, 21, 72))


def test_float64():
    r = run("64x64x8-w32x32-t8x4-s3-m2", (33, 20, 18), "float64")
    assert r.rel_err < 1e-14


def _direct(cfg_name, M, N, vec_b, dtype="float32"):
    """Launch one variant of the kernel directly (the simulator takes numpy arguments)."""
    cfg = Config.parse(cfg_name)
    kern = k11_async.make_async(cfg, dtype, vec_b)
    J, L = M.shape[0], N.shape[1]
    P = np.full((J, L), np.nan, dtype)
    grid, block = k11_async.config_fn(cfg)(None, J, M.shape[1], L)
    kern[grid, block, 0, cfg.smem_bytes(dtype)](M, N, P)
    M, N = np.asarray(M), np.asarray(N)
    ref = M.astype(np.float64) @ N.astype(np.float64)
    return np.linalg.norm(P - ref) / np.linalg.norm(ref)


@pytest.mark.skipif(not _backend.emulating(), reason="direct simulator launch with numpy arguments")
def test_partial_16_byte_chunks_and_strided_rows(rng):
    """N a view with rows 72 wide and L = 66: 16-byte copies, the last chunk of a row half
    outside N (source size 8 of 16 bytes, the rest zero-filled); M a view with a column stride."""
    from numba import cuda
    big = cuda.to_device(randn(rng, (21, 72)))
    N = big[:, :66]
    M = cuda.to_device(randn(rng, (40, 42)))[:, ::2]     # 40 x 21, column stride 2 elements
    assert vector_rows_ok(N, "float32") and not vector_rows_ok(N[:, 1:], "float32")
    assert _direct(SMALL, M, N, True) < 1e-6
    assert _direct(SMALL, M, N[:, 1:], False) < 1e-6     # misaligned base: element copies


def test_vector_rows_rule():
    a = np.zeros((8, 12), np.float32)
    assert vector_rows_ok(a, "float32")
    assert not vector_rows_ok(np.zeros((8, 13), np.float32), "float32")     # rows 52 bytes apart
    assert not vector_rows_ok(a[:, 1:], "float32")                          # base 4 bytes off
    assert not vector_rows_ok(a[:, ::2], "float32")                         # column stride 2
    assert vector_rows_ok(np.zeros((4, 6), np.float64), "float64")          # 48-byte rows


@pytest.mark.parametrize("text,why", [("128x128x6-w32x64-t8x8-s3", "inconsistent"),
                                      ("128x128x16-w32x64-t8x8-s1", "inconsistent"),
                                      ("128x128x64-w32x64-t8x8-s8-m2", "shared"),
                                      ("128x128", "not like")])
def test_bad_config(text, why):
    a = np.ones((8, 8), np.float32)
    with pytest.raises(tiledmm.TiledmmError, match=why):
        tiledmm.matmul(a, a, kernel="async", config=text)


def test_config_names_round_trip():
    for c_dtype, cands in k11_async.CANDIDATES.items():
        for c in cands:
            assert Config.parse(c.name, c_dtype) == c
    assert Config.parse("128x128x16-w32x64-t8x8") == Config.parse("128x128x16-w32x64-t8x8-s3-m2")


# ----------------------------------------------------------------------------- on the GPU

CANDIDATES = [(d, c.name) for d, cs in k11_async.CANDIDATES.items() for c in cs]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,cfg", CANDIDATES)
def test_gpu_candidates(dtype, cfg):
    for shape in [(1000, 777, 1023), (129, 1001, 65), (256, 256, 256), (1, 1, 1)]:
        run(cfg, shape, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("cut", ["ld", "base", "colstride"])
def test_gpu_strided_operands(cut):
    """Device views: N rows 1030 floats apart (no 16-byte copies), N's base 4 bytes off,
    M with a column stride; NaN-poisoned output, float64 reference."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(7)
    big_a = torch.randn(700, 1200, device="cuda", generator=g)
    big_b = torch.randn(900, 1030, device="cuda", generator=g)
    a = big_a[:, :900] if cut != "colstride" else big_a[:, ::2][:, :600]
    b = big_b[:a.shape[1], :1001] if cut == "ld" else big_b[:a.shape[1], 1:1001]
    out = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda")
    vec = vector_rows_ok(tiledmm_view(b), "float32")
    assert vec is False
    tiledmm.matmul(a, b, kernel="async", out=out, config="128x128x16-w32x64-t8x8-s3-m2")
    ref = a.double() @ b.double()
    rel = ((out.double() - ref).norm() / ref.norm()).item()
    assert rel < 1e-5, rel


def tiledmm_view(t):
    from numba import cuda
    return cuda.as_cuda_array(t)


@pytest.mark.gpu
def test_gpu_autotune_picks_a_candidate():
    r = check_and_time("async", (1536, 1024, 2048), "float32", time_it=False)
    assert r.ok
    assert any(v.name == c.name for v in k11_async._chosen.values() for c in k11_async.CANDIDATES["float32"])


@pytest.mark.gpu
def test_gpu_copies_are_cp_async():
    """The claim of the rung, read from the compiled code (PTX): cp.async copies (16-byte
    with a source size for N, element-wise for M), wait_group, shared loads 4 words wide,
    and no ordinary shared stores in the main loop."""
    import torch
    a = torch.randn(256, 64, device="cuda")
    tiledmm.matmul(a, a.T.contiguous(), kernel="async", config=k11_async.ANALYSED.name)
    kern = k11_async.make_async(k11_async.ANALYSED, "float32", True)
    ptx = next(iter(kern.inspect_asm().values()))
    assert "cp.async.cg.shared.global" in ptx and "cp.async.ca.shared.global" in ptx
    assert "cp.async.wait_group 1" in ptx and "ld.shared.v4.f32" in ptx
    assert "st.shared" not in ptx
