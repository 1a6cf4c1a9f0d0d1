"""Two GPUs in one process: every kept object -- compiled kernels and their loaded modules, bound and
class launches, TMA descriptors, workspaces, streams -- belongs to one device, and a shape class met
first on one device runs right on the other. Each test needs two GPUs (marked ``multigpu``; run them on
a machine with two or more)."""
import threading

import numpy as np
import pytest

import tiledmm

from .conftest import GPU

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu]

if GPU:
    import torch

    TWO = torch.cuda.device_count() >= 2
else:
    TWO = False
needs_two = pytest.mark.skipif(not TWO, reason="needs two CUDA GPUs")

# (dtype, precision, relative error bound against float64)
DTYPES = (("float32", None, 1e-5), ("float32", "tf32", 5e-3), ("bfloat16", None, 2e-2), ("float16", None, 5e-3))


def _err(c, a, b, alpha=1.0, beta=0.0, c0=None) -> float:
    want = alpha * (a.double().cpu() @ b.double().cpu())
    if beta:
        want += beta * c0.double().cpu()
    return float((c.double().cpu() - want).norm() / want.norm())


def _on_both_devices(work) -> list:
    """Run ``work(dev)`` for devices 0 and 1 in two threads at once; what each raised, as (device, repr)."""
    errors = []

    def run(dev):
        try:
            work(dev)
        except BaseException as e:  # noqa: BLE001
            errors.append((dev, repr(e)))
    threads = [threading.Thread(target=run, args=(d,)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _dt(name):
    return getattr(torch, name)


@needs_two
@pytest.mark.parametrize("dtype,precision,tol", DTYPES)
def test_devices_alternate_in_one_thread(dtype, precision, tol):
    """The issue's loop: shapes of new classes on alternating devices, then the same classes again with
    the devices swapped (each class first seen on the other device); repeat calls take the short path."""
    torch.manual_seed(0)
    for order in ((0, 1), (1, 0), (0, 1)):
        for j in range(12):
            dev = order[j % 2]
            a = torch.randn(64 + 61 * j, 300, device=f"cuda:{dev}", dtype=_dt(dtype))
            b = torch.randn(300, 200, device=f"cuda:{dev}", dtype=_dt(dtype))
            for _ in range(2):                            # the second call: the short path's bound launch
                c = tiledmm.matmul(a, b, precision=precision)
                assert c.device == a.device
                assert _err(c, a, b) < tol, (order, j, dev)


@needs_two
@pytest.mark.parametrize("dtype,precision,tol", DTYPES)
def test_forced_variants_on_both_devices(dtype, precision, tol):
    """Every block variant that can run the call, forced, on device 0 then 1 then 0 (its compiled kernel
    and bound launches made on each), with the GEMM form."""
    from tiledmm.kernels.block import variants as V
    torch.manual_seed(1)
    ran = []
    for v in V.ALL:
        for dev in (0, 1, 0, 1):
            a = torch.randn(384, 256, device=f"cuda:{dev}", dtype=_dt(dtype))
            b = torch.randn(256, 320, device=f"cuda:{dev}", dtype=_dt(dtype))
            c0 = torch.randn(384, 320, device=f"cuda:{dev}", dtype=_dt(dtype))
            c = c0.clone()
            try:
                tiledmm.matmul(a, b, out=c, alpha=1.5, beta=0.5, precision=precision, variant=v.name)
            except tiledmm.TiledmmError as e:
                assert "cannot run this call" in str(e) or "precision" in str(e), (v.name, str(e))
                break
            assert _err(c, a, b, 1.5, 0.5, c0) < tol, (v.name, dev)
            ran.append((v.name, dev))
    assert len({name for name, _ in ran}) >= 3, ran


@needs_two
def test_one_thread_per_device():
    """The way a process drives several GPUs: a thread per device, started together, each with its own
    current device, meeting the same shape classes at the same time."""
    barrier = threading.Barrier(2)
    results = {}

    def work(dev: int) -> None:
        torch.cuda.set_device(dev)
        g = torch.Generator(device=f"cuda:{dev}").manual_seed(dev)
        barrier.wait()
        for dtype, precision, tol in DTYPES:
            for j in range(8):
                a = torch.randn(96 + 131 * j, 512, device=f"cuda:{dev}", dtype=_dt(dtype), generator=g)
                b = torch.randn(512, 384, device=f"cuda:{dev}", dtype=_dt(dtype), generator=g)
                for _ in range(3):
                    c = tiledmm.matmul(a, b, precision=precision)
                torch.cuda.synchronize(dev)
                results[(dev, dtype, precision, j)] = (_err(c, a, b), tol)

    assert not _on_both_devices(work)
    bad = {k: v for k, v in results.items() if not v[0] < v[1]}
    assert len(results) == 2 * 4 * 8 and not bad, bad


@needs_two
def test_replicated_model_under_enable_on_two_devices_at_once():
    """One model replicated on cuda:0 and cuda:1, forward and backward under ``tiledmm.enable()`` in two
    threads at once: the outputs and gradients match torch's on each device."""
    torch.manual_seed(2)
    base = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 128))
    x_cpu = torch.randn(64, 256)
    out = {}

    def work(dev: int) -> None:
        torch.cuda.set_device(dev)
        model = _copy(base).to(f"cuda:{dev}")
        ref = _copy(base).to(f"cuda:{dev}")
        x = x_cpu.to(f"cuda:{dev}")
        with tiledmm.enable() as mode:
            for _ in range(3):
                model.zero_grad()
                y = model(x)
                y.square().sum().backward()
        y_ref = ref(x)
        y_ref.square().sum().backward()
        out[dev] = (float((y - y_ref).norm() / y_ref.norm()),
                    float((model[0].weight.grad - ref[0].weight.grad).norm() / ref[0].weight.grad.norm()),
                    sum(c["tiledmm"] for c in mode.summary()["calls"].values()))

    assert not _on_both_devices(work)
    for dev in (0, 1):
        y_err, g_err, routed = out[dev]
        assert routed >= 6 and y_err < 1e-4 and g_err < 1e-4, (dev, out[dev])


def _copy(module):
    import copy
    return copy.deepcopy(module)


@needs_two
def test_cuda_graph_captured_on_the_second_device():
    """A class first run on cuda:0, then captured in a CUDA graph on cuda:1 and replayed there with new
    inputs."""
    for precision, dtype, tol in ((None, torch.bfloat16, 2e-2), ("tf32", torch.float32, 5e-3)):
        a0 = torch.randn(512, 384, device="cuda:0", dtype=dtype)
        b0 = torch.randn(384, 256, device="cuda:0", dtype=dtype)
        tiledmm.matmul(a0, b0, precision=precision)
        with torch.cuda.device(1):
            a = torch.randn(512, 384, device="cuda:1", dtype=dtype)
            b = torch.randn(384, 256, device="cuda:1", dtype=dtype)
            tiledmm.matmul(a, b, precision=precision)          # warm-up on this device
            torch.cuda.synchronize()
            s = torch.cuda.Stream()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                c = tiledmm.matmul(a, b, precision=precision)
            for _ in range(3):
                a.normal_()
                b.normal_()
                g.replay()
                torch.cuda.synchronize()
                assert _err(c, a, b) < tol, precision


@needs_two
def test_out_of_core_on_the_second_device():
    """Host operands with cuda:1 current, and a device budget that forces the out-of-core path: the
    blocks run on cuda:1, the result is right."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((700, 500)).astype(np.float32)
    b = rng.standard_normal((500, 600)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    before = torch.cuda.max_memory_allocated(1)
    torch.cuda.reset_peak_memory_stats(1)
    with torch.cuda.device(1):
        c = tiledmm.matmul(a, b, max_device_bytes=1 << 20)
    assert np.linalg.norm(c - want) / np.linalg.norm(want) < 1e-5
    assert torch.cuda.max_memory_allocated(1) > 0 or before > 0


@needs_two
def test_cupy_short_path_on_the_second_device():
    cupy = pytest.importorskip("cupy")
    for dev in (0, 1, 1, 0):
        with cupy.cuda.Device(dev), torch.cuda.device(dev):
            a = cupy.random.standard_normal((300, 200), dtype=cupy.float32)
            b = cupy.random.standard_normal((200, 100), dtype=cupy.float32)
            for _ in range(3):                      # the second and third: the short path
                c = tiledmm.matmul(a, b)
                assert c.device.id == dev
                want = cupy.asnumpy(a).astype(np.float64) @ cupy.asnumpy(b).astype(np.float64)
                assert np.linalg.norm(cupy.asnumpy(c) - want) / np.linalg.norm(want) < 1e-5


@needs_two
def test_numba_short_path_on_the_second_device():
    from numba import cuda
    rng = np.random.default_rng(4)
    for dev in (0, 1, 1, 0):
        with torch.cuda.device(dev):
            torch.empty(1, device=f"cuda:{dev}")         # the device's primary context, current
            x, y = rng.standard_normal((300, 200)).astype(np.float32), rng.standard_normal((200, 100)).astype(np.float32)
            a, b = cuda.to_device(x), cuda.to_device(y)
            want = x.astype(np.float64) @ y.astype(np.float64)
            for _ in range(3):
                c = tiledmm.matmul(a, b)
                got = c.copy_to_host()
                assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5, dev
