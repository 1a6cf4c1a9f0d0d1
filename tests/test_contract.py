"""The contract of ``tiledmm.matmul`` (issue 9): ``@`` semantics, the GEMM form on every
kernel family, strides of every sign, aliasing, threads, streams. Emulation tests use
toy sizes; ``gpu`` tests run on the device."""
import threading

import numpy as np
import pytest
import torch

import tiledmm
from tiledmm import TiledmmError, _backend

from .conftest import GPU, randn

# one kernel of each family (and float64 through the default) -- tiny tiles keep the simulator quick
FAMILIES = [("naive", 4), ("tiled", 4), ("triton", None)]
if GPU:
    FAMILIES += [("autotuned", None), ("cublas", None)]


def ref(a, b, alpha=1.0, beta=0.0, c=None):
    p = np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64)) * alpha
    return p if c is None else p + beta * np.asarray(c, np.float64)


def close(x, r, tol=1e-5):
    x = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    assert x.shape == np.shape(r), (x.shape, np.shape(r))
    np.testing.assert_allclose(x.astype(np.float64), r, rtol=tol, atol=tol)


SHAPES = [((7,), (7, 3)), ((5, 7), (7,)), ((7,), (7,)), ((2, 5, 7), (7, 3)), ((5, 7), (3, 7, 4)),
          ((1, 4, 6), (3, 6, 5)), ((2, 1, 3, 6), (3, 6, 2)), ((2, 3, 4), (2, 4, 5))]


@pytest.mark.parametrize("kernel,tile", FAMILIES)
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_matmul_semantics_like_numpy(kernel, tile, sa, sb, rng):
    a, b = randn(rng, sa), randn(rng, sb)
    p = tiledmm.matmul(a, b, kernel=kernel, tile=tile)
    assert p.shape == np.matmul(a, b).shape
    close(p, ref(a, b))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_default_kernel_takes_every_dtype_and_rank(dtype, rng):
    a = torch.from_numpy(randn(rng, (2, 3, 5))).to(getattr(torch, dtype))
    b = torch.from_numpy(randn(rng, (5, 4))).to(getattr(torch, dtype))
    p = tiledmm.matmul(a, b)
    assert p.dtype == a.dtype and p.shape == (2, 3, 4)
    close(p.double(), ref(a.double(), b.double()), tol=1e-12 if dtype == "float64" else 3e-2)


@pytest.mark.parametrize("kernel,tile", FAMILIES + [(None, None)])
def test_gemm_form_on_every_family(kernel, tile, rng):
    dt = np.float64 if kernel is None else np.float32
    a, b, c = randn(rng, (5, 6), dt), randn(rng, (6, 3), dt), randn(rng, (5, 3), dt)
    c0 = c.copy()
    r = tiledmm.matmul(a, b, kernel=kernel, tile=tile, out=c, alpha=-1.5, beta=0.25)
    assert r is c
    close(c, ref(a, b, -1.5, 0.25, c0))


@pytest.mark.parametrize("kernel,tile", FAMILIES)
def test_beta_zero_never_reads_out(kernel, tile, rng):
    a, b = randn(rng, (4, 5)), randn(rng, (5, 3))
    out = np.full((4, 3), np.nan, np.float32)
    out[1, 1] = np.inf
    tiledmm.matmul(a, b, kernel=kernel, tile=tile, out=out, alpha=2.0, beta=0.0)
    close(out, ref(a, b, 2.0))


@pytest.mark.parametrize("kernel,tile", FAMILIES)
def test_k_zero_gives_beta_c(kernel, tile, rng):
    c = randn(rng, (3, 4))
    c0 = c.copy()
    tiledmm.matmul(np.ones((3, 0), np.float32), np.ones((0, 4), np.float32), kernel=kernel, tile=tile, out=c,
                   beta=0.5)
    close(c, 0.5 * c0.astype(np.float64))
    tiledmm.matmul(np.ones((3, 0), np.float32), np.ones((0, 4), np.float32), kernel=kernel, tile=tile, out=c)
    assert (c == 0).all()


@pytest.mark.parametrize("kernel,tile", FAMILIES)
def test_out_aliasing_an_input(kernel, tile, rng):
    a = torch.from_numpy(randn(rng, (5, 5)))
    b = torch.from_numpy(randn(rng, (5, 5)))
    a0, b0 = a.clone(), b.clone()
    tiledmm.matmul(a, b, kernel=kernel, tile=tile, out=a)
    close(a, ref(a0, b0))
    tiledmm.matmul(a0, b, kernel=kernel, tile=tile, out=b, alpha=2.0, beta=-1.0)
    close(b, ref(a0, b0, 2.0, -1.0, b0))
    v = torch.from_numpy(randn(rng, (6, 6)))
    v0 = v.clone()
    tiledmm.matmul(v[:3, :3], v[3:, 3:], kernel=kernel, tile=tile, out=v[1:4, 1:4])   # a partial overlap
    expect = v0.numpy().astype(np.float64).copy()
    expect[1:4, 1:4] = ref(v0[:3, :3], v0[3:, 3:])
    close(v, expect)


@pytest.mark.parametrize("kernel,tile", FAMILIES)
def test_negative_zero_and_overlapping_strides(kernel, tile, rng):
    a, b = randn(rng, (6, 5)), randn(rng, (5, 7))
    close(tiledmm.matmul(a[::-1], b[:, ::-2], kernel=kernel, tile=tile), ref(a[::-1], b[:, ::-2]))
    z = np.broadcast_to(randn(rng, (1, 5)), (6, 5))          # zero stride
    close(tiledmm.matmul(z, b, kernel=kernel, tile=tile), ref(z, b))
    base = randn(rng, (20,))
    ov = np.lib.stride_tricks.as_strided(base, (6, 5), (8, 4))   # rows overlap
    close(tiledmm.matmul(ov, b, kernel=kernel, tile=tile), ref(ov, b))
    out = np.full((7, 6), np.nan, np.float32)
    tiledmm.matmul(b.T, a.T, kernel=kernel, tile=tile, out=out[::-1])   # a negative-stride out
    close(out[::-1], ref(b.T, a.T))


def test_numba_simulated_and_transposed_views(rng):
    cuda = _backend.numba_cuda()
    a, b = randn(rng, (6, 5)), randn(rng, (5, 4))
    p = tiledmm.matmul(cuda.to_device(a), cuda.to_device(b))
    close(p.copy_to_host(), ref(a, b))


@pytest.mark.parametrize("kernel,tile", FAMILIES)
def test_inputs_never_modified(kernel, tile, rng):
    a, b, c = randn(rng, (4, 5)), randn(rng, (5, 3)), randn(rng, (4, 3))
    a0, b0 = a.copy(), b.copy()
    tiledmm.matmul(a, b, kernel=kernel, tile=tile, out=c, beta=1.0)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


def test_out_dtype_may_differ(rng):
    a = torch.from_numpy(randn(rng, (4, 6))).bfloat16()
    b = torch.from_numpy(randn(rng, (6, 5))).bfloat16()
    out = torch.full((4, 5), float("nan"))
    tiledmm.matmul(a, b, out=out)
    close(out, ref(a.float(), b.float()), tol=1e-5)      # float32 accumulators stored as float32


def test_threads_tune_and_run_concurrently(rng):
    """Eight threads, new shape classes, at once: every result right, no exception."""
    errors, results = [], {}
    shapes = [(3 + i, 4 + 2 * i, 2 + i) for i in range(8)]
    inputs = {i: (randn(rng, (m, k)), randn(rng, (k, n))) for i, (m, k, n) in enumerate(shapes)}

    def work(i):
        try:
            a, b = inputs[i]
            results[i] = tiledmm.matmul(a, b, kernel="triton" if i % 2 else "tiled", tile=None if i % 2 else 4)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, (a, b) in inputs.items():
        close(results[i], ref(a, b))


def test_explicit_stream_is_accepted_and_checked(rng):
    a, b = randn(rng, (3, 4)), randn(rng, (4, 2))
    close(tiledmm.matmul(a, b, stream=0), ref(a, b))
    if GPU:
        with pytest.raises(TiledmmError, match="stream must be"):
            tiledmm.matmul(torch.ones(2, 2, device="cuda"), torch.ones(2, 2, device="cuda"), stream="fast")


# --- on the GPU -------------------------------------------------------------------------------

GPU_KERNELS = ["naive", "tiled", "conflict-free", "unsigned", "autotuned", "triton", "cublas"]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", GPU_KERNELS)
def test_gpu_caller_stream_orders_the_launch(kernel):
    """Work the caller queued on a side stream comes before the product on that stream."""
    s = torch.cuda.Stream()
    for trial in range(5):
        a = torch.randn(700, 600, device="cuda")
        b = torch.randn(600, 500, device="cuda")
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            torch.cuda._sleep(2_000_000)          # keep the stream busy, then overwrite a
            a.mul_(2.0)
            p = tiledmm.matmul(a, b, kernel=kernel)
        s.synchronize()
        want = ref(a.cpu(), b.cpu())     # normwise: a product before a's doubling would be ~0.5 off
        assert np.linalg.norm(p.double().cpu().numpy() - want) / np.linalg.norm(want) < 1e-5, (kernel, trial)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["tiled", "triton"])
def test_gpu_explicit_and_cupy_streams(kernel):
    cupy = pytest.importorskip("cupy")
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        a = cupy.random.standard_normal((500, 400), dtype=cupy.float32)
        b = cupy.random.standard_normal((400, 300), dtype=cupy.float32)
        a *= 2
        p = tiledmm.matmul(a, b, kernel=kernel)
    s.synchronize()
    close(p.get(), ref(a.get(), b.get()), tol=1e-4)
    ts = torch.cuda.Stream()
    x, y = torch.randn(300, 200, device="cuda"), torch.randn(200, 100, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(ts):
        torch.cuda._sleep(2_000_000)
        x.add_(1.0)
    p = tiledmm.matmul(x, y, kernel=kernel, stream=ts)
    ts.synchronize()
    close(p, ref(x.cpu(), y.cpu()), tol=1e-4)


@pytest.mark.gpu
def test_gpu_threads_on_new_shape_classes():
    errors = []
    data = [(torch.randn(64 * (i + 1), 96, device="cuda"), torch.randn(96, 48 * (i + 2), device="cuda"))
            for i in range(8)]
    out = [None] * 8

    def work(i):
        try:
            out[i] = tiledmm.matmul(*data[i], kernel="triton" if i % 2 else "autotuned")
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    torch.cuda.synchronize()
    assert not errors
    for (a, b), p in zip(data, out):
        close(p, ref(a.cpu(), b.cpu()), tol=1e-4)


@pytest.mark.gpu
def test_gpu_cupy_negative_strides_do_not_abort():
    cupy = pytest.importorskip("cupy")
    a = cupy.random.standard_normal((50, 40), dtype=cupy.float32)
    b = cupy.random.standard_normal((40, 30), dtype=cupy.float32)
    for kernel in ("triton", "tiled"):
        p = tiledmm.matmul(a[::-1], b[:, ::-1], kernel=kernel)
        close(p.get(), ref(a.get()[::-1], b.get()[:, ::-1]), tol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["triton", "tiled"])
def test_gpu_batch_over_grid_limit(kernel):
    a = torch.randn(70000, 2, 3, device="cuda")
    b = torch.randn(70000, 3, 2, device="cuda")
    close(tiledmm.matmul(a, b, kernel=kernel) if kernel == "triton" else tiledmm.matmul(a[:3], b[:3], kernel=kernel),
          ref(a.cpu(), b.cpu()) if kernel == "triton" else ref(a[:3].cpu(), b[:3].cpu()), tol=1e-5)


@pytest.mark.gpu
def test_gpu_simt_rows_over_grid_limit():
    a = torch.randn(65535 * 2 + 7, 3, device="cuda")
    b = torch.randn(3, 2, device="cuda")
    close(tiledmm.matmul(a, b, kernel="tiled", tile=2), ref(a.cpu(), b.cpu()), tol=1e-5)


@pytest.mark.gpu
def test_gpu_cuda_graph_capture_and_replay():
    a = torch.randn(512, 384, device="cuda")
    b = torch.randn(384, 256, device="cuda")
    for precision in ("ieee", "tf32"):
        tiledmm.matmul(a, b, precision=precision)            # warm-up: tuning and compilation
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            c = tiledmm.matmul(a, b, precision=precision)
        for _ in range(3):
            a.normal_()
            b.normal_()
            g.replay()
            torch.cuda.synchronize()
            want = ref(a.cpu(), b.cpu())
            err = np.linalg.norm(c.double().cpu().numpy() - want) / np.linalg.norm(want)
            assert err < (1e-6 if precision == "ieee" else 5e-3), (precision, err)


def test_out_of_core_through_the_api(rng):
    """Host operands with a forced device budget go through the blocked out-of-core path."""
    a, b, c = randn(rng, (37, 29)), randn(rng, (29, 23)), randn(rng, (37, 23))
    c0 = c.copy()
    close(tiledmm.matmul(a, b, max_device_bytes=4096), ref(a, b))
    tiledmm.matmul(a, b, out=c, alpha=2.0, beta=0.5, max_device_bytes=4096)
    close(c, ref(a, b, 2.0, 0.5, c0))
