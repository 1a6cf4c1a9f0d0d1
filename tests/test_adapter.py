"""tiledmm._adapter: the private Triton/torch/numba interfaces, their version gate, self-test and
public fallbacks; Triton's own cache key left alone."""
import subprocess
import sys
import warnings

import pytest
import torch

import tiledmm
from tiledmm import _adapter
from tiledmm.kernels.block import fastlaunch

from .conftest import GPU


@pytest.fixture
def undecided(monkeypatch):
    """The adapter as in a fresh process on a GPU (the decision made again, emulation off; no pass
    kept from an earlier process: ``_verdict_path`` None)."""
    monkeypatch.setattr(_adapter, "_direct", None)
    monkeypatch.setattr(_adapter, "_verdict_path", lambda: None)
    monkeypatch.setattr(_adapter, "_why_not", "")
    monkeypatch.setattr(_adapter._backend, "emulating", lambda: False)
    monkeypatch.setattr(_adapter, "_capturing", lambda: False)
    monkeypatch.setattr(_adapter, "_cache_ready", True)      # Triton's cache folder: test_faults.py
    yield
    monkeypatch.setattr(_adapter, "_direct", None)


def test_importing_tiledmm_imports_no_triton():
    code = "import sys, tiledmm; print('triton' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_tiledmm_leaves_tritons_cache_key_alone():
    from triton.runtime import cache, jit
    before = (cache.triton_key, cache.get_cache_key, jit.get_cache_key)
    a = torch.randn(8, 8)
    tiledmm.matmul(a, a, kernel="triton")
    assert (cache.triton_key, cache.get_cache_key, jit.get_cache_key) == before
    assert not getattr(cache.triton_key, "tiledmm", False)


def test_an_unchecked_triton_is_detected_and_warned_about_once(undecided, monkeypatch):
    import triton
    monkeypatch.setattr(_adapter, "TRITON_CHECKED", ("0.0.0",))
    tested = []
    monkeypatch.setattr(_adapter, "_self_test", lambda: tested.append(1) or "")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _adapter.triton_direct() is False
        assert _adapter.triton_direct() is False
    assert len(caught) == 1 and triton.__version__ in str(caught[0].message)
    assert "kernel[grid]" in str(caught[0].message) and not tested     # no private launch tried
    assert triton.__version__ in _adapter.why_not_direct()


@pytest.mark.skipif(GPU, reason="the CPU image's Triton (the newest) only")
def test_the_newest_triton_here_is_not_among_the_checked_versions():
    import triton
    assert triton.__version__ not in _adapter.TRITON_CHECKED


@pytest.mark.parametrize("failure", ["returns", "raises"])
def test_a_failing_self_test_turns_direct_launches_off_with_one_warning(undecided, monkeypatch, failure):
    import triton
    monkeypatch.setattr(_adapter, "TRITON_CHECKED", (triton.__version__,))

    def self_test():
        if failure == "raises":
            raise TypeError("launch() takes 14 positional arguments")
        return "self-test launch 2 wrote wrong values"
    monkeypatch.setattr(_adapter, "_self_test", self_test)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not _adapter.triton_direct() and not _adapter.triton_direct()
    assert len(caught) == 1
    assert ("TypeError" if failure == "raises" else "wrong values") in str(caught[0].message)


def test_no_decision_inside_a_graph_capture(undecided, monkeypatch):
    """The self-test synchronises, which a CUDA graph capture forbids: while capturing, direct
    launches are off for the call and the decision waits."""
    monkeypatch.setattr(_adapter, "_capturing", lambda: True)
    monkeypatch.setattr(_adapter, "_decide", lambda: pytest.fail("decided during a capture"))
    assert _adapter.triton_direct() is False and _adapter._direct is None


def test_a_passing_self_test_turns_direct_launches_on_silently(undecided, monkeypatch):
    import triton
    monkeypatch.setattr(_adapter, "TRITON_CHECKED", (triton.__version__,))
    monkeypatch.setattr(_adapter, "_self_test", lambda: "")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _adapter.triton_direct()
    assert not caught


def test_a_pass_is_remembered_and_a_later_process_skips_the_self_test(undecided, monkeypatch, tmp_path):
    """A passed self-test is kept on disk (``_verdict_path``); a later decision under the same
    conditions reads it instead of testing; a failure is never kept, so it is tested again."""
    import triton
    monkeypatch.setattr(_adapter, "TRITON_CHECKED", (triton.__version__,))
    path = tmp_path / "selftest-x.json"
    monkeypatch.setattr(_adapter, "_verdict_path", lambda: path)
    verdicts, tested = ["self-test launch 1 wrote wrong values", "", ""], []
    monkeypatch.setattr(_adapter, "_self_test", lambda: tested.append(1) or verdicts[len(tested) - 1])
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert not _adapter.triton_direct() and not path.exists()      # failed: nothing kept
        monkeypatch.setattr(_adapter, "_direct", None)                 # as a new process
        assert _adapter.triton_direct() and path.read_text() == "passed" and len(tested) == 2
        monkeypatch.setattr(_adapter, "_direct", None)
        assert _adapter.triton_direct() and len(tested) == 2           # the kept pass: not tested again
        path.write_text("junk")
        monkeypatch.setattr(_adapter, "_direct", None)
        assert _adapter.triton_direct() and len(tested) == 3           # not a pass: tested


@pytest.mark.skipif(not GPU, reason="needs a GPU (the index is off in emulation)")
def test_gpu_the_verdict_key_changes_with_the_conditions(monkeypatch):
    import torch as t
    first = _adapter._verdict_path()
    assert first is not None and first.name.startswith("selftest-")
    monkeypatch.setattr(t, "__version__", t.__version__ + "+other")
    assert _adapter._verdict_path() != first


@pytest.mark.skipif(GPU, reason="emulation only")
def test_emulation_decides_off_without_a_warning(monkeypatch):
    monkeypatch.setattr(_adapter, "_direct", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _adapter.triton_direct() is False
    assert not caught and _adapter.why_not_direct() == "emulation"
    monkeypatch.setattr(_adapter, "_direct", None)


class _KnownLauncher:               # the body of Triton 3.6's CudaLauncher.__call__
    launch_cooperative_grid, launch_pdl = False, False
    num_ctas, global_scratch_align, global_scratch_size, profile_scratch_size = 1, 128, 0, 0

    def __init__(self, calls):
        self.launch = lambda *args: calls.append(("C",) + args)
        self.calls = calls

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        global_scratch = None
        profile_scratch = None
        self.calls.append(("python",))
        self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, self.launch_pdl,
                    global_scratch, profile_scratch, *args)


class _OtherLauncher(_KnownLauncher):
    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        self.launch(gridX, gridY, gridZ, stream, function, *args)


def _compiled(launcher):
    class Compiled:
        function, packed_metadata = "fn", "meta"
        run = launcher

        class src:
            signature = {"a_desc": "tensordesc", "n": "i32", "b_desc": "tensordesc"}
    return Compiled()


def test_bind_compiled_needs_direct_launches_on_and_the_known_launcher_body(monkeypatch):
    calls = []
    ck = _compiled(_KnownLauncher(calls))
    monkeypatch.setattr(_adapter, "_direct", False)
    assert _adapter.bind_compiled(ck) is None                     # off: never the private launch
    assert _adapter.bind_compiled(ck, checked=False) is not None  # (the self-test's own, before it decides)
    monkeypatch.setattr(_adapter, "_direct", True)
    bound = _adapter.bind_compiled(ck)
    assert isinstance(bound, _adapter.BoundLaunch) and bound.launch is ck.run.launch
    assert (bound.cooperative, bound.pdl, bound.scratch_bytes) == (False, False, 0)
    assert _adapter.bind_compiled(_compiled(_OtherLauncher(calls))) is None     # an unknown body
    ck.run.global_scratch_size, ck.run.num_ctas = 64, 2           # global scratch: per program, every CTA's
    assert _adapter.bind_compiled(ck).scratch_bytes == 128
    ck.run.global_scratch_align = 1024                            # aligned past torch's blocks: Triton's launcher
    assert _adapter.bind_compiled(ck) is None
    ck.run.global_scratch_align, ck.run.profile_scratch_size = 128, 8   # profiling scratch: Triton's launcher
    assert _adapter.bind_compiled(ck) is None


def test_bound_launch_passes_the_c_launch_what_tritons_launcher_passes(monkeypatch):
    """A BoundLaunch calls the C launch with exactly the arguments Triton's Python launcher (the known
    body, reached through ``run_compiled``) gives it -- function, flags, scratch, packed metadata and
    hooks in their places -- both as ``bl(...)`` and in the per-call form ``bl.launch(..., *bl.head, ...)``;
    a scratch buffer goes where the launcher puts its own. Immutable."""
    calls = []
    ck = _compiled(_KnownLauncher(calls))
    ck.run.launch_cooperative_grid, ck.run.launch_pdl = "coop", "pdl"     # told apart from each other
    monkeypatch.setattr(_adapter, "_direct", True)
    bound = _adapter.bind_compiled(ck)
    _adapter.run_compiled(ck, 3, 2, 1, 7, ("a", 17, 1.5))        # Triton's Python launcher
    bound(3, 2, 1, 7, None, "a", 17, 1.5)
    bound.launch(3, 2, 1, 7, *bound.head, "a", 17, 1.5)
    want = ("C", 3, 2, 1, 7, "fn", "coop", "pdl", None, None, "meta", None, None, None, "a", 17, 1.5)
    assert calls == [("python",), want, want, want]
    calls.clear()
    bound(5, 1, 1, 9, "buffer", "a")
    bound.launch(5, 1, 1, 9, *bound.head_with("buffer"), "a")
    assert calls == [("C", 5, 1, 1, 9, "fn", "coop", "pdl", "buffer", None, "meta", None, None, None, "a")] * 2
    with pytest.raises(AttributeError):
        bound.pdl = False
    with pytest.raises(AttributeError):
        del bound.head


def test_the_specialisation_keys_follow_tritons_rules():
    """int_key / arg_key: what Triton compiles a kernel anew for -- an int's 64-bit size, == 1, % 16; a
    tensor's dtype and 16-byte alignment; a host descriptor's dtype and block; floats, bools and None
    nothing."""
    assert [_adapter.int_key(v) for v in (0, 1, 17, 32, -16, 2 ** 31 - 1, 2 ** 31, -2 ** 31, -2 ** 31 - 1, 2 ** 40 + 1)] \
        == [2, 1, 0, 2, 2, 0, 6, 2, 4, 4]
    t = torch.empty(8, dtype=torch.float16)
    assert _adapter.arg_key(t) == (torch.float16, True) and _adapter.arg_key(t[1:]) == (torch.float16, False)
    assert [_adapter.arg_key(v) for v in (1.5, True, None, 16)] == [None, None, None, 2]

    class Desc:
        base, block_shape = t, [64, 32]
    assert _adapter.arg_key(Desc()) == ("desc", torch.float16, (64, 32))


def _kernel(a_ptr, b_ptr, c_ptr, M, BLOCK: "constexpr", alpha):   # noqa: F821  (only its signature is read)
    pass


class _JIT:             # what FastKernel reads of a JIT function
    fn = _kernel


def test_fastkernel_launches_through_the_public_path_when_direct_launches_are_off(monkeypatch):
    calls, slow = [], []
    fk = fastlaunch.FastKernel(_JIT, {"BLOCK": 64}, 4, 3)
    fk.direct = True
    ck = _compiled(_KnownLauncher(calls))
    fk._slow = lambda grid, args: slow.append(args) or ck
    a, b, c = (torch.empty(4) for _ in range(3))
    monkeypatch.setattr(fastlaunch, "current_stream", lambda: 7)
    monkeypatch.setattr(fastlaunch, "current_device", lambda: 0)
    for direct, want_slow, want_run in ((False, 3, 0), (True, 3, 2)):
        monkeypatch.setattr(_adapter, "_direct", direct)
        fk.cache.clear()
        slow.clear()
        calls.clear()
        for _ in range(3):
            fk((2,), a, b, c, 17, 1.5)
        assert len(slow) == (want_slow if not direct else 1)
        assert calls.count(("python",)) == want_run
    assert calls[-1] == ("C", 2, 1, 1, 7, "fn", False, False, None, None, "meta", None, None, None,
                         a, b, c, 17, 64, 1.5)
    assert fastlaunch.replay(lambda *x, **k: None, a, b, c, alpha=1.0) is None     # not replayable


def test_fastkernel_keeps_a_compiled_kernel_per_device(monkeypatch):
    """A CompiledKernel's function handle belongs to the context it was loaded in: a specialisation met
    on a second device is loaded (or compiled) there, never launched with the first device's handle,
    and each device's launches use their own."""
    calls, slow = [], []
    fk = fastlaunch.FastKernel(_JIT, {"BLOCK": 64}, 4, 3)
    fk.direct = True
    compiled = {0: _compiled(_KnownLauncher(calls)), 1: _compiled(_KnownLauncher(calls))}
    here = [0]
    fk._slow = lambda grid, args: slow.append(here[0]) or compiled[here[0]]
    monkeypatch.setattr(_adapter, "_direct", True)
    monkeypatch.setattr(_adapter, "load_compiled", lambda *a, **k: None)
    monkeypatch.setattr(_adapter, "remember_compiled", lambda *a, **k: None)
    monkeypatch.setattr(fastlaunch, "current_stream", lambda: 7)
    monkeypatch.setattr(fastlaunch, "current_device", lambda: here[0])
    a, b, c = (torch.empty(4) for _ in range(3))
    for dev in (0, 1, 0, 1):
        here[0] = dev
        assert fk((2,), a, b, c, 17, 1.5) is compiled[dev]
    assert slow == [0, 1]                                  # one first launch per device
    assert {k[0] for k in fk.cache} == {0, 1} and len(fk.cache) == 2
    assert fk.cache[(0, next(iter(fk.cache))[1])] is compiled[0]


def test_torch_helpers_match_public_torch():
    t = torch.empty(4, 4)
    assert not _adapter.internal_overlap(t)
    assert _adapter.internal_overlap(torch.empty(4).expand(3, 4))
    assert _adapter.internal_overlap(torch.empty(10).as_strided((3, 3), (0, 1)))
    v = _adapter.version_counter(t)
    t.add_(1)
    assert _adapter.version_counter(t) == v + 1
    ref = _adapter.storage_weakref(t)
    assert not ref.expired()
    del t
    assert ref.expired()


def test_numba_maker_is_there_or_cleanly_absent():
    tiledmm._backend.numba_cuda()
    make = _adapter.numba_array_maker(0)
    assert make is None or callable(make)


def test_numba_device_arrays_through_the_adapter():
    """The pointer of a numba device array (0 where numba has none: an empty array); the simulator's arrays
    are views of the numpy arrays they wrap and are told from numpy's and torch's."""
    import numpy as np
    from types import SimpleNamespace
    assert _adapter.numba_pointer(SimpleNamespace(gpu_data=SimpleNamespace(device_pointer_value=4096))) == 4096
    assert _adapter.numba_pointer(SimpleNamespace(gpu_data=SimpleNamespace(device_pointer_value=None))) == 0
    if GPU:
        x = tiledmm._backend.numba_cuda().to_device(np.ones(3, np.float32))
        assert _adapter.numba_pointer(x) == x.__cuda_array_interface__["data"][0] != 0
        assert not _adapter.numba_is_sim_array(x)
        return
    tiledmm._backend.numba_cuda()
    a = np.zeros((2, 3), np.float32)
    x = _adapter.numba_sim_array(a)
    assert _adapter.numba_is_sim_array(x) and tuple(x.shape) == (2, 3)
    x[1, 2] = 5.0
    assert a[1, 2] == 5.0                                   # no copy: tiledmm's checker aliases through it
    assert not any(_adapter.numba_is_sim_array(y) for y in (a, torch.zeros(2)))


def test_the_simulator_hooks_see_barriers_blocks_and_shared_arrays_and_are_undone():
    """numba_sim_hooks on the lectures' tiled kernel (4x4x4, TILE_WIDTH 2: 2 x 2 blocks of 2 x 2 threads, two
    phases): every thread's barriers, every block, one shared array per launch and call site (its source line
    given; the simulator runs the blocks one after another), a correct product, and the simulator as it was
    afterwards."""
    if GPU:
        pytest.skip("numba's simulator runs in emulation")
    import threading

    import numpy as np
    from numba.cuda.simulator import kernel as simkernel, kernelapi
    from tiledmm import registry
    spec = registry.get("tiled")
    _adapter.numba_sim_block_runner()     # installed for the process (the hooks do it first): not theirs to undo
    before = (simkernel.BlockThread.syncthreads, simkernel.BlockManager.run, kernelapi.FakeCUDAShared.array)
    lock, barriers, blocks, made = threading.Lock(), [], [], []

    def on_barrier():
        with lock:
            barriers.append(_adapter.numba_sim_thread())

    def shared_array(shape, dtype, line):
        made.append((tuple(int(n) for n in np.atleast_1d(shape)), np.dtype(dtype), line))
        return np.zeros(shape, dtype)

    rng = np.random.default_rng(0)
    M, N = rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32)
    P = np.zeros((4, 4), np.float32)
    grid, block = spec.launch_config(2, 4, 4, 4)
    kernel = spec.make(2, "float32")
    with _adapter.numba_sim_hooks(on_barrier=on_barrier, shared_array=shared_array,
                                  on_block=lambda: blocks.append(1)):
        kernel[grid, block](M, N, P)
    assert np.allclose(P, M @ N, rtol=1e-5, atol=1e-5)
    threads = {(b, t, tid) for b, t, tid in barriers}
    assert threads == {((bx, by, 0), (tx, ty, 0), tx + 2 * ty) for bx in (0, 1) for by in (0, 1)
                       for tx in (0, 1) for ty in (0, 1)}
    assert len(barriers) == 16 * 2 * spec.barriers_per_phase          # 16 threads, two phases
    assert len(blocks) == 4
    assert len(made) == 2 and {(shape, dtype) for shape, dtype, _ in made} == {((2, 2), np.dtype(np.float32))}
    assert all("cuda.shared.array" in line for _, _, line in made) and len({line for *_, line in made}) == 2
    assert (simkernel.BlockThread.syncthreads, simkernel.BlockManager.run, kernelapi.FakeCUDAShared.array) == before


def test_the_simulators_pooled_block_runner_keeps_numbas_semantics():
    """numba_sim_block_runner: every simulated thread runs once, with its own indices; a block without barriers
    runs on one pooled Python thread, reused by the next launch; a barrier holds every live thread (threads that
    returned early do not count), syncthreads_count counts the block; a thread's exception names it, ends the
    launch, and the pool runs the next launch as before, on no more Python threads."""
    if GPU:
        pytest.skip("numba's simulator runs in emulation")
    import threading

    import numpy as np

    from . import sim_kernels as K
    assert _adapter.numba_sim_block_runner()
    K.ran.clear()
    out = np.zeros((2, 64), np.int64)
    K.plain[2, (16, 4)](out)
    assert (out == np.arange(64) + 100 * np.arange(2)[:, None]).all()
    assert sorted((b, t) for b, t, _ in K.ran) == [(b, t) for b in range(2) for t in range(64)]
    assert [t for b, t, _ in K.ran if b == 0] == list(range(64))          # threadIdx.x fastest, as warps
    first = {ident for *_, ident in K.ran}
    assert len(first) == 1 and threading.get_ident() not in first
    K.ran.clear()
    K.plain[1, 8](out)
    assert {ident for *_, ident in K.ran} == first

    out, counts = np.zeros(32, np.int64), np.zeros(32, np.int64)
    K.barriers[1, 32](out, counts)
    want = (np.arange(32) + 1) % 32
    want[:30] += 2 * (29 - np.arange(30))
    assert (out == want).all() and (counts == 11).all()
    pooled = threading.active_count()

    with pytest.raises(IndexError, match=r"tid=\[5, 0, 0\] ctaid=\[0, 0, 0\]"):
        K.fails[1, 16](np.zeros(16, np.float32))
    out, counts = np.zeros(32, np.int64), np.zeros(32, np.int64)
    K.barriers[1, 32](out, counts)
    assert (out == want).all() and (counts == 11).all()
    assert threading.active_count() <= pooled


@pytest.mark.gpu
def test_gpu_self_test_passes_on_the_checked_triton(monkeypatch):
    """On the GPU image (Triton 3.6): the probe kernel's three launches agree and direct launches are on."""
    import triton
    if triton.__version__ not in _adapter.TRITON_CHECKED:
        pytest.skip(f"Triton {triton.__version__} is not a checked version")
    assert _adapter._self_test() == ""
    assert _adapter.triton_direct()
    stream = _adapter.raw_stream(torch.cuda.current_device())
    assert stream == torch.cuda.current_stream().cuda_stream
    assert _adapter.device_getter()() == torch.cuda.current_device()


# -- the C launch under Triton's tensor-descriptor wrapper (Gluon kernels: _adapter.tensordesc_launch) --

_BASE_ARGS_FORMAT_LEN = 13          # Triton 3.6's driver.py: the launcher's arguments before the kernel's


def make_tensordesc_arg(arg, metadata):     # a stand-in for Triton's: (tensor map, *shape, *strides)
    return [("map", arg.base.data_ptr(), tuple(arg.shape), tuple(arg.strides), metadata["swizzle"]),
            *arg.shape, *arg.strides]


def _wrap_handle_tensordesc(launcher, tensordesc_indices, tensordesc_meta):   # Triton 3.6's wrapper
    def inner(*args):
        final_args = list(args[:_BASE_ARGS_FORMAT_LEN])
        tensordesc_idx = 0
        for i, arg in enumerate(args[_BASE_ARGS_FORMAT_LEN:]):
            if i in tensordesc_indices:
                final_args.extend(make_tensordesc_arg(arg, tensordesc_meta[tensordesc_idx]))
                tensordesc_idx += 1
            else:
                final_args.append(arg)
        return launcher(*final_args)
    return inner


def _other_wrapper(launcher, tensordesc_indices, tensordesc_meta):
    def inner(*args):
        return launcher(*args)
    return inner


class _Real:                        # a host descriptor as Gluon builds it
    def __init__(self, t):
        self.base, self.shape, self.strides, self.padding = t, t.shape, t.stride(), "zero"


def _td_compiled(wrapper, metas, calls):
    launcher = _KnownLauncher(calls)
    raw = lambda *args: calls.append(("raw",) + args)   # noqa: E731
    launcher.launch = wrapper(raw, {0, 2}, metas)
    return _compiled(launcher), raw


def test_tensordesc_launch_expands_descriptors_as_tritons_wrapper(monkeypatch):
    calls = []
    metas = [{"swizzle": 128}, {"swizzle": 64}]
    ck, raw = _td_compiled(_wrap_handle_tensordesc, metas, calls)
    a, b = torch.zeros(8, 16), torch.zeros(4, 32)
    monkeypatch.setattr(_adapter, "_direct", True)
    got = _adapter.tensordesc_launch(ck, [_Real(a), _Real(b)])
    assert isinstance(got, _adapter.BoundLaunch) and got.launch is raw and got.scratch_bytes == 0
    assert (got.cooperative, got.pdl, got.function, got.packed) == (False, False, "fn", "meta")
    assert got.metadata == metas and got.params == ("a_desc", "n", "b_desc")
    expand = got.expand
    base = (1, 1, 1, 7, "fn", False, False, None, None, "meta", None, None, None)
    ck.run.launch(*base, _Real(a), 5, _Real(b))                       # Triton's own path
    got(1, 1, 1, 7, None, *expand(0, a.data_ptr(), (8, 16), (16, 1)), 5, *expand(1, b.data_ptr(), (4, 32), (32, 1)))
    assert calls[0] == calls[1] and calls[0][15:20] == (8, 16, 16, 1, 5)
    # no tensor is kept alive by an expansion: only its pointer
    assert expand(0, 4096, [2, 3], [3, 1]) == [("map", 4096, (2, 3), (3, 1), 128), 2, 3, 3, 1]


def test_tensordesc_launch_without_descriptors_trusts_the_index(monkeypatch):
    """descs None (a kernel from the index, bound before): the same launch, no comparison -- but the
    wrapper's body and the tensor-map metadata are still required."""
    calls = []
    metas = [{"swizzle": 128}, {"swizzle": 64}]
    ck, raw = _td_compiled(_wrap_handle_tensordesc, metas, calls)
    monkeypatch.setattr(_adapter, "_direct", True)
    got = _adapter.tensordesc_launch(ck, None)
    assert got is not None and got.launch is raw and got.metadata == metas
    assert got.expand(1, 4096, [2, 3], [3, 1]) == [("map", 4096, (2, 3), (3, 1), 64), 2, 3, 3, 1]
    assert _adapter.tensordesc_launch(_td_compiled(_other_wrapper, metas, calls)[0], None) is None
    assert _adapter.tensordesc_launch(_td_compiled(_wrap_handle_tensordesc, [None, None], calls)[0], None) is None


def test_tensordesc_launch_declines_what_it_does_not_know(monkeypatch):
    calls = []
    metas = [{"swizzle": 128}, {"swizzle": 64}]
    descs = [_Real(torch.zeros(8, 16)), _Real(torch.zeros(4, 32))]
    ck, _ = _td_compiled(_wrap_handle_tensordesc, metas, calls)
    monkeypatch.setattr(_adapter, "_direct", False)
    assert _adapter.tensordesc_launch(ck, descs) is None               # direct launches off
    monkeypatch.setattr(_adapter, "_direct", True)
    assert _adapter.tensordesc_launch(ck, descs[:1]) is None           # not the kernel's descriptors
    assert _adapter.tensordesc_launch(_td_compiled(_other_wrapper, metas, calls)[0], descs) is None
    assert _adapter.tensordesc_launch(_td_compiled(_wrap_handle_tensordesc, [None, None], calls)[0], descs) is None
    ck.run.global_scratch_size = 128                                   # scratch: Triton's launcher allocates it
    assert _adapter.tensordesc_launch(ck, descs) is None
