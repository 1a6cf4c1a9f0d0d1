"""Lean dispatch on the CPU: the registry carries everything about a kernel, tuned
choices persist across processes, plans are reused, one timing method."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import tiledmm
from tiledmm import _backend, registry, tuning

from .conftest import GPU
from . import standins

DEVICE = _backend.torch_device()


def test_every_kernel_spec_is_complete():
    for spec in registry.all_specs():
        assert callable(spec.launch) and spec.dtypes and spec.block_tile is not None
        if spec.family == "simt":
            assert spec.make is not None and spec.launch_config is not None and spec.barriers_per_phase >= 1
            tile = spec.default_tile
            grid, block = spec.launch_config(tile, 100, 50, 70)
            assert all(g >= 1 for g in grid) and 1 <= int(np.prod(block)) <= 1024


def _python(*lines: str) -> list[str]:
    """The stdout lines of a fresh Python process running ``lines`` (what a new program imports)."""
    env = dict(os.environ, TILEDMM_QUIET="1")
    return subprocess.run([sys.executable, "-c", "\n".join(lines)], env=env, capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()


def test_kernels_do_not_import_the_harness():
    out = _python("import sys, tiledmm, tiledmm.registry as r; r.names()", "print('tiledmm.harness' in sys.modules)")
    assert out[-1] == "False"


def test_the_triton_spec_checks_a_call_without_importing_triton():
    # the family registers its name, dtypes, options and precision check; Triton loads at the launch
    out = _python("import sys, tiledmm",
                  "from tiledmm import registry",
                  "s = registry.get('triton')",
                  "s.check_call('float32', {'precision': 'tf32'}); s.check_tile(None)",
                  "s.check_options('float32', {'precision': 'tf32'})",
                  "try:",
                  "    s.check_options('bfloat16', {'precision': 'tf32'})",
                  "except tiledmm.TiledmmError as e:",
                  "    print('error:', e)",
                  "print('triton' in sys.modules, 'tiledmm.kernels.block.dispatch' in sys.modules, s.preload is not None)")
    assert out[-2].startswith("error: precision 'tf32' is not available for bfloat16")
    assert out[-1] == "False False True"


def test_host_operands_load_the_triton_family_in_a_thread():
    out = _python("import threading, numpy as np, tiledmm",
                  "from tiledmm import registry",
                  "load, seen = registry.get('triton').preload, []",
                  "registry.amend('triton', preload=lambda: (seen.append(threading.current_thread().name), load()))",
                  "a, b = np.random.rand(33, 17).astype(np.float32), np.random.rand(17, 9).astype(np.float32)",
                  "c = tiledmm.matmul(a, b)",
                  "[t.join() for t in threading.enumerate() if t.name == 'tiledmm-preload']",
                  "spec = registry.get('triton')",
                  "print(seen, np.allclose(c, a @ b, rtol=1e-5), spec.preload is None, spec.launch.__module__)")
    seen, ok, loaded, module = out[-1].rsplit(" ", 3)
    assert seen == "['tiledmm-preload']" and ok == "True" and loaded == "True"
    assert module in ("tiledmm.kernels.block.dispatch", "tiledmm.kernels.block")   # emulation wraps the launch


def test_a_preload_that_fails_is_left_for_the_launch(monkeypatch):
    from types import SimpleNamespace
    import threading
    from tiledmm import api
    hooked = []
    monkeypatch.setattr(threading, "excepthook", lambda args: hooked.append(args.exc_value))
    ran = threading.Event()

    def broken():
        ran.set()
        raise ImportError("no triton here")
    api._preload(SimpleNamespace(preload=broken))
    assert ran.wait(10)
    for t in threading.enumerate():
        if t.name == "tiledmm-preload":
            t.join(10)
    assert hooked == []


def test_the_registered_spec_launches_before_and_after_its_family_loads():
    import tiledmm.kernels.block as blk
    a, b = torch.randn(20, 12, device=DEVICE), torch.randn(12, 7, device=DEVICE)
    for spec in (blk.SPEC, registry.get("triton")):            # as registered (light), as amended by the load
        c = torch.full((20, 7), float("nan"), device=DEVICE)
        spec.launch(a, b, c, tile=None, opts={"precision": "ieee"})
        torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)
    assert registry.get("triton").preload is None and blk.load() is registry.get("triton")


def test_concurrent_loads_leave_one_amended_spec_registered():
    # the preload thread and the launch both load the family: one amends, both get the spec registered
    out = _python("import threading, tiledmm",
                  "from tiledmm import registry",
                  "import tiledmm.kernels.block as blk",
                  "gate, got = threading.Barrier(4), []",
                  "def go():",
                  "    gate.wait(); got.append(blk.load())",
                  "ts = [threading.Thread(target=go) for _ in range(4)]",
                  "[t.start() for t in ts]; [t.join() for t in ts]",
                  "spec = registry.get('triton')",
                  "print(len(got), all(s is spec for s in got), blk.load() is spec, spec.preload is None)")
    assert out[-1] == "4 True True True"


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
    from tiledmm.kernels.block import dispatch as m
    dev = "cuda" if GPU else "cpu"
    a, b = torch.randn(20, 30, device=dev), torch.randn(30, 10, device=dev)
    tiledmm.matmul(a, b)
    n = len(m._plans)
    tiledmm.matmul(torch.randn(21, 31, device=dev), torch.randn(31, 11, device=dev))   # same shape class
    assert len(m._plans) == n
    tiledmm.matmul(torch.randn(200, 30, device=dev), torch.randn(30, 10, device=dev))  # another class
    assert len(m._plans) == n + 1


class _Clock:
    """A host clock that moves only when a call says so (``timing`` reads ``time.perf_counter`` alone): the
    timing methods' arithmetic is checked exactly, never against how long the machine happened to take."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def _clock(monkeypatch) -> _Clock:
    from tiledmm import timing
    clock = _Clock()
    monkeypatch.setattr(timing, "time", clock)
    return clock


@pytest.mark.skipif(GPU, reason="host-clock timing (emulation); the GPU's event timing is tested below")
def test_timing_measures_what_the_calls_take(monkeypatch):
    """Calls that take known times on a clock the test moves: each method calls what it should, in
    order, and gives the median per call in its unit (a clock read in the wrong place, a wrong count
    or a wrong unit fails)."""
    from tiledmm import timing
    clock, log = _clock(monkeypatch), []

    def taking(ms, name):
        def call():
            log.append(name)
            clock.now += ms / 1e3
        return call

    # time_calls: one call a repeat, rotating over the input sets; the median in milliseconds
    assert timing.time_calls([taking(1.0, "a"), taking(5.0, "b"), taking(2.0, "c")], batches=3) == pytest.approx(2.0)
    assert log == ["a", "b", "c"]
    log.clear()
    assert timing.time_calls(taking(4.0, "x"), batches=5) == pytest.approx(4.0) and log == ["x"] * 5
    # device_and_host in emulation: the host clock for both
    log.clear()
    assert timing.device_and_host([taking(3.0, "a"), taking(1.0, "b")], batches=2) == pytest.approx((2.0, 2.0))
    # wall_us_per_call: warm-up calls untimed, then ``repeats`` rounds of ``n`` calls; the median round's
    # microseconds per call
    per_round = iter([10_000.0] + [0.2] * 5 + [0.3] * 5 + [0.25] * 5)     # ms: one warm-up, three rounds
    log.clear()

    def varying():
        log.append("w")
        clock.now += next(per_round) / 1e3
    assert timing.wall_us_per_call(varying, n=5, warmup=1, repeats=3) == pytest.approx(250.0)
    assert len(log) == 1 + 3 * 5
    with pytest.raises(ValueError):
        timing.time_calls([])
    with pytest.raises(ValueError):
        timing.device_and_host([])


def _recorded_sleeps(monkeypatch) -> list:
    """The GPU sleeps device_and_host queues (in cycles), each still slept for real."""
    from tiledmm import timing
    sleeps, real = [], timing._adapter.gpu_sleep

    def sleep(cycles):
        sleeps.append(cycles)
        real(cycles)
    monkeypatch.setattr(timing._adapter, "gpu_sleep", sleep)
    return sleeps


def _batch_calls(cycles: int, host_s: float) -> int:
    """The batch size a sleep of ``cycles`` was sized for: sleep_s = 1.5 x calls x host_s + 50 us."""
    n = (cycles / 2e9 - 50e-6) / (1.5 * host_s)
    assert abs(n - round(n)) < 1e-3, (cycles, n)
    return round(n)


@pytest.mark.gpu
def test_device_and_host_keeps_a_slow_launch_path_out_of_the_gpu_time(monkeypatch):
    """A small kernel behind 200 us of host work a call (on the test's clock): device_and_host reports
    that host time per call, and queues each batch once behind a GPU sleep sized from it (1.5 x the
    batch's host time + 50 us), so the events see the kernels back to back, not the host."""
    from tiledmm import timing
    clock, sleeps = _clock(monkeypatch), _recorded_sleeps(monkeypatch)
    x = torch.randn(1024, device="cuda")
    count = [0]

    def call():
        count[0] += 1
        clock.now += 200e-6
        x.mul_(1.0)
    gpu, host = timing.device_and_host(call, batches=3, warmup=1)
    assert host == pytest.approx(0.2)
    assert len(sleeps) == 3 and len(set(sleeps)) == 1, sleeps            # one sleep a batch: none queued again
    n = _batch_calls(sleeps[0], 200e-6)
    # warm-up, host estimate, batch size (one call, then three), batches
    assert 3 <= n <= 500 and count[0] == 1 + 3 + 1 + 3 + 3 * n, (n, count)
    assert 0 < gpu < float("inf")


@pytest.mark.gpu
def test_device_and_host_sleeps_longer_when_the_host_turns_slow(monkeypatch):
    """The sleep is sized from the first calls' host time; calls that then turn slow (a cold host, a busy
    one) outlast it, and the batch is queued again behind a longer sleep (twice the batch's host time
    + 50 us), which later batches keep: the GPU time stays the kernel's, not the host's."""
    from tiledmm import timing
    clock, sleeps = _clock(monkeypatch), _recorded_sleeps(monkeypatch)
    x = torch.randn(1024, device="cuda")
    count = [0]

    def call():
        count[0] += 1
        if count[0] > 4:                   # warm-up and the host estimate fast, the batches slow
            clock.now += 200e-6
        x.mul_(1.0)
    gpu, host = timing.device_and_host(call, batches=2, warmup=1)
    assert host == pytest.approx(0.2)
    assert len(sleeps) == 3 and sleeps[0] == int(2e9 * 50e-6), sleeps     # sized from a host estimate of 0
    assert sleeps[1] == sleeps[2] > sleeps[0], sleeps                      # batch 0 again, then kept
    n = round((sleeps[1] / 2e9 - 50e-6) / (2 * 200e-6))
    # (int() of a product of sums of the stand-in clock's float steps: within 2 of the exact value)
    assert abs(sleeps[1] - 2e9 * (2 * n * 200e-6 + 50e-6)) <= 2 and count[0] == 1 + 3 + 1 + 3 + 3 * n, (n, count)
    assert 0 < gpu < float("inf")


# -- the short path's bound launches (GPU) ---------------------------------------------------------

def _rel(x, ref) -> float:
    return ((x.double() - ref).norm() / ref.norm()).item()


def _model_config(v, precision: str, M: int, N: int, K: int, esize: int) -> dict:
    """The no-timing model's config of variant ``v`` for this call on the current GPU."""
    from tiledmm.kernels.block import heuristics as H, dispatch as bm
    from tiledmm.kernels.block._vcommon import device, kind_of
    dev = device()
    kind = kind_of(precision)
    return H.best_config(bm._configs(v, kind, esize, esize, dev), H.Problem(M, N, K, 1, kind, esize, esize), v.traits,
                         dev)


@pytest.fixture
def own_plans(monkeypatch):
    """The short path's plans and the kept-buffer budget of this test alone: a class an earlier test of
    the same worker bound (classes are M, N, K buckets) or buffers it kept must not decide what binds."""
    from tiledmm import api
    from tiledmm.kernels.block import fastlaunch
    monkeypatch.setattr(api, "_fast_plans", {})
    monkeypatch.setattr(fastlaunch, "_kept_bytes", 0)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["blocked", "tma"])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_short_path_binds_launches_and_stays_right_as_pointers_change(dtype, tol, variant, monkeypatch, own_plans):
    from tiledmm import api
    from tiledmm.kernels.block import dispatch as bm, variants as V
    v = V.BY_NAME[variant]
    M, K, N = (192, 160, 224) if variant == "blocked" else (256, 192, 320)
    M += {torch.float32: 0, torch.bfloat16: 16}[dtype] + (8 if variant == "blocked" else 0)  # shapes of this test only
    precision = "ieee" if dtype == torch.float32 else "none"
    cfg = _model_config(v, precision, M, N, K, torch.empty(0, dtype=dtype).element_size())
    real = bm.resolved                   # the forced variant where it applies (the misaligned and
    monkeypatch.setattr(bm, "resolved", lambda a, b, c, p, al, be, *passes: bm._bind(v, p, cfg)   # others
                        if v.applicable(a, b, c, p, al, be) else real(a, b, c, p, al, be))  # below)
    for step in range(6):               # new tensors every call: only the pointers change
        a = torch.randn(M, K, device="cuda", dtype=dtype)
        b = torch.randn(K, N, device="cuda", dtype=dtype)
        c = tiledmm.matmul(a, b)
        assert _rel(c, a.double() @ b.double()) < tol, step
    plan = api._fast_plans[(torch.Tensor, torch.Tensor, dtype, dtype, None, None)]
    hits = [e for e in plan.bound.values() if e[0] is not None or any(e[2].values())]
    assert hits                                 # a bound launch, not the variant's own call
    # the same shapes and strides, one element off 16-byte alignment: another signature, right
    big = torch.randn(M * K + 1, device="cuda", dtype=dtype)
    a1 = big[1:].view(M, K)
    assert _rel(tiledmm.matmul(a1, b), a1.double() @ b.double()) < tol
    # alpha / beta change between calls into one out
    out = torch.randn(M, N, device="cuda", dtype=dtype)
    for alpha, beta in ((1.0, 0.0), (2.0, 0.5), (2.0, 0.5), (-1.0, 1.0), (-1.0, 1.0)):
        old = out.double().clone()
        tiledmm.matmul(a, b, out=out, alpha=alpha, beta=beta)
        assert _rel(out, alpha * (a.double() @ b.double()) + beta * old) < tol, (alpha, beta)


def _right_now(got, ref, what: str, cupy) -> None:
    """got() read at once on torch's current stream is right; if not, the failure says whether it is right
    after the device is synchronised (a launch on another stream than the read's: a race), and the streams."""
    rel = _rel(got(), ref)
    if rel < 1e-5:
        return
    zero = bool((got() == 0).all())
    torch.cuda.synchronize()
    pytest.fail(f"{what}: rel {rel:.3g} when read (all zero: {zero}); after torch.cuda.synchronize "
                f"{_rel(got(), ref):.3g}; torch's stream {torch.cuda.current_stream().cuda_stream:#x}, CuPy's "
                f"{cupy.cuda.get_current_stream().ptr:#x}")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["blocked", None])
def test_short_path_for_cupy_and_numba_is_right_and_on_the_callers_stream(variant, monkeypatch):
    cupy = pytest.importorskip("cupy")
    from numba import cuda
    from tiledmm.kernels.block import dispatch as bm, variants as V
    M, K, N = (130, 96, 200) if variant else (131, 96, 200)
    if variant:                            # a variant that binds (the model's pick may not)
        cfg = _model_config(V.BLOCKED, "ieee", M, N, K, 4)
        monkeypatch.setattr(bm, "resolved", lambda a, b, c, p, al, be, *passes: bm._bind(V.BLOCKED, p, cfg))
    for i in range(4):
        ta, tb = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
        ref = ta.double() @ tb.double()
        ca, cb = cupy.from_dlpack(ta), cupy.from_dlpack(tb)
        r = tiledmm.matmul(ca, cb)
        assert isinstance(r, cupy.ndarray)
        _right_now(lambda: torch.from_dlpack(r), ref, f"CuPy call {i}", cupy)
        na, nb = cuda.as_cuda_array(ta), cuda.as_cuda_array(tb)
        r = tiledmm.matmul(na, nb)
        assert cuda.is_cuda_array(r) and _rel(torch.as_tensor(r, device="cuda"), ref) < 1e-5
        out = cupy.full((M, N), float("nan"), dtype=cupy.float32)
        assert tiledmm.matmul(ca, cb, out=out) is out and _rel(torch.from_dlpack(out), ref) < 1e-5
    # CuPy's current stream: work queued there before the call is seen by it (full path, bind, short path)
    s = cupy.cuda.Stream(non_blocking=True)
    x = cupy.array(ca)
    for i in range(1, 4):
        with s:
            with torch.cuda.stream(torch.cuda.ExternalStream(s.ptr)):
                torch.cuda._sleep(5_000_000)      # delays what follows on s only
            x[...] = ca * (2 * i)                 # queued on s after the sleep
            y = tiledmm.matmul(x, cb)
        s.synchronize()
        assert _rel(torch.from_dlpack(y), (2 * i) * ref) < 1e-5, i


def _stream_stand_ins(monkeypatch) -> tuple:
    """torch.cuda's stream constructors as stand-ins (the CPU): (the default stream, the handles
    ExternalStream was given); ExternalStream(h) is ("external", h)."""
    default, made = object(), []

    def external(handle, device=None):
        made.append(handle)
        return "external", handle
    monkeypatch.setattr(torch.cuda, "ExternalStream", external)
    monkeypatch.setattr(torch.cuda, "default_stream", lambda device=None: default)
    return default, made


def test_cupy_first_call_binds_on_torchs_default_stream_not_external_stream_zero(monkeypatch):
    """CuPy's null stream (handle 0) is torch's default stream. torch.cuda.ExternalStream(0) is not: a
    stream from torch's pool, non-blocking, so a first call's launch there (the bind) was ordered neither
    after the inputs' writes nor before the caller's read on the default stream (read unwritten under load)."""
    from contextlib import contextmanager, nullcontext

    from tiledmm.kernels.block import dispatch as bm, fastlaunch, shortpath
    default, made = _stream_stand_ins(monkeypatch)
    entered = []

    @contextmanager
    def stream(s):
        entered.append(s)
        yield
    monkeypatch.setattr(torch.cuda, "stream", stream)
    monkeypatch.setattr(torch.cuda, "device", lambda d: nullcontext())
    monkeypatch.setattr(shortpath, "to_torch", lambda x, kind: x)
    monkeypatch.setattr(bm, "resolved", lambda *args: "fn")
    monkeypatch.setattr(fastlaunch, "replay", lambda fn, a, b, c, **kw: (fn, entered[-1]))
    plan = object.__new__(shortpath.PointerPlan)          # (a CuPy plan without CuPy)
    plan.kind, plan.precision, plan.ptr = "cupy", "ieee", lambda x: x.data_ptr()
    a, b, c = torch.ones(2, 3), torch.ones(3, 4), torch.empty(2, 4)
    for handle, want in ((0, default), (0x5a00, ("external", 0x5a00))):
        plan.stream = lambda h=handle: h
        assert plan._bind(0, a, b, c, 1.0, 0.0) == (True, ("fn", want)), hex(handle)
    assert made == [0x5a00]


def test_a_default_stream_handle_is_torchs_default_stream(monkeypatch):
    """stream=0 (or numba's default stream, or cudaStreamLegacy's 1) with another torch stream current: the
    call runs on torch's default stream, not on ExternalStream(0) (a pool stream) or ExternalStream(1) (refused)."""
    from types import SimpleNamespace as NS

    from tiledmm import api
    default, made = _stream_stand_ins(monkeypatch)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: NS(cuda_stream=0x7700))
    monkeypatch.setattr(torch.cuda, "stream", lambda s: ("in", s))
    monkeypatch.setattr(api, "_stream_cache", {})
    dev = torch.device("cuda", 0)
    for stream in (0, 1, NS(handle=NS(value=None)), NS(ptr=0)):
        assert api._stream_context("torch", stream, dev) == ("in", default), stream
    assert api._stream_context("torch", 0x5a00, dev) == ("in", ("external", 0x5a00))
    assert made == [0x5a00]


@pytest.mark.gpu
def test_numba_short_path_outputs_come_from_torchs_allocator_and_own_it(monkeypatch):
    """The short path's numba outputs are torch tensors' memory (no cuMemAlloc/cuMemFree a call),
    each array keeps its tensor alive; with another torch stream current, numba allocates."""
    from numba import cuda
    from tiledmm.kernels.block import dispatch as bm, variants as V
    M, K, N = 130, 96, 200
    cfg = _model_config(V.BLOCKED, "ieee", M, N, K, 4)
    monkeypatch.setattr(bm, "resolved", lambda a, b, c, p, al, be, *passes: bm._bind(V.BLOCKED, p, cfg))
    keep = []
    for _ in range(6):
        ta, tb = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
        keep.append((tiledmm.matmul(cuda.as_cuda_array(ta), cuda.as_cuda_array(tb)), ta.double() @ tb.double()))
    assert all(isinstance(r.gpu_data._owner, torch.Tensor) for r, _ in keep[1:])      # after the first call
    del ta, tb
    junk = [torch.full((M, N), float("nan"), device="cuda") for _ in range(8)]     # reuse any freed block
    for r, ref in keep:
        assert _rel(torch.as_tensor(r, device="cuda"), ref) < 1e-5
    s = torch.cuda.Stream()
    # the inputs on the default stream, where a numba array's call runs (made on s, the call would race them:
    # it read them unwritten, all zeros, under eight test workers)
    ta, tb = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    with torch.cuda.stream(s):
        r = tiledmm.matmul(cuda.as_cuda_array(ta), cuda.as_cuda_array(tb))
    torch.cuda.synchronize()
    assert not isinstance(r.gpu_data._owner, torch.Tensor) and junk
    assert _rel(torch.as_tensor(r, device="cuda"), ta.double() @ tb.double()) < 1e-5


def test_changing_the_tuning_mode_drops_choices_made_under_the_old_one():
    from tiledmm import api
    from tiledmm.kernels.block import dispatch as bm
    a = torch.randn(24, 16)
    tiledmm.matmul(a, a.T.contiguous())
    assert bm._plans
    api._fast_plans[("marker",)] = object()            # the short path's plans go too (GPU only otherwise)
    before = tuning.mode()
    try:
        tuning.set_mode("on" if before == "off" else "off")
        assert not bm._plans and not api._fast_plans
    finally:
        tuning.set_mode(before)


@pytest.mark.gpu
@pytest.mark.parametrize("variant,dtype,precision,tol", [
    ("splitk", torch.bfloat16, None, 2e-2), ("splitk", torch.float32, "tf32", 3e-3),
    ("blocked-kmajor", torch.float32, "tf32", 3e-3), ("tma-kmajor", torch.float32, "tf32", 3e-3)])
def test_short_path_binds_launch_sequences_with_their_workspace(variant, dtype, precision, tol, monkeypatch,
                                                                own_plans):
    """Split-K (two launches and a partial-sum workspace) and tf32's K-major copy + GEMM are bound
    too: repeat calls with new tensors stay right; a call on another stream runs the variant itself."""
    from tiledmm import api
    from tiledmm.kernels.block import dispatch as bm, variants as V
    v = V.BY_NAME[variant]
    M, K, N = {"splitk": (48, 4096, 96)}.get(variant, (256, 192, 320))
    M += 8 if dtype == torch.float32 else 0          # shapes of this test only
    prec = bm.check_precision(str(dtype).replace("torch.", ""), precision)
    cfg = None if variant == "splitk" else _model_config(v, prec, M, N, K, torch.empty(0, dtype=dtype).element_size())
    real = bm.resolved
    monkeypatch.setattr(bm, "resolved", lambda a, b, c, p, al, be, *passes: bm._bind(v, p, cfg)
                        if v.applicable(a, b, c, p, al, be) else real(a, b, c, p, al, be))
    for step in range(6):
        a = torch.randn(M, K, device="cuda", dtype=dtype)
        b = torch.randn(K, N, device="cuda", dtype=dtype)
        c = tiledmm.matmul(a, b, precision=precision)
        assert _rel(c, a.double() @ b.double()) < tol, step
    plan = api._fast_plans[(torch.Tensor, torch.Tensor, dtype, dtype, None, precision)]
    hits = [e for e in plan.bound.values() if e[0] is not None or any(e[2].values())]
    assert hits                                      # bound
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        a2 = torch.randn(M, K, device="cuda", dtype=dtype)
        c2 = tiledmm.matmul(a2, b, precision=precision)
    side.synchronize()
    assert _rel(c2, a2.double() @ b.double()) < tol


def test_replay_binds_one_plain_launch_and_nothing_else(monkeypatch):
    """fastlaunch.replay on a stand-in compiled kernel (CPU): the bound launch passes the grid, the
    stream, the three new pointers and the recorded arguments, constexprs in place; anything else
    -- a variant that does more, two launches, another tensor among the arguments -- is not bound."""
    from tiledmm.kernels.block import fastlaunch
    from tiledmm import _adapter
    monkeypatch.setattr(_adapter, "_direct", True)
    monkeypatch.setattr(fastlaunch, "current_stream", lambda: 99)

    def kernel(a_ptr, b_ptr, c_ptr, M, BLOCK: "constexpr", alpha):   # noqa: F821  (only its signature is read)
        pass

    class JIT:
        fn = kernel

    calls = []

    class Compiled:
        function, packed_metadata = "fn", "meta"

        def run(self, *args):
            calls.append(args)

    fk = fastlaunch.FastKernel(JIT, {"BLOCK": 64}, 4, 3)
    fk.direct = True
    fk._slow = lambda grid, args: Compiled()
    a, b, c, other = (torch.empty(4) for _ in range(4))

    def variant(x, y, z, *, alpha):
        fk((3, 2), x, y, z, 17, alpha)
    variant.replayable = True

    go = fastlaunch.replay(variant, a, b, c, alpha=2.0)       # first launch: compiles (stand-in), recorded
    assert go is not None and calls == []
    go(99, 111, 222, 333)
    assert calls == [(3, 2, 1, 99, "fn", "meta", None, None, None, 111, 222, 333, 17, 64, 2.0)]

    variant.replayable = False                                # a variant that does more than the launch
    assert fastlaunch.replay(variant, a, b, c, alpha=2.0) is None

    def twice(x, y, z, *, alpha):
        fk((3, 2), x, y, z, 17, alpha)
        fk((3, 2), x, y, z, 17, alpha)
    twice.replayable = True
    assert fastlaunch.replay(twice, a, b, c, alpha=2.0) is None

    def workspace(x, y, z, *, alpha):
        fk((3, 2), x, y, other, 17, alpha)                    # writes somewhere else: not bound
    workspace.replayable = True
    assert fastlaunch.replay(workspace, a, b, c, alpha=2.0) is None


def test_replay_calls_the_c_launch_when_the_python_launcher_adds_nothing(monkeypatch):
    """Where Triton's Python launcher has the known body (scratch buffers, then one C ``launch``), the
    bound launch calls the C function itself with what the Python launcher would pass -- for a kernel
    with global scratch, one buffer kept for the stream it was bound on (other streams, and launches
    that may overlap their predecessor (PDL): the Python launcher); a launcher of another body always
    goes through the Python launcher."""
    from tiledmm.kernels.block import fastlaunch
    from tiledmm import _adapter
    monkeypatch.setattr(_adapter, "_direct", True)

    def kernel(a_ptr, b_ptr, c_ptr, M, BLOCK: "constexpr", alpha):   # noqa: F821  (only its signature is read)
        pass

    class JIT:
        fn = kernel

    calls = []

    class Launcher:                       # the shape of Triton 3.6's CudaLauncher
        launch_cooperative_grid, launch_pdl = False, True
        num_ctas, global_scratch_align = 1, 128

        def __init__(self, scratch):
            self.global_scratch_size, self.profile_scratch_size = scratch, 0
            self.launch = lambda *args: calls.append(("C",) + args)

        def __call__(self, gridX, gridY, gridZ, stream, function, *args):
            global_scratch = bytearray(self.global_scratch_size) or None
            profile_scratch = None
            calls.append(("python",))
            self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, self.launch_pdl,
                        global_scratch, profile_scratch, *args)

    class Other(Launcher):                # another body: never bypassed
        def __call__(self, gridX, gridY, gridZ, stream, function, *args):
            calls.append(("python",))
            self.launch(gridX, gridY, gridZ, stream, function, *args)

    a, b, c = (torch.empty(4) for _ in range(3))
    monkeypatch.setattr(fastlaunch, "current_stream", lambda: 99)             # the stream bound on
    monkeypatch.setattr(fastlaunch, "_scratch", lambda n: f"scratch of {n} B")
    cases = ((Launcher, 0, True, True), (Launcher, 64, False, True), (Launcher, 64, True, False),
             (Other, 0, False, False))       # (launcher, scratch bytes, programmatic dependent launch, direct)
    for cls, scratch, pdl, direct in cases:
        class Compiled:
            function, packed_metadata = "fn", "meta"
            run = cls(scratch)
        Compiled.run.launch_pdl = pdl

        fk = fastlaunch.FastKernel(JIT, {"BLOCK": 64}, 4, 3)
        fk.direct = True
        fk._slow = lambda grid, args: Compiled()

        def variant(x, y, z, *, alpha):
            fk((3, 2), x, y, z, 17, alpha)
        variant.replayable = True
        go = fastlaunch.replay(variant, a, b, c, alpha=2.0)
        calls.clear()
        go(99, 111, 222, 333)
        assert (calls[0] == ("python",)) is not direct, (cls, scratch)
        assert calls[-1][:6] == ("C", 3, 2, 1, 99, "fn") and calls[-1][-6:] == (111, 222, 333, 17, 64, 2.0)
        if direct:
            buffer = "scratch of 384 B" if scratch else None          # 3 x 2 programs x 64 B
            assert calls == [("C", 3, 2, 1, 99, "fn", False, pdl, buffer, None, "meta", None, None, None,
                              111, 222, 333, 17, 64, 2.0)]
        calls.clear()
        go(98, 111, 222, 333)                   # another stream: a kernel with scratch takes the Python launcher
        assert (calls[0] == ("python",)) is not (direct and not scratch), (cls, scratch)


def test_replay_binds_a_sequence_of_launches_with_a_private_workspace(monkeypatch):
    """WORKSPACE mode (split-K, the K-major copy): every launch of the first call is bound, each
    tensor argument either a view of a, b or c at its base (replaced by the new pointer) or a
    private buffer of the variant (kept, its address fixed); replays run on the bound stream only
    (another stream: False, nothing launched); an offset view of an operand, a, b, c at one
    address, or a workspace over the kept-bytes cap: not bound."""
    from tiledmm.kernels.block import fastlaunch
    from tiledmm import _adapter
    monkeypatch.setattr(_adapter, "_direct", True)

    def kernel(x_ptr, y_ptr, z_ptr, M, BLOCK: "constexpr", alpha):   # noqa: F821  (only its signature is read)
        pass

    class JIT:
        fn = kernel

    calls = []

    ck = standins.Compiled(standins.Launcher(calls))
    fk = fastlaunch.FastKernel(JIT, {"BLOCK": 64}, 4, 3)
    fk.direct = True
    fk._slow = lambda grid, args: ck
    monkeypatch.setattr(fastlaunch, "current_stream", lambda: 99)
    monkeypatch.setattr(fastlaunch, "_kept", [])
    monkeypatch.setattr(fastlaunch, "_kept_bytes", 0)
    kept = []                                        # the kept stand-ins (on the GPU: a stream of their own)
    monkeypatch.setattr(fastlaunch, "_scratch", lambda n: kept.append(torch.empty(n, dtype=torch.int8)) or kept[-1])
    a, b, c = (torch.empty(4) for _ in range(3))
    made = []

    def split(x, y, z, *, alpha):
        ws = torch.empty(8)                          # the variant's own buffer, new every call
        made.append(ws)
        fk((3, 2), x.unsqueeze(0), y, ws, 17, alpha)   # a view of x at its base: still x
        fk((5,), ws, z, z, 18, alpha)
    split.replayable = fastlaunch.WORKSPACE
    go = fastlaunch.replay(split, a, b, c, alpha=2.0)
    assert go is not None and len(made) == 1
    assert len(kept) == 1 and kept[0].numel() == made[0].untyped_storage().nbytes()
    ws = kept[0].data_ptr()                          # the kept buffer stands in for the variant's own
    assert ws != made[0].data_ptr()
    calls.clear()
    assert go(99, 111, 222, 333) is True
    assert calls == [(3, 2, 1, 99, "fn", False, False, None, None, "meta", None, None, None, 111, 222, ws, 17, 64, 2.0),
                     (5, 1, 1, 99, "fn", False, False, None, None, "meta", None, None, None, ws, 333, 333, 18, 64, 2.0)]
    assert any(t.data_ptr() == ws for t in fastlaunch._kept)     # the workspace outlives the first call
    calls.clear()
    assert go(98, 111, 222, 333) is False and calls == []        # another stream: the caller runs the variant

    def offset(x, y, z, *, alpha):
        fk((1,), x[1:], y, z, 17, alpha)
    offset.replayable = fastlaunch.WORKSPACE
    assert fastlaunch.replay(offset, a, b, c, alpha=2.0) is None
    split.replayable = lambda x, y, z: fastlaunch.WORKSPACE      # a mode decided per call
    assert fastlaunch.replay(split, a, a, c, alpha=2.0) is None  # a and b at one address
    monkeypatch.setattr(fastlaunch, "MAX_KEPT_BYTES", fastlaunch._kept_bytes)
    assert fastlaunch.replay(split, a, b, c, alpha=2.0) is None  # over the cap


def test_concurrent_first_calls_resolve_each_plan_once(monkeypatch):
    """Threads meeting new plan keys together (tiny switch interval): each key is resolved once,
    under the dispatcher's lock, and every thread gets a right answer."""
    import threading
    from tiledmm.kernels.block import dispatch as bm
    bm._forget_plans()
    resolved = []
    real = bm._resolve

    def counting(key, *args):
        resolved.append(key)
        return real(key, *args)
    monkeypatch.setattr(bm, "_resolve", counting)
    shapes = [(3, 40, 5), (70, 9, 33)]                 # two shape classes, plain fp32
    errors = []

    def work(i):
        try:
            M, K, N = shapes[i % 2]
            gen = torch.Generator().manual_seed(i)
            a, b = (torch.randn(M, K, generator=gen).to(DEVICE), torch.randn(K, N, generator=gen).to(DEVICE))
            c = torch.empty(M, N, device=DEVICE)
            bm.launch(a, b, c, precision="ieee")
            assert torch.allclose(c, a @ b, atol=1e-4)
        except Exception as e:   # noqa: BLE001  (reported below)
            errors.append(repr(e))
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    assert len(resolved) == len(set(resolved)) == 2, resolved
