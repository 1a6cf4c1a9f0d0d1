"""Shared state under threads: 32 threads on fresh shapes with a 1 us switch interval, tuning off
and on (CPU through the interpreter; the same on the GPU), and the pieces that were unsafe --
FastKernel's argument template, first launches, the kept-bytes cap, kmajor_cache's LRU."""
import sys
import threading

import numpy as np
import pytest
import torch

import tiledmm
from tiledmm import _adapter, tuning
from tiledmm.kernels.block import fastlaunch, kmajor_cache

from . import standins

THREADS = 32


@pytest.fixture
def switchy():
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.fixture(params=["off", "on"])
def tune(request):
    before = tuning.mode()
    tuning.set_mode(request.param)
    yield request.param
    tuning.set_mode(before)


def _together(work, n=THREADS):
    """Run work(i) on n threads released at once; the exceptions they raised."""
    errors, start = [], threading.Barrier(n)

    def run(i):
        try:
            start.wait()
            work(i)
        except BaseException as e:   # noqa: BLE001  (reported by the test)
            errors.append(e)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _check(dev, dtype, tol, shapes_of):
    def work(i):
        M, K, N = shapes_of(i)
        a = torch.randn(M, K, device=dev, dtype=dtype)
        b = torch.randn(K, N, device=dev, dtype=dtype)
        for _ in range(2):
            c = tiledmm.matmul(a, b)
            ref = a.double() @ b.double()
            err = ((c.double() - ref).norm() / ref.norm()).item()
            assert err < tol, (M, K, N, err)
    return work


@pytest.mark.slow
def test_threads_on_fresh_shapes_through_the_api(switchy, tune):
    """32 threads, each its own never-seen shape (new shape classes and new sizes of one class)."""
    errors = _together(_check("cpu", torch.float32, 1e-5, lambda i: (3 + i, 5 + (i * 7) % 13, 4 + (i * 3) % 11)))
    assert not errors, errors[:3]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_gpu_threads_on_fresh_shapes_through_the_api(switchy, tune, dtype, tol):
    """The same on the GPU: 32 threads, fresh shapes (classes and sizes within them), right answers."""
    errors = _together(_check("cuda", dtype, tol, lambda i: (64 + 37 * i, 96 + 16 * (i % 5), 80 + 24 * (i % 7))))
    assert not errors, errors[:3]


def _standin_kernel():
    def kernel(a_ptr, b_ptr, c_ptr, M, BLOCK: "constexpr", alpha):   # noqa: F821  (only its signature is read)
        pass

    class JIT:
        fn = kernel
    return JIT


def test_fastkernel_never_hands_out_a_half_built_argument_list(switchy):
    """A fresh FastKernel's argument list built by 8 threads at once, 500 times: never a None where a
    runtime argument goes (the template used to be published before its slots: 244 of 2,000 bad)."""
    a, b, c = (torch.empty(4) for _ in range(3))
    bad = []

    def build(fk):
        full = fk._full((a, b, c, 17, 1.0))
        if None in full or full[3] != 17 or full[4] != 64:
            bad.append(full)
    for _ in range(500):
        fk = fastlaunch.FastKernel(_standin_kernel(), {"BLOCK": 64}, 4, 3)
        assert not _together(lambda i: build(fk), n=8)
    assert not bad


def test_first_launches_compile_once_under_the_lock(switchy, monkeypatch):
    import time
    monkeypatch.setattr(_adapter, "_direct", True)
    monkeypatch.setattr(fastlaunch, "current_stream", lambda: 5)
    a, b, c = (torch.empty(4) for _ in range(3))
    compiles, runs = [], []

    class Compiled:
        function, packed_metadata = "fn", "meta"
        run = staticmethod(lambda *args: runs.append(args))

    def slow(grid, args):
        compiles.append(1)
        time.sleep(0.01)                   # a compile takes a while: the others must wait, not compile
        return Compiled()
    fk = fastlaunch.FastKernel(_standin_kernel(), {"BLOCK": 64}, 4, 3)
    fk.direct = True
    fk._slow = slow
    assert not _together(lambda i: fk((1,), a, b, c, 17, 1.0))
    assert len(compiles) == 1 and len(runs) == THREADS - 1     # each thread launched exactly once


def test_kept_bytes_cap_holds_when_threads_bind_together(switchy, monkeypatch):
    """WORKSPACE binds from 32 threads: the kept private buffers never pass MAX_KEPT_BYTES."""
    monkeypatch.setattr(_adapter, "_direct", True)
    monkeypatch.setattr(fastlaunch, "current_stream", lambda: 5)
    monkeypatch.setattr(fastlaunch, "_kept", [])
    monkeypatch.setattr(fastlaunch, "_kept_bytes", 0)
    monkeypatch.setattr(fastlaunch, "MAX_KEPT_BYTES", 10 * 4096)
    monkeypatch.setattr(fastlaunch, "_scratch", lambda n: torch.empty(n, dtype=torch.int8))   # CPU stand-in

    ck = standins.Compiled(standins.Launcher())
    fk = fastlaunch.FastKernel(_standin_kernel(), {"BLOCK": 64}, 4, 3)
    fk.direct = True
    fk._slow = lambda grid, args: ck

    def split(x, y, z, *, alpha):
        ws = torch.empty(1024)                       # 4 KiB private buffer per bind
        fk((1,), x, y, ws, 17, alpha)
    split.replayable = fastlaunch.WORKSPACE
    bound = []

    def work(i):
        a, b, c = (torch.empty(4) for _ in range(3))
        bound.append(fastlaunch.replay(split, a, b, c, alpha=1.0))
    assert not _together(work)
    assert fastlaunch._kept_bytes <= fastlaunch.MAX_KEPT_BYTES
    assert sum(g is not None for g in bound) == 10 and fastlaunch._kept_bytes == 10 * 4096


def test_kmajor_cache_under_threads(switchy, monkeypatch):
    """32 threads copying and evicting through the LRU: no error, the capacity holds, every copy right."""
    monkeypatch.setattr(kmajor_cache, "k_major", lambda t, dim: t.t().contiguous().t())
    monkeypatch.setattr(kmajor_cache, "MAX_ENTRIES", 4)
    kmajor_cache.clear()
    weights = [torch.randn(8, 6) for _ in range(12)]

    def work(i):
        for j in range(40):
            w = weights[(i + j) % len(weights)]
            k = kmajor_cache.kmajor(w)
            assert k.stride() == (1, 8) and torch.equal(k, w)
    assert not _together(work)
    assert len(kmajor_cache._cache) <= 4
    kmajor_cache.clear()


def test_device_properties_read_once_per_index_under_threads(switchy, monkeypatch):
    from tiledmm.analysis import device
    monkeypatch.setattr(device, "_known", {})
    reads = []
    monkeypatch.setattr(device, "_read", lambda i: reads.append(i) or device.emulated(i))
    got = []
    assert not _together(lambda i: got.append(device.properties(i % 2)))
    assert sorted(reads) == [0, 1] and len({id(p) for p in got}) == 2


def test_numpy_threads_share_nothing_mutable(switchy):
    """Host arrays from many threads: each gets its own right product (the full path's state)."""
    rng = np.random.default_rng(0)
    mats = [(rng.standard_normal((4 + i % 5, 3)).astype(np.float32),
             rng.standard_normal((3, 2 + i % 4)).astype(np.float32)) for i in range(THREADS)]

    def work(i):
        a, b = mats[i]
        np.testing.assert_allclose(tiledmm.matmul(a, b, kernel="triton"), a @ b, rtol=1e-5, atol=1e-5)
    assert not _together(work)
