"""Out-of-core GEMM: the blocking, staging and write-back, on the CPU standing in for the GPU
(forced tiny device budgets), and the same on a GPU when one is present."""
import dataclasses
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import torch

import tiledmm
from tiledmm import registry
from tiledmm.outofcore import matmul_out_of_core, plan_out_of_core, tiledmm_gemm, torch_gemm, warm_out_of_core
from tiledmm.outofcore import runner

from .conftest import GPU


@pytest.fixture
def ooc_runs(monkeypatch):
    """Out-of-core runs executed and their GEMM counts: a spy on the stream runner."""
    runs = []
    execute = runner._Run.execute

    def spy(self):
        execute(self)
        runs.append(len(self.steps))
    monkeypatch.setattr(runner._Run, "execute", spy)
    return runs


@pytest.fixture
def kernel_launches(monkeypatch):
    """Launches of the registered "triton" kernel: (a shape, c dtype) per launch (a spy on its KernelSpec)."""
    # the family loaded first: loading amends the registered spec once (kernels.block.load keeps the amended
    # one), so a spec taken before the load would be put back at teardown over the amended one, and every
    # later test in the process would find the light, unloaded spec registered again
    from tiledmm.kernels import block
    spec = block.load()
    seen = []

    def launch(a, b, c, **kw):
        seen.append((tuple(a.shape), c.dtype))
        return spec.launch(a, b, c, **kw)
    monkeypatch.setitem(registry._REGISTRY, "triton", dataclasses.replace(spec, launch=launch))
    return seen


def _case(m, k, n, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(k, n, generator=g).to(dtype)
    c = torch.randn(m, n, generator=g).to(dtype)
    return a, b, c


def _rel(c, ref):
    return ((c.double() - ref).norm() / ref.norm()).item()


def _tol(dtype):
    return {torch.float32: 1e-6, torch.float64: 1e-12, torch.bfloat16: 1e-2, torch.float16: 2e-3}[dtype]


@pytest.mark.parametrize("m,k,n,budget", [(37, 29, 23, 4096), (64, 50, 70, 8192), (5, 300, 6, 600),
                                          (100, 8, 3, 1 << 20), (1, 1, 1, 64), (19, 1, 33, 1024)])
def test_blocks_non_divisible(m, k, n, budget):
    a, b, _ = _case(m, k, n)
    c = torch.full((m, n), float("nan"))
    st = {}
    matmul_out_of_core(a, b, c, max_device_bytes=budget, gemm=torch_gemm, stats=st, piece_bytes=256)
    assert _rel(c, a.double() @ b.double()) < _tol(torch.float32)
    assert st["plan"]["device_bytes"] <= budget
    assert st["gemm_calls"] == st["plan"]["steps"] >= 1


def test_tiny_budget_really_splits_every_dimension():
    a, b, _ = _case(40, 48, 44)
    plan = plan_out_of_core(40, 44, 48, torch.float32, max_device_bytes=4096)
    assert plan.n_i * plan.n_j > 1 and plan.device_bytes <= 4096
    st = {}
    c = torch.empty(40, 44)
    matmul_out_of_core(a, b, c, max_device_bytes=4096, gemm=torch_gemm, stats=st, piece_bytes=64)
    assert _rel(c, a.double() @ b.double()) < 1e-6
    # every C element came back once; A and B crossed at least once
    assert st["bytes"]["d2h"] == 40 * 44 * 4
    assert st["bytes"]["h2d"] >= (40 * 48 + 48 * 44) * 4
    assert st["bytes"]["h2d"] == st["plan"]["h2d_bytes"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_alpha_beta_and_strided_output(dtype, layout):
    m, k, n = 21, 34, 27
    a, b, c0 = _case(m, k, n, dtype, seed=1)
    if layout == "transposed":
        c = c0.t().contiguous().t()                   # column-major c
    elif layout == "sliced":
        big = torch.zeros(m + 3, 2 * n, dtype=dtype)
        c = big[2:2 + m, 1::2]                         # neither stride is 1
        c.copy_(c0)
    else:
        c = c0.clone()
    ref = 1.5 * (a.double() @ b.double()) - 0.75 * c0.double()
    matmul_out_of_core(a, b, c, alpha=1.5, beta=-0.75, max_device_bytes=3000, gemm=torch_gemm, piece_bytes=100)
    assert _rel(c, ref) < _tol(dtype) * (3 if dtype == torch.bfloat16 else 1)
    if layout == "sliced":                             # nothing outside the view touched
        assert big[:2].abs().sum() == 0 and big[2:, 0::2].abs().sum() == 0


def test_transposed_inputs_and_both_orientations():
    a, b, _ = _case(12, 30, 50)
    at, bt = a.t().contiguous().t(), b.t().contiguous().t()
    for budget in (1500, 2500, 10_000):
        c = torch.empty(12, 50)
        matmul_out_of_core(at, bt, c, max_device_bytes=budget, gemm=torch_gemm, piece_bytes=128)
        assert _rel(c, a.double() @ b.double()) < 1e-6
    wide = plan_out_of_core(8, 4000, 40, torch.float32, max_device_bytes=40_000)
    tall = plan_out_of_core(4000, 8, 40, torch.float32, max_device_bytes=40_000)
    assert wide.transposed != tall.transposed          # the big operand is the one kept and streamed once


def test_bfloat16_wide_accumulator_through_tiledmm_kernel(kernel_launches):
    m, k, n = 24, 96, 20
    a, b, c0 = _case(m, k, n, torch.bfloat16, seed=2)
    ref = a.double() @ b.double() + c0.double()
    c = c0.clone()
    st = {}
    matmul_out_of_core(a, b, c, beta=1.0, max_device_bytes=3000, acc_dtype=torch.float32,
                       gemm=tiledmm_gemm("triton"), stats=st)
    assert st["plan"]["n_k"] > 1                       # K was split: partial sums stayed float32
    assert len(kernel_launches) == st["gemm_calls"] > 1 and {d for _, d in kernel_launches} == {torch.float32}
    assert _rel(c, ref) < 6e-3


def test_default_gemm_is_tiledmm(kernel_launches, ooc_runs):
    a, b, _ = _case(9, 14, 11)
    c = torch.empty(9, 11)
    matmul_out_of_core(a, b, c, max_device_bytes=800)  # gemm=None: tiledmm's default kernel
    assert ooc_runs and ooc_runs[0] > 1 and len(kernel_launches) == ooc_runs[0]
    assert _rel(c, a.double() @ b.double()) < 1e-6


def test_tiledmm_gemm_refuses_what_its_kernel_cannot_run():
    a, b, c = torch.randn(4, 5, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64), torch.empty(4, 3)
    with pytest.raises(tiledmm.TiledmmError, match="supports dtypes .* not float64; name a kernel"):
        tiledmm_gemm()(a, b, c.double(), 1.0, 0.0)
    with pytest.raises(tiledmm.TiledmmError, match="takes no option"):
        tiledmm_gemm("triton", colour="red")(a.float(), b.float(), c, 1.0, 0.0)
    with pytest.raises(tiledmm.TiledmmError, match="unknown kernel"):
        tiledmm_gemm("nosuch")(a.float(), b.float(), c, 1.0, 0.0)
    if not GPU:                                        # a block too big for the simulator: refused, not run
        big = torch.empty(512, 512)
        with pytest.raises(tiledmm.TiledmmError, match="emulation limit"):
            tiledmm_gemm()(big, big, torch.empty(512, 512), 1.0, 0.0)


@pytest.mark.slow
def test_tiledmm_gemm_with_a_kernel_without_epilogue():
    # the SIMT "tiled" kernel has no alpha/beta of its own: the product goes through a temporary
    a, b, c0 = _case(12, 16, 8, torch.float64, seed=7)
    c = c0.clone()
    matmul_out_of_core(a, b, c, alpha=2.0, beta=-1.0, max_device_bytes=1500, gemm=tiledmm_gemm("tiled"))
    assert _rel(c, 2.0 * (a.double() @ b.double()) - c0.double()) < 1e-12
    c = torch.full_like(c0, float("nan"))                # alpha = 1, beta = 0: straight into the blocks
    matmul_out_of_core(a, b, c, max_device_bytes=1500, gemm=tiledmm_gemm("tiled"))
    assert _rel(c, a.double() @ b.double()) < 1e-12


def test_max_device_bytes_through_the_api_runs_out_of_core(ooc_runs, rng):
    """tiledmm.matmul on host operands with a small budget: the out-of-core runner ran, in blocks."""
    a, b = rng.standard_normal((37, 29)).astype(np.float32), rng.standard_normal((29, 23)).astype(np.float32)
    c = rng.standard_normal((37, 23)).astype(np.float32)
    want = 2.0 * (a.astype(np.float64) @ b) + 0.5 * c
    tiledmm.matmul(a, b, out=c, alpha=2.0, beta=0.5, max_device_bytes=4096)
    assert len(ooc_runs) == 1 and ooc_runs[0] > 1
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


# In a fresh process with the default settings (TILEDMM_TUNE unset, an empty cache), every timing
# function of tiledmm.timing raises; an out-of-core product through tiledmm.matmul and one through
# matmul_out_of_core's default GEMM must still run (the spy proves they ran out of core).
_NO_TIMING = textwrap.dedent("""
    import sys
    import numpy as np
    import torch
    import tiledmm
    from tiledmm import timing
    from tiledmm.outofcore import matmul_out_of_core, runner

    def refuse(*args, **kwargs):
        raise AssertionError("timed on the out-of-core call path")
    originals = {n: getattr(timing, n) for n in dir(timing) if callable(getattr(timing, n))
                 and getattr(getattr(timing, n), "__module__", None) == timing.__name__}
    for name in originals:
        setattr(timing, name, refuse)
    for mod in [m for n, m in sys.modules.items() if n.startswith("tiledmm")]:   # names imported already
        for attr, value in list(vars(mod).items()):
            if any(value is f for f in originals.values()):
                setattr(mod, attr, refuse)
    runs = []
    execute = runner._Run.execute
    def spy(self):
        execute(self)
        runs.append(len(self.steps))
    runner._Run.execute = spy
    m, k, n, budget = [int(x) for x in sys.argv[1:5]]
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    c = tiledmm.matmul(a, b, max_device_bytes=budget)
    ref = a.astype(np.float64) @ b
    err1 = np.linalg.norm(c - ref) / np.linalg.norm(ref)
    ct = torch.empty(m, n)
    matmul_out_of_core(torch.from_numpy(a), torch.from_numpy(b), ct, max_device_bytes=budget)
    err2 = np.linalg.norm(ct.numpy() - ref) / np.linalg.norm(ref)
    print("runs", runs, "errors", err1, err2)
    assert len(runs) == 2 and min(runs) > 1 and err1 < 1e-5 and err2 < 1e-5
""")


def test_no_timing_on_the_out_of_core_call_path(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TILEDMM_TUNE"}
    env.update(TILEDMM_CACHE_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
    shape = ["3000", "2000", "2500", str(8 << 20)] if GPU else ["48", "40", "36", "6000"]
    p = subprocess.run([sys.executable, "-c", _NO_TIMING, *shape], capture_output=True, text=True, env=env,
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "runs [" in p.stdout


def test_progress_and_stats():
    a, b, _ = _case(30, 30, 30)
    seen = []
    st = {}
    c = torch.empty(30, 30)
    matmul_out_of_core(a, b, c, max_device_bytes=2000, gemm=torch_gemm, stats=st, piece_bytes=200,
                       progress=lambda d, t: seen.append((d, t)))
    total = st["gemm_calls"]
    assert seen and seen[-1] == (total, total) and all(d <= t for d, t in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    for key in ("copy_in_ms", "compute_ms", "copy_out_ms", "compute_idle_ms", "timeline", "plan_text"):
        assert key in st
    assert {s for s, *_ in st["timeline"]} == {"copy_in", "compute", "copy_out"}


def test_numpy_views_and_empty_and_k_zero():
    rng = np.random.default_rng(3)
    an, bn = rng.standard_normal((13, 17)).astype(np.float32), rng.standard_normal((17, 6)).astype(np.float32)
    cn = np.full((13, 6), np.nan, np.float32)
    matmul_out_of_core(torch.from_numpy(an), torch.from_numpy(bn), torch.from_numpy(cn), max_device_bytes=700,
                       gemm=torch_gemm)
    np.testing.assert_allclose(cn, an.astype(np.float64) @ bn, rtol=1e-5, atol=1e-5)
    c = torch.ones(4, 5)
    matmul_out_of_core(torch.empty(4, 0), torch.empty(0, 5), c, beta=2.0, gemm=torch_gemm)
    assert torch.equal(c, torch.full((4, 5), 2.0))
    matmul_out_of_core(torch.empty(0, 3), torch.empty(3, 5), torch.empty(0, 5), gemm=torch_gemm)


def test_bad_input_and_too_small_budget():
    a, b, c = _case(4, 5, 6)
    with pytest.raises(tiledmm.TiledmmError, match="at least"):
        matmul_out_of_core(a, b, c, max_device_bytes=8, gemm=torch_gemm)
    with pytest.raises(tiledmm.TiledmmError, match="do not chain"):
        matmul_out_of_core(a, b.t(), c, gemm=torch_gemm)
    with pytest.raises(tiledmm.TiledmmError, match="same dtype"):
        matmul_out_of_core(a, b.double(), c, gemm=torch_gemm)
    with pytest.raises(tiledmm.TiledmmError, match="CPU torch tensor"):
        matmul_out_of_core(a.numpy(), b, c, gemm=torch_gemm)
    with pytest.raises(tiledmm.TiledmmError, match="CPU torch tensor"):
        warm_out_of_core(a.numpy(), b, c, gemm=torch_gemm)
    with pytest.raises(tiledmm.TiledmmError, match="do not chain"):
        warm_out_of_core(a, b.t(), c, gemm=torch_gemm)


def test_gemm_error_propagates_and_threads_end():
    a, b, c = _case(20, 20, 20)

    def bad(*args):
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        matmul_out_of_core(a, b, c, max_device_bytes=1000, gemm=bad)
    import threading
    assert not [t for t in threading.enumerate() if t.name.startswith("tiledmm-")]


def test_wide_accumulator_only_when_k_is_split():
    # K not split: the device C blocks take c's dtype (one rounding either way) and nothing is cast
    p = plan_out_of_core(64, 48, 40, torch.bfloat16, acc_dtype=torch.float32, max_device_bytes=1 << 20)
    assert p.n_k == 1 and not p.cast and p.acc_bytes == 2
    # K split: float32 partial sums, cast to bfloat16 on the device, and the cast buffer is in the budget
    p = plan_out_of_core(24, 20, 96, torch.bfloat16, acc_dtype=torch.float32, max_device_bytes=3000)
    assert p.n_k > 1 and p.cast and p.acc_bytes == 4 and p.device_bytes <= 3000
    a, b, c0 = _case(64, 40, 48, torch.bfloat16, seed=5)
    c = c0.clone()
    st = {}
    matmul_out_of_core(a, b, c, beta=0.5, acc_dtype=torch.float32, max_device_bytes=1 << 20, gemm=torch_gemm, stats=st)
    assert st["plan"]["n_k"] == 1 and not st["plan"]["cast"]
    assert _rel(c, a.double() @ b.double() + 0.5 * c0.double()) < 1e-2


def test_plan_cached_forced_blocks_and_phases():
    kw = dict(max_device_bytes=1 << 30, rates={"gemm": 1e12})
    p1 = plan_out_of_core(3000, 2000, 1000, torch.float32, **kw)
    assert plan_out_of_core(3000, 2000, 1000, torch.float32, **kw) is p1       # cached
    p2 = plan_out_of_core(3000, 2000, 1000, torch.float32, blocks=(1024, 512, 256), **kw)
    assert (p2.bm, p2.bn, p2.bk, p2.transposed) == (1024, 512, 256, False)
    with pytest.raises(tiledmm.TiledmmError, match="no blocking fits"):
        plan_out_of_core(3000, 2000, 1000, torch.float32, blocks=(3000, 2000, 1000), max_device_bytes=1 << 20)
    a, b, _ = _case(30, 20, 25)
    c = torch.empty(30, 25)
    st = {}
    matmul_out_of_core(a, b, c, max_device_bytes=2000, gemm=torch_gemm, stats=st)
    assert set(st["phases"]) == {"setup_s", "plan_s", "build_s", "staging_s", "issue_s", "finish_s"}
    assert sum(st["phases"].values()) <= st["wall_s"] + 1e-3


def test_panel_chunks_do_not_wait_for_their_own_panel(monkeypatch):
    # one resident panel (n_j = 1) loaded K-chunk by K-chunk: no chunk waits for the GEMMs reading the
    # panel's earlier chunks (only a different panel's GEMMs free a panel slot)
    ooc = runner
    waits, runs = [], []
    orig_wait, orig_exec = ooc._Run._wait_slot, ooc._Run.execute

    def wait(self, slot, stream):
        waits.append((slot, slot.free_recorded))
        return orig_wait(self, slot, stream)

    def execute(self):
        runs.append(self)
        return orig_exec(self)
    monkeypatch.setattr(ooc._Run, "_wait_slot", wait)
    monkeypatch.setattr(ooc._Run, "execute", execute)
    a, b, _ = _case(64, 96, 40)
    plan = plan_out_of_core(64, 40, 96, torch.float32, max_device_bytes=1 << 20, blocks=(16, 40, 24))
    plan = dataclasses.replace(plan, resident=True)
    assert plan.resident and plan.n_j == 1 and plan.n_k == 4 and plan.n_i == 4
    c = torch.empty(64, 40)
    matmul_out_of_core(a, b, c, plan=plan, gemm=torch_gemm, piece_bytes=256)
    assert _rel(c, a.double() @ b.double()) < 1e-6
    panel_slots = {id(st.b.slot) for st in runs[0].steps}
    assert not [w for w in waits if id(w[0]) in panel_slots and w[1]]


def test_warm_runs_each_block_shape_once():
    a, b, _ = _case(40, 48, 44)
    c = torch.empty(40, 44)
    shapes = []

    def rec(x, y, z, al, be):
        shapes.append((tuple(x.shape), tuple(y.shape), tuple(z.shape), be != 0))
        torch_gemm(x, y, z, al, be)
    plan = warm_out_of_core(a, b, c, max_device_bytes=4096, gemm=rec)
    assert plan.steps > len(shapes) >= 1 and len(set(shapes)) == len(shapes)
    assert plan is plan_out_of_core(40, 44, 48, torch.float32, max_device_bytes=4096)
    st = {}
    matmul_out_of_core(a, b, c, max_device_bytes=4096, gemm=torch_gemm, stats=st)
    assert st["plan"] == plan.as_dict()
    assert _rel(c, a.double() @ b.double()) < 1e-6


@pytest.mark.parametrize("pinned", [False, pytest.param(True, marks=pytest.mark.gpu)])
def test_bf16_cast_on_device(pinned):  # the float32 blocks cast on the device; straight and staged stores
    m, k, n = (600, 2000, 500) if GPU else (60, 200, 50)
    a, b, c0 = _case(m, k, n, torch.bfloat16, seed=6)
    c = c0.clone()
    if pinned:
        a, b, c = a.pin_memory(), b.pin_memory(), c.pin_memory()
    st = {}
    plan = plan_out_of_core(m, n, k, torch.bfloat16, acc_dtype=torch.float32, beta_nonzero=True,
                            max_device_bytes=8 << 20, blocks=(256, 384, 512) if GPU else (16, 24, 48),
                            direct=(pinned,) * 3)
    matmul_out_of_core(a, b, c, beta=1.0, acc_dtype=torch.float32, gemm=torch_gemm, stats=st, plan=plan,
                       piece_bytes=1 << 16)
    assert st["plan"]["n_k"] > 1 and st["plan"]["cast"]
    assert _rel(c, a.double() @ b.double() + c0.double()) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("pinned", [False, True])
def test_gpu_streams_forced_budget(pinned):
    m, k, n = 1000, 1500, 700
    a, b, c0 = _case(m, k, n, seed=4)
    if pinned:
        a, b = a.pin_memory(), b.t().contiguous().t().pin_memory()
    c = c0.clone()
    st = {}
    matmul_out_of_core(a, b, c, alpha=0.5, beta=2.0, max_device_bytes=3 << 20, gemm=torch_gemm, stats=st,
                       piece_bytes=1 << 18)
    assert st["plan"]["steps"] > 4
    assert _rel(c, 0.5 * (a.double() @ b.double()) + 2 * c0.double()) < 1e-5


# ---- pinned staging buffers (issue 22: a first call spent 0.53 s pinning 832 MiB of them)

@pytest.fixture
def fresh_pool(monkeypatch):
    """The default device's pool of staging buffers, emptied for the test, and the buffers it makes:
    (nbytes, thread name) each (a spy on Device.pinned)."""
    from tiledmm.outofcore import cudart
    dev = cudart.resolve_device(None)
    pool = cudart.HostPool(dev)
    monkeypatch.setattr(dev, "host_pool", pool)
    made = []
    pinned = cudart.Device.pinned

    def spy(self, n, dtype):
        made.append((n * torch.empty((), dtype=dtype).element_size(), threading.current_thread().name))
        return pinned(self, n, dtype)
    monkeypatch.setattr(cudart.Device, "pinned", spy)
    return pool, made


def test_staging_buffers_bounded_made_by_threads_and_kept(fresh_pool):
    # many staged pieces: a ring of threads + 2 staging buffers and threads + 2 result buffers, made
    # by the staging / unstaging threads (not one after another on the main thread), kept for the
    # next call, which makes none (the old runner made 10 + 16 buffers on every call)
    pool, made = fresh_pool
    a, b, _ = _case(96, 80, 72, seed=8)
    for call in range(2):
        c = torch.full((96, 72), float("nan"))
        st = {}
        matmul_out_of_core(a, b, c, max_device_bytes=20_000, gemm=torch_gemm, stats=st, piece_bytes=1024,
                           host_threads=8)
        assert _rel(c, a.double() @ b.double()) < 1e-6
        assert st["bytes"]["staged_in"] > 10 * 1024 and st["bytes"]["staged_out"] > 10 * 1024
        if call == 0:
            assert 0 < len(made) <= 2 * (8 + 2) and all(n <= 1024 * 4 for n, _ in made)
            assert {name.split("_")[0] for _, name in made} <= {"tiledmm-stage", "tiledmm-unstage"}
            assert st["bytes"]["pinned_new"] == sum(n for n, _ in made) == pool.kept_bytes()
        else:
            assert len(made) == pool.made and st["bytes"]["pinned_new"] == 0 and st["bytes"]["pinned"] > 0


def test_staging_buffers_only_as_many_as_pieces_and_results_lazily(fresh_pool, monkeypatch):
    # two staged pieces in, one out: three buffers (not a full ring); the result buffer is made when
    # the block comes back, after its GEMM was issued
    pool, made = fresh_pool
    runs, at_gemm = [], []
    execute = runner._Run.execute

    def spy(self):
        runs.append(self)
        execute(self)
    monkeypatch.setattr(runner._Run, "execute", spy)

    def gemm(x, y, z, al, be):
        at_gemm.append((len(made), list(runs[0].out_bufs)))
        torch_gemm(x, y, z, al, be)
    a, b, _ = _case(8, 6, 5, seed=9)
    c = torch.empty(8, 5)
    matmul_out_of_core(a, b, c, max_device_bytes=1 << 20, gemm=gemm, host_threads=8)
    assert _rel(c, a.double() @ b.double()) < 1e-6
    run = runs[0]
    assert len(run.steps) == 1 and len(run.stage_bufs) == 2 and len(run.out_bufs) == 1 and len(made) == 3
    assert at_gemm == [(2, [None])]
    assert pool.kept_bytes() == sum(n for n, _ in made)


def test_staging_buffers_back_in_the_pool_after_an_error(fresh_pool):
    pool, made = fresh_pool
    a, b, c = _case(40, 30, 20)

    def bad(*args):
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        matmul_out_of_core(a, b, c, max_device_bytes=4000, gemm=bad, piece_bytes=512)
    assert made and pool.kept_bytes() == sum(n for n, _ in made)
    before = len(made)
    matmul_out_of_core(a, b, c, max_device_bytes=4000, gemm=torch_gemm, piece_bytes=512)
    assert _rel(c, a.double() @ b.double()) < 1e-6
    assert not [t for t in threading.enumerate() if t.name.startswith("tiledmm-")]
    assert len(made) >= before and pool.kept_bytes() == pool.made_bytes


def test_staging_pool_shared_by_concurrent_runs(fresh_pool):
    pool, made = fresh_pool
    cases = [_case(64, 48, 40, seed=s) for s in (10, 11)]
    outs = [torch.empty(64, 40) for _ in cases]

    def run(i):
        a, b, _ = cases[i]
        matmul_out_of_core(a, b, outs[i], max_device_bytes=6000, gemm=torch_gemm, piece_bytes=256, host_threads=3)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for (a, b, _), c in zip(cases, outs):
        assert _rel(c, a.double() @ b.double()) < 1e-6
    assert len(made) <= 2 * 2 * (3 + 2) and pool.kept_bytes() == pool.made_bytes


def test_host_pool_reuses_rounds_and_keeps_at_most_keep_bytes(fresh_pool):
    from tiledmm.outofcore.cudart import HUGE
    pool, made = fresh_pool
    (t1, new1), (t2, new2) = pool.take(5000), pool.take(HUGE + 1)
    assert new1 and new2 and t1.numel() == 8192 and t2.numel() == 2 * HUGE
    pool.give([t1, t2])
    t3, new3 = pool.take(3000)                       # the smallest kept buffer that fits
    assert not new3 and t3.data_ptr() == t1.data_ptr()
    pool.keep_bytes = 2 * HUGE
    pool.give([t3])                                  # over the cap: the smallest goes
    assert pool.kept_bytes() == 2 * HUGE and len(made) == 2
    with pytest.raises(tiledmm.TiledmmError, match="TILEDMM_OOC_PIN"):
        from tiledmm.outofcore.cudart import pin_host
        pin_host(16, torch.device("cpu"), how="bogus")


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["register", "huge", "torch"])
def test_pinned_buffers_each_way(how):
    from tiledmm.outofcore.cudart import pin_host, release_host
    t = pin_host(3 << 20, torch.device("cuda", torch.cuda.current_device()), how=how)
    assert t.is_pinned() and t.numel() == 3 << 20
    t.copy_(torch.arange(3 << 20, dtype=torch.int64).to(torch.uint8))
    d = torch.empty_like(t, device="cuda")
    d.copy_(t, non_blocking=True)
    back = torch.zeros_like(t).pin_memory()
    back.copy_(d, non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(back, t)
    release_host(t)


def test_planner_scores_only_candidates_that_can_win(monkeypatch):
    from tiledmm.outofcore import planner
    cases = [(16384, 16384, 16384, 4, 4, 4, False, False, (False,) * 3, 2 << 30, {}),
             (90000, 90000, 90000, 4, 4, 4, False, False, (False,) * 3, 70 << 30, {}),
             (65536, 65536, 65536, 2, 2, 4, True, True, (True,) * 3, 16 << 30, {}),
             (4000, 8, 40, 4, 4, 4, False, False, (False,) * 3, 40_000, {}),
             (24, 20, 96, 2, 2, 4, True, True, (False,) * 3, 3000, {"call": 0.0}),
             (3000, 2000, 1000, 8, 8, 8, False, True, (True, False, True), 1 << 20, {"gemm": 1e9})]
    scored = []
    score = planner._score
    monkeypatch.setattr(planner, "_score", lambda cand, model: scored.append(cand[0].size) or score(cand, model))
    for m, n, k, esz, csz, accsz, differs, beta, direct, budget, rates in cases:
        r = {**planner._RATES, **planner._GPU_LINK, "gemm": planner._GEMM_RATE[esz], **rates}
        for tr in (False, True):
            args = (m, n, k, esz, csz, accsz, differs, beta, *direct, budget, r, tr)
            scored.clear()
            p = planner._orient_plans(*args)
            pruned = sum(scored)
            q = planner._orient_plans(*args, prune=False)
            assert (p is None) == (q is None)
            if p is not None:
                assert p.as_dict() == q.as_dict() and p._score == q._score
            if (m, k) == (16384, 16384):
                assert pruned < scored[-1] / 5               # a fraction of the grid scored in full
            # the floor is below the model time of every candidate that fits
            g, est, s = score(tuple(x.ravel() for x in np.meshgrid(
                *[np.array(planner._sizes(d), float) for d in (m, n, k)], [True, False], indexing="ij")),
                (m, n, k, esz, csz, accsz, differs, beta, direct, budget, r))
            fl = planner._floor(g.bm, g.bn, g.bk, m, n, k, r)
            assert np.all((fl <= est * (1 + 1e-12)) | ~np.broadcast_to(g.ok, est.shape))
