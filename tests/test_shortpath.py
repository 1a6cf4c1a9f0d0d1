"""The Triton family's short path keyed by shape class (kernels/block/shortpath.py and
fastlaunch.ClassLaunch): a new M, N or K of a seen class launches the compiled kernel with its
sizes, strides and grid computed per call -- no dispatcher, no variant Python."""
import functools

import pytest
import torch

import tiledmm
from tiledmm import _adapter
from tiledmm.kernels.block import fastlaunch, shortpath
from tiledmm.kernels.block import dispatch as bm
from tiledmm.kernels.block import variants as V

from .standins import Compiled, Launcher, direct_launches


CFG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 8, "num_warps": 4, "num_stages": 2}


@pytest.fixture
def standin(monkeypatch):
    """The variants' FastKernels as on a GPU, with a stand-in compiled kernel per specialisation:
    returns (C launches recorded, compilations made)."""
    calls, compiled = [], []

    def slow(self, grid, args):
        ck = Compiled(Launcher(calls, 64 if "NUM_SMS" in self.meta else 0), f"fn{len(compiled)}")
        compiled.append(tuple(map(_adapter.arg_key, args)))
        return ck
    direct_launches(monkeypatch, slow)
    V._fast.cache_clear()
    yield calls, compiled
    V._fast.cache_clear()


def _variant(launch, precision="ieee", config=CFG):
    fn = functools.partial(launch, precision=precision, config=config)
    fn.replayable = True
    return fn


def _operands(M, K, N, batch=None, dtype=torch.float32):
    pre = (batch,) if batch else ()
    return (torch.randn(*pre, M, K, dtype=dtype), torch.randn(*pre, K, N, dtype=dtype),
            torch.empty(*pre, M, N, dtype=dtype))


@pytest.mark.parametrize("launch,batch", [(V._blocked_launch, None), (V._blocked_launch, 3), (V._tma_launch, None)])
def test_class_launch_passes_what_the_variant_itself_would(standin, launch, batch):
    """Bound on one call, the class launch's C call for a new M (and N, K) of the class equals the
    variant's own launch of that call, argument for argument, grid included."""
    calls, compiled = standin
    fn = _variant(launch)
    a, b, c = _operands(40, 24, 72, batch)
    cls, exact = fastlaunch.bind(fn, a, b, c, 1.0, 0.0)
    assert cls is not None and exact is None and len(compiled) == 1
    for M, K, N in ((56, 20, 68), (200, 26, 90), (33, 18, 66)):   # same specialisation: no multiple of 16
        a2, b2, c2 = _operands(M, K, N, batch)
        fn(a2, b2, c2, alpha=1.0, beta=0.0)        # (batch strides M*K...: maybe a new specialisation)
        calls.clear()
        fn(a2, b2, c2, alpha=1.0, beta=0.0)                          # the variant's own (direct) launch
        own = [x for x in calls]
        calls.clear()
        assert cls(9, fastlaunch._env(a2, b2, c2, 1.0, 0.0)) is True
        mine = list(calls)
        assert len(own) == len(mine) == 1
        o, m = list(own[0]), list(mine[0])
        if launch is V._tma_launch:     # global scratch: Triton's launcher allocates it (the stand-in's does
            assert m[7] is not None     # not), the class launch passes its kept buffer
            o[7] = m[7] = "scratch"
        assert [v.data_ptr() if hasattr(v, "data_ptr") else v for v in o] == m, (M, K, N)
    if not batch:                                  # 2-D: no size or stride here is 1 or a multiple of 16
        assert len(compiled) == 1                  # one compiled kernel served them all


def test_a_new_specialisation_is_compiled_by_the_variant_then_bound(standin):
    calls, compiled = standin
    fn = _variant(V._blocked_launch)
    a, b, c = _operands(40, 24, 72)
    cls, _ = fastlaunch.bind(fn, a, b, c, 1.0, 0.0)
    a2, b2, c2 = _operands(48, 24, 72)            # M % 16 == 0: Triton specialises on it
    calls.clear()
    assert cls(9, fastlaunch._env(a2, b2, c2, 1.0, 0.0)) is False and calls == []      # not compiled: nothing launched
    fn(a2, b2, c2, alpha=1.0, beta=0.0)
    assert len(compiled) == 2
    calls.clear()
    assert cls(9, fastlaunch._env(a2, b2, c2, 1.0, 0.0)) is True and calls[0][4] == "fn1"


def test_a_kernel_with_other_parameters_is_bound_per_signature(standin):
    calls, _ = standin

    def kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, BLOCK_M: "constexpr", BLOCK_N: "constexpr"):  # noqa: F821
        pass

    class JIT:
        fn = kernel

    fk = fastlaunch.FastKernel(JIT, {"BLOCK_M": 32, "BLOCK_N": 32}, 4, 3)

    def variant(x, y, z, *, alpha, beta):
        fk((2,), x, y, z, 40, 72, 24, x.stride(0))
    variant.replayable = True
    a, b, c = _operands(40, 24, 72)
    cls, exact = fastlaunch.bind(variant, a, b, c, 1.0, 0.0)
    assert cls is None and exact is not None          # 'lda' is no name the class launch knows


def test_a_new_m_of_a_seen_class_takes_the_short_path_without_the_dispatcher(standin, monkeypatch):
    """TorchPlan (the plan tiledmm.matmul calls first): the dispatcher resolves once per class;
    new M of the class -- and new tensors -- launch through the class launch."""
    calls, compiled = standin
    resolutions = []

    def resolved(a, b, c, precision, alpha, beta, passes=0):
        resolutions.append(a.shape)
        return _variant(V._blocked_launch)
    monkeypatch.setattr(bm, "resolved", resolved)
    a, _, _ = _operands(40, 24, 72)
    plan = shortpath.TorchPlan(a, None)
    plan.current = lambda: None                        # CPU tensors stand in for one device's
    plan.stream = lambda index: 9
    for M in (40, 56, 63, 41, 57):                     # one class: 32 <= M < 64, no multiple of 16
        a, b, _ = _operands(M, 24, 72)
        calls.clear()
        c = plan(a, b, None, 1, 0.0)
        assert c.shape == (M, 72)
        if M != 40:                                    # (the first call compiled: Triton's own launch)
            assert len(calls) == 1 and calls[0][16] == M and calls[0][13] == a.data_ptr(), M
    assert len(resolutions) == 1 and len(compiled) == 1
    a, b, _ = _operands(72, 24, 72)                    # another class: resolved again
    plan(a, b, None, 1.0, 0.0)
    assert len(resolutions) == 2
    out = torch.empty(72, 72)
    plan(a, b, out, 2.0, 0.5)                          # alpha != 1, beta != 0: another key
    assert len(resolutions) == 3
    assert plan(a, b, None, 1.0, 0.5) is None          # beta without out: the full path's error
    assert plan(a, b.double(), None, 1.0, 0.0) is None


def test_an_out_overlapping_an_input_takes_the_full_path(standin, monkeypatch):
    """out= that shares memory with a or b (whole or in part) leaves the short path (None: the full
    path's aliasing rules); an out just past an input's last element takes it."""
    calls, _ = standin
    monkeypatch.setattr(bm, "resolved", lambda *x, **k: _variant(V._blocked_launch))
    plan = shortpath.TorchPlan(torch.empty(1, 1), None)
    plan.current = lambda: None
    plan.stream = lambda index: 9
    mem = torch.empty(40 * 24 + 40 * 72)
    a, b = mem[:960].view(40, 24), torch.randn(24, 72)
    for out in (mem[900:3780].view(40, 72), mem[0:2880].view(40, 72)):     # a's tail; a's whole
        assert plan(a, b, out, 1.0, 0.0) is None
    b2 = torch.randn(24, 24)
    a3, out3 = torch.randn(24, 24), torch.empty(24, 24)
    assert plan(a3, b2, b2, 1.0, 0.0) is None                              # out is b
    past = mem[960:].view(40, 72)                                          # starts where a ends
    assert plan(a, b, past, 1.0, 0.0) is past and plan(a, b, past, 1.0, 0.0) is past
    assert plan(a3, b2, out3, 1.0, 0.0) is out3
    assert calls


def test_class_keys_carry_the_device_and_the_layout():
    a, b, c = _operands(40, 24, 72)
    key = functools.partial(bm.class_key, sa=a.shape, sb=b.shape, st_a=a.stride(), st_b=b.stride(),
                            pa=0, pb=16, pc=32, m=4, alpha=1.0, beta=0.0)
    base = key(0, st_c=c.stride())
    assert base != key(1, st_c=c.stride())                             # another device
    assert base != key(0, st_c=(1, 40))                                # a column-major out
    assert base == key(0, st_c=(76, 1))            # a padded out, rows 16-byte aligned as before: one class
    assert base != key(0, st_c=(74, 1))            # rows no longer 16-byte aligned


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_new_m_in_a_seen_class_is_right_and_unplanned(dtype, monkeypatch):
    """Through tiledmm.matmul on the GPU: M drawn within one class resolves once, and every result
    matches float64."""
    from tiledmm import api
    monkeypatch.setattr(api, "_fast_plans", {})           # no plan from an earlier test
    seen = []
    real = bm.resolved
    monkeypatch.setattr(bm, "resolved", lambda *a: seen.append(a[0].shape) or real(*a))
    w = torch.randn(512, 384, device="cuda", dtype=dtype)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    for M in (600, 700, 513, 1000, 777, 1023, 514):
        x = torch.randn(M, 512, device="cuda", dtype=dtype)
        y = tiledmm.matmul(x, w)
        ref = x.double() @ w.double()
        assert ((y.double() - ref).norm() / ref.norm()).item() < tol, M
    assert len(seen) == 1


def test_without_a_c_launch_the_bind_is_per_signature_through_tritons_launcher(standin, monkeypatch):
    """A launcher whose body tiledmm does not know: no class launch; the exact-signature launch goes
    through Triton's Python launcher (CompiledKernel.run)."""
    calls, _ = standin
    monkeypatch.setattr(_adapter, "bind_compiled", lambda ck, checked=True: None)
    a, b, c = _operands(40, 24, 72)
    cls, exact = fastlaunch.bind(_variant(V._blocked_launch), a, b, c, 1.0, 0.0)
    assert cls is None and exact is not None
    calls.clear()
    exact(9, a.data_ptr(), b.data_ptr(), c.data_ptr())
    assert len(calls) == 1 and calls[0][3] == 9 and calls[0][13] == a.data_ptr()


def test_class_key_separates_what_the_plan_key_separates():
    """The short path's class key is finer than the dispatcher's plan key: 4096^3 and 5000^3 bf16
    share a shape class but not 128-byte rows (plan_key's rows128 field: the Gluon kernel's
    speed), so one's bound launch must never serve the other."""
    def keys(n):
        a = torch.empty(n, n, dtype=torch.bfloat16)
        return (bm.plan_key(a, a, a, "none", 1.0, 0.0),
                bm.class_key(0, a.shape, a.shape, a.stride(), a.stride(), a.stride(), 0, 0, 0, 8, 1.0, 0.0))
    (p1, c1), (p2, c2) = keys(4096), keys(5000)
    assert p1 != p2 and c1 != c2
    assert keys(4096)[1] == keys(4096 + 64)[1]        # same class, both 128-byte rows: one key


def _short_path_call(layout: int, M: int, K: int, N: int):
    """A call the short path takes (TorchPlan: one dtype in and out, equal ranks) of these sizes, in the
    random layout numbered ``layout``: dtype, batch, each operand row- or column-major with padded rows
    and an offset base, precision, alpha, beta."""
    import random
    rng = random.Random(layout)
    dtype = rng.choice([torch.float32, torch.float16, torch.bfloat16])
    batch = rng.choice([(), (), (1,), (3,)])
    shapes = {"a": (M, K), "b": (K, N), "c": (M, N)}
    out = []
    for name in "abc":
        rows, cols = shapes[name]
        lead, off, cmajor = rng.choice([0, 0, 1, 3, 8, 64]), rng.choice([0, 0, 1, 2, 8]), rng.random() < 0.3
        if cmajor:
            out.append(torch.zeros(*batch, cols, rows + lead + off, dtype=dtype)[..., off:off + rows].transpose(-1, -2))
        else:
            out.append(torch.zeros(*batch, rows, cols + lead + off, dtype=dtype)[..., off:off + cols])
    precision = "none" if dtype != torch.float32 else rng.choice(["ieee", "tf32"])
    return (*out, precision, rng.choice([1.0, 2.0, 1]), rng.choice([0.0, 0.5, 0]))


def test_one_class_key_is_one_plan_key():
    """For many random calls, the class key the short path computes (``TorchPlan.__call__``'s values:
    shapes, strides, pointers, 16 // element size) determines the dispatcher's plan key: two calls of
    one class never resolve to two choices (plan_key is computed from the class: ``plan_of``). Each
    random layout is called at four sizes of one log2 bucket, so many classes hold several calls."""
    import random
    rng = random.Random(47)
    plans, calls = {}, {}
    for layout in range(400):
        bits = [rng.randrange(8) for _ in range(3)]
        for _ in range(4):
            M, K, N = (rng.randrange(2 ** e, 2 ** (e + 1)) for e in bits)
            a, b, c, precision, alpha, beta = _short_path_call(layout, M, K, N)
            cls = (a.dtype, precision, bm.class_key(a.device.index, a.shape, b.shape, a.stride(), b.stride(),
                                                    c.stride(), a.data_ptr(), b.data_ptr(), c.data_ptr(),
                                                    max(1, 16 // a.element_size()), alpha, beta))
            key = bm.plan_key(a, b, c, precision, alpha, beta)
            assert plans.setdefault(cls, key) == key, (cls, plans[cls], key)
            calls.setdefault(cls, set()).add((M, K, N))
    assert sum(len(sizes) > 1 for sizes in calls.values()) > 100      # classes met at several sizes


def test_plan_keys_shape_class_is_the_registrys():
    """plan_of's log2 buckets (bit lengths) are registry.shape_class's (the shipped tables' and the tuning
    store's classes), around every power of two a size can reach, and for empty sizes."""
    from tiledmm.registry import shape_class
    sizes = [0] + [x for e in range(40) for x in (2 ** e - 1, 2 ** e, 2 ** e + 1) if x > 0]
    for m in sizes:
        cls = bm.class_key(None, (m, 3), (3, 5), (3, 1), (5, 1), (5, 1), 0, 0, 0, 4, 1.0, 0.0)
        assert bm.plan_of(torch.float32, torch.float32, "ieee", cls)[10] == shape_class(m, 5, 3), m
