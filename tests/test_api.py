"""tiledmm.matmul: array kinds in and out, bad input, empty and IEEE cases."""
import numpy as np
import pytest
import torch

import tiledmm
from tiledmm import TiledmmError, _backend

from .conftest import GPU, randn


def ref64(a, b):
    return np.asarray(a, np.float64) @ np.asarray(b, np.float64)


def test_emulation_is_chosen_without_a_gpu():
    assert tiledmm.emulating() is (not GPU)


def test_numpy_in_numpy_out(rng):
    a, b = randn(rng, (5, 7)), randn(rng, (7, 3))
    p = tiledmm.matmul(a, b, kernel="tiled", tile=4)
    assert isinstance(p, np.ndarray) and p.dtype == np.float32 and p.shape == (5, 3)
    np.testing.assert_allclose(p, ref64(a, b), rtol=1e-5, atol=1e-5)


def test_torch_in_torch_out(rng):
    a = torch.from_numpy(randn(rng, (6, 5), np.float64))
    b = torch.from_numpy(randn(rng, (5, 9), np.float64))
    p = tiledmm.matmul(a, b, kernel="naive", tile=4)
    assert isinstance(p, torch.Tensor) and p.dtype == torch.float64 and p.device == a.device
    np.testing.assert_allclose(p.numpy(), ref64(a, b), rtol=1e-12)


def test_numba_device_arrays_in_place(rng):
    cuda = _backend.numba_cuda()
    a, b = randn(rng, (4, 6)), randn(rng, (6, 5))
    da, db = cuda.to_device(a), cuda.to_device(b)
    dp = tiledmm.matmul(da, db, kernel="tiled", tile=4)
    assert type(dp) is type(da)
    np.testing.assert_allclose(dp.copy_to_host(), ref64(a, b), rtol=1e-5, atol=1e-5)


def test_non_contiguous_inputs(rng):
    a, b = randn(rng, (7, 5)).T, randn(rng, (9, 7))[::2].T  # transposed and strided views
    assert not a.flags.c_contiguous and not b.flags.c_contiguous
    np.testing.assert_allclose(tiledmm.matmul(a, b, kernel="tiled", tile=4), ref64(a, b), rtol=1e-5, atol=1e-5)
    ta, tb = torch.from_numpy(randn(rng, (6, 4))).T, torch.from_numpy(randn(rng, (3, 6))).T
    np.testing.assert_allclose(tiledmm.matmul(ta, tb, kernel="naive", tile=4).numpy(), ref64(ta, tb),
                               rtol=1e-5, atol=1e-5)


def test_strided_device_view(rng):
    cuda = _backend.numba_cuda()
    big = randn(rng, (8, 8))
    dbig = cuda.to_device(big)
    b = randn(rng, (3, 4))
    p = tiledmm.matmul(dbig[1:6:2, 2:5], cuda.to_device(b), kernel="tiled", tile=2)
    np.testing.assert_allclose(p.copy_to_host(), ref64(big[1:6:2, 2:5], b), rtol=1e-5, atol=1e-5)


def test_out_is_written_and_returned(rng):
    a, b = randn(rng, (5, 4)), randn(rng, (4, 6))
    out = np.full((5, 6), np.nan, np.float32)
    r = tiledmm.matmul(a, b, kernel="tiled", tile=4, out=out)
    assert r is out
    np.testing.assert_allclose(out, ref64(a, b), rtol=1e-5, atol=1e-5)


def test_inputs_are_never_modified(rng):
    a, b = randn(rng, (5, 4)), randn(rng, (4, 6))
    a0, b0 = a.copy(), b.copy()
    for k in ("naive", "tiled"):
        tiledmm.matmul(a, b, kernel=k, tile=2)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


@pytest.mark.parametrize("m,k,n", [(0, 3, 4), (3, 4, 0), (0, 0, 0)])
def test_empty_outputs(m, k, n):
    p = tiledmm.matmul(np.ones((m, k), np.float32), np.ones((k, n), np.float32), kernel="tiled")
    assert p.shape == (m, n)


def test_empty_inner_dimension_gives_zeros():
    p = tiledmm.matmul(torch.ones(3, 0), torch.ones(0, 2), kernel="tiled")
    assert p.shape == (3, 2) and bool((p == 0).all())


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("kernel", ["naive", "tiled"])
def test_nan_and_inf_propagate(kernel, rng):
    a, b = np.abs(randn(rng, (5, 5))) + 0.5, np.abs(randn(rng, (5, 7))) + 0.5
    a[0, 2] = np.nan          # row 0 of P all NaN
    a[3, 1] = np.inf          # row 3: +inf (positive operands)
    b[4, 6] = -np.inf         # column 6: -inf, except NaN where it meets row 0 and inf-inf in row 3
    p = tiledmm.matmul(a, b, kernel=kernel, tile=2)
    ref = ref64(a, b)
    np.testing.assert_array_equal(np.isnan(p), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(p), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(p), np.isneginf(ref))
    fin = np.isfinite(ref)
    assert fin.sum() > 10
    np.testing.assert_allclose(p[fin], ref[fin], rtol=1e-5)


# --- bad input: each message names the shapes / dtypes / choices -------------------------------

def _err(match, *args, **kw):
    with pytest.raises(TiledmmError, match=match):
        tiledmm.matmul(*args, **kw)


def test_inner_dimensions_mismatch():
    _err(r"inner dimensions differ: a is 3x4, b is 5x2", np.ones((3, 4), np.float32), np.ones((5, 2), np.float32))


@pytest.mark.parametrize("shape_a,shape_b", [((), (1, 1)), ((2, 2), ())])
def test_scalars_are_refused(shape_a, shape_b):
    _err(r"at least one dimension.*a: numpy", np.ones(shape_a, np.float32), np.ones(shape_b, np.float32),
         kernel="tiled")


@pytest.mark.parametrize("shape_a,shape_b", [((2, 3, 4), (5, 4, 2)), ((3, 1, 2, 4), (2, 4, 4, 1))])
def test_batch_dimensions_that_do_not_broadcast(shape_a, shape_b):
    _err(r"batch dimensions do not broadcast", np.ones(shape_a, np.float32), np.ones(shape_b, np.float32))


def test_vector_inner_dimension_mismatch():
    _err(r"inner dimensions differ: a is 3, b is 4x2", np.ones(3, np.float32), np.ones((4, 2), np.float32))


@pytest.mark.parametrize("dtype", [np.int32, np.complex64, np.bool_])
def test_unsupported_dtype(dtype):
    _err(r"unsupported dtype", np.ones((2, 2), dtype), np.ones((2, 2), dtype), kernel="tiled")


def test_dtype_not_supported_by_kernel():
    _err(r"'tiled' supports dtypes \['float32', 'float64'\], not float16",
         np.ones((2, 2), np.float16), np.ones((2, 2), np.float16), kernel="tiled")


def test_mixed_dtypes():
    _err(r"mixed dtypes: a: numpy 2x3 float32 on cpu; b: numpy 3x2 float64",
         np.ones((2, 3), np.float32), np.ones((3, 2), np.float64))


def test_different_devices():
    cuda = _backend.numba_cuda()
    _err(r"different array kinds.*b: numba 3x2 float32 on cuda:0", np.ones((2, 3), np.float32),
         cuda.to_device(np.ones((3, 2), np.float32)),
         kernel="tiled")


def test_different_kinds():
    _err(r"different array kinds", np.ones((2, 3), np.float32), torch.ones(3, 2), kernel="tiled")


def test_not_an_array():
    _err(r"unsupported input type builtins.list", [[1.0]], [[1.0]])


def test_unknown_kernel():
    _err(r"unknown kernel 'fast'; choose one of \[.*'naive'.*'tiled'", np.ones((2, 2)), np.ones((2, 2)),
         kernel="fast")


def test_unknown_tile():
    _err(r"supports tile in \[2, 4, 8, 16, 32\], got tile=12", np.ones((2, 2)), np.ones((2, 2)),
         kernel="tiled", tile=12)


def test_unknown_option():
    _err(r"takes no option\(s\) \['variant'\]", np.ones((2, 2)), np.ones((2, 2)), kernel="tiled", variant="tma")
    _err(r"takes no option\(s\) \['precision'\]", np.ones((2, 2)), np.ones((2, 2)), kernel="tiled",
         precision="tf32")


@pytest.mark.parametrize("alpha", [1j, True, "2", None])
def test_alpha_beta_must_be_real(alpha):
    _err(r"alpha must be a real number", np.ones((2, 2)), np.ones((2, 2)), alpha=alpha)
    _err(r"beta must be a real number", np.ones((2, 2)), np.ones((2, 2)), out=np.ones((2, 2)), beta=alpha)


def test_beta_without_out():
    _err(r"beta=0.5 adds beta \* out to the product, so it needs out=", np.ones((2, 3)), np.ones((3, 4)), beta=0.5)


def test_out_with_overlapping_elements():
    t = torch.zeros(1, 4).expand(2, 4)
    _err(r"out has overlapping elements", torch.ones(2, 3), torch.ones(3, 4), out=t)


def test_wrong_out():
    a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    _err(r"out must be a numpy 2x4 array on cpu \(dtype float32.*got out: numpy 4x2", a, b,
         out=np.empty((4, 2), np.float32))
    _err(r"got out: numpy 2x4 int32", a, b, out=np.empty((2, 4), np.int32))
    _err(r"got out: torch 2x4 float32", a, b, out=torch.empty(2, 4))


@pytest.mark.skipif(GPU, reason="the limit applies in emulation only")
def test_emulation_refuses_large_problems_with_a_reason():
    _err(r"100x100 @ 100x100 is 1,000,000 multiply-adds, over the emulation limit.*simulator",
         np.ones((100, 100), np.float32), np.ones((100, 100), np.float32), kernel="tiled")


@pytest.mark.gpu
def test_gpu_torch_cuda_in_place_no_copy():
    a = torch.randn(300, 200, device="cuda")
    b = torch.randn(200, 500, device="cuda")
    out = torch.full((300, 500), float("nan"), device="cuda")
    for k, t in (("naive", 16), ("tiled", 32)):
        r = tiledmm.matmul(a, b, kernel=k, tile=t, out=out)
        assert r is out
        torch.testing.assert_close(out, (a.double() @ b.double()).float(), rtol=1e-4, atol=1e-4)
    # transposed views use strides, no copy
    r = tiledmm.matmul(b.T, a.T, kernel="tiled", tile=16)
    torch.testing.assert_close(r, (b.T.double() @ a.T.double()).float(), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_gpu_cupy_and_numba_kinds():
    cupy = pytest.importorskip("cupy")
    a, b = cupy.random.standard_normal((130, 70), dtype=cupy.float32), cupy.random.standard_normal((70, 90), dtype=cupy.float32)
    p = tiledmm.matmul(a, b, kernel="tiled", tile=16)
    assert isinstance(p, cupy.ndarray)
    np.testing.assert_allclose(p.get(), ref64(a.get(), b.get()), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_gpu_different_devices_error():
    _err(r"different devices", torch.ones(2, 3), torch.ones(3, 2, device="cuda"), kernel="tiled")


def test_nan_and_inf_inputs_leak_no_numpy_warnings_from_the_triton_interpreter():
    """NaN and Inf are legal inputs (they propagate, IEEE): the emulated Triton kernel must not
    print numpy's RuntimeWarnings about them."""
    import warnings
    import numpy as np
    import tiledmm
    a = np.ones((4, 4), np.float32)
    a[0, 0] = np.nan
    b = np.full((4, 4), np.inf, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        c = tiledmm.matmul(a, b, kernel="triton")
    assert np.isnan(c[0]).all() and np.isinf(c[1:]).all()


@pytest.mark.skipif(GPU, reason="the simulator's choice (on a GPU the lectures' tile is the default's)")
def test_emulation_gives_a_tiny_output_the_smallest_lecture_tile_that_holds_it(monkeypatch):
    """In the simulator (a Python thread per CUDA thread) a call without a tile takes the smallest lecture
    tile whose one block holds the output, below the default; a tile asked for is kept, and the sums match."""
    import dataclasses

    from tiledmm import registry
    spec, seen = registry.get("tiled"), []

    def launch(a, b, c, *, tile, opts, **kw):
        seen.append(tile)
        return spec.launch(a, b, c, tile=tile, opts=opts, **kw)
    monkeypatch.setitem(registry._REGISTRY, "tiled", dataclasses.replace(spec, launch=launch))
    assert [spec.emulation_tile(m, n) for m, n in ((1, 1), (2, 1), (3, 5), (8, 8), (9, 2), (40, 40))] == \
        [2, 2, 8, 8, 16, 16]
    # the naive kernel's block (one thread per result) holds TILE x TILE results though its traffic tile is 1 x 1
    naive = registry.get("naive")
    assert [naive.emulation_tile(m, n) for m, n in ((1, 1), (3, 2), (1, 7), (9, 2), (40, 40))] == [2, 4, 8, 16, 16]
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 7, dtype=torch.float64, generator=g), torch.randn(7, 5, dtype=torch.float64, generator=g)
    small = tiledmm.matmul(a, b)
    asked = tiledmm.matmul(a, b, tile=16)
    assert seen == [8, 16]
    assert torch.equal(small, asked) and torch.allclose(small, a @ b, rtol=1e-12, atol=1e-12)
