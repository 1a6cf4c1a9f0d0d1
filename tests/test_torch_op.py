"""torch.ops.tiledmm: the registered operators, their fake implementations, autograd, the fused
epilogues against float64, torch.compile(fullgraph=True), and tiledmm.matmul's routing of calls
that need gradients. In emulation the Triton interpreter runs on CPU tensors: toy sizes."""
from __future__ import annotations


import pytest

import tiledmm
from tests.conftest import GPU

torch = pytest.importorskip("torch")
import tiledmm.ops  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from tiledmm.ops import _impl, _library  # noqa: E402

DEV = "cuda" if GPU else "cpu"
ACTS = ["none", "relu", "gelu", "gelu_tanh", "silu"]
TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def _t(*shape, dtype=torch.float32, grad=False, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype).to(DEV).requires_grad_(grad)


def _ref(a, b, c, bias, alpha, beta, bias_dim, act):
    """float64 reference of act(alpha * a @ b + beta * c + bias)."""
    r = alpha * (a.double() @ b.double())
    if c is not None:
        r = r + beta * c.double()
    if bias is not None:
        r = r + (bias.double() if bias_dim == -1 else bias.double()[:, None])
    return _impl.activation(r, act)


# -- operators and fake implementations --------------------------------------------------------

@pytest.mark.parametrize("sa,sb", [((2, 3, 4), (4, 5)), ((5,), (5, 3)), ((2, 1, 3, 4), (5, 4, 2))])
def test_opcheck_matmul(sa, sb):
    a, b = _t(*sa, grad=True), _t(*sb, grad=True, seed=1)
    torch.library.opcheck(torch.ops.tiledmm.matmul.default, (a, b, None, None))


@pytest.mark.parametrize("act", ["gelu", "relu"])
@pytest.mark.parametrize("keep", [False, True])
def test_opcheck_gemm(act, keep):
    a, b, c, bias = _t(3, 4, grad=True), _t(4, 5, grad=True, seed=1), _t(3, 5, grad=True, seed=2), _t(5, grad=True)
    torch.library.opcheck(torch.ops.tiledmm.gemm.default, (a, b, c, bias, 0.5, 2.0, -1, act, keep, None, None))


def test_matmul_op_matches_torch_and_keeps_inputs():
    a, b = _t(2, 3, 4), _t(4, 5, seed=1)
    a0, b0 = a.clone(), b.clone()
    y = torch.ops.tiledmm.matmul(a, b)
    torch.testing.assert_close(y, a @ b, rtol=1e-5, atol=1e-5)
    assert torch.equal(a, a0) and torch.equal(b, b0)


# -- autograd --------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("sa,sb", [((4,), (4, 3)), ((3, 4), (4,)), ((2, 1, 2, 2), (2, 2, 1)), ((3, 2), (2, 2, 3))])
def test_gradcheck_matmul_float64(sa, sb):
    a, b = _t(*sa, dtype=torch.float64, grad=True), _t(*sb, dtype=torch.float64, grad=True, seed=1)
    assert torch.autograd.gradcheck(lambda x, y: torch.ops.tiledmm.matmul(x, y), (a, b), fast_mode=True)


@pytest.mark.parametrize("act,bias_dim,keep", [("none", -1, False), ("relu", -1, False), ("gelu", -1, False),
                                              ("gelu_tanh", -1, True), ("silu", -1, True), ("gelu", -2, True)])
def test_gradcheck_gemm_float64(act, bias_dim, keep):
    """keep False for gelu: the backward computes the pre-activation again; True: the forward kept it."""
    a, b = _t(3, 4, dtype=torch.float64, grad=True), _t(4, 2, dtype=torch.float64, grad=True, seed=1)
    c = _t(3, 2, dtype=torch.float64, grad=True, seed=2)
    bias = _t(2 if bias_dim == -1 else 3, dtype=torch.float64, grad=True, seed=3)

    def f(x, y, z, w):
        return torch.ops.tiledmm.gemm(x, y, z, w, 0.75, -1.5, bias_dim, act, keep, None, None)[0]
    assert torch.autograd.gradcheck(f, (a, b, c, bias), fast_mode=True)


def test_gradcheck_broadcast_c_and_batched_bias():
    a, b = _t(2, 3, 4, dtype=torch.float64, grad=True), _t(4, 2, dtype=torch.float64, grad=True, seed=1)
    c, bias = _t(3, 1, dtype=torch.float64, grad=True, seed=2), _t(2, dtype=torch.float64, grad=True, seed=3)

    def f(x, y, z, w):
        return torch.ops.tiledmm.gemm(x, y, z, w, 1.0, 0.5, -1, "silu", True, None, None)[0]
    assert torch.autograd.gradcheck(f, (a, b, c, bias), fast_mode=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("act", ACTS)
def test_gradients_match_torch(dtype, act):
    x, w, bias = _t(2, 5, 8, dtype=dtype, grad=True), _t(6, 8, dtype=dtype, grad=True, seed=1), \
        _t(6, dtype=dtype, grad=True, seed=2)
    gy = _t(2, 5, 6, dtype=dtype, seed=3)
    from tiledmm.nn.functional import linear
    y = linear(x, w, bias, act)
    y.backward(gy)
    xr, wr, br = (t.detach().double().requires_grad_() for t in (x, w, bias))
    yr = _impl.activation(torch.nn.functional.linear(xr, wr, br), act)
    yr.backward(gy.double())
    tol = TOL[dtype] * 4
    for got, want in ((y, yr), (x.grad, xr.grad), (w.grad, wr.grad), (bias.grad, br.grad)):
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * max(1.0, want.abs().max().item()))


@pytest.mark.parametrize("x_shape", [(8, 16), (2, 4, 16)])
@pytest.mark.parametrize("x_grad", [True, False])
def test_linear_weight_gradient_in_the_weights_layout(x_shape, x_grad):
    """linear multiplies by weight.mT: the weight's gradient is made as dYᵀ x (torch's own linear
    backward), so the tensor AccumulateGrad receives has the weight's strides and is stored without
    a copy -- also where x needs no gradient (x's stand-in) and where a batch is folded into K."""
    from tiledmm.nn.functional import linear
    x, w, bias = _t(*x_shape, grad=x_grad), _t(24, 16, grad=True, seed=1), _t(24, grad=True, seed=2)
    gy = _t(*x_shape[:-1], 24, seed=3)
    seen = []
    w.register_hook(lambda g: seen.append(g.stride()))
    linear(x, w, bias).backward(gy)
    assert seen == [w.stride()] and w.grad.is_contiguous()
    xr, wr, br = (t.detach().double().requires_grad_() for t in (x, w, bias))
    torch.nn.functional.linear(xr, wr, br).backward(gy.double())
    for got, want in ((w.grad, wr.grad), (bias.grad, br.grad)) + (((x.grad, xr.grad),) if x_grad else ()):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4 * max(1.0, want.abs().max().item()))


@pytest.mark.parametrize("b_grad", [True, False])
def test_transposed_operand_gradient_in_its_layout(b_grad):
    """tiledmm.matmul(a.mT, b) with a leaf a: a's gradient is made as (b dCᵀ)ᵀ, in a's strides."""
    a, b = _t(16, 8, grad=True), _t(16, 24, grad=b_grad, seed=1)
    gy = _t(8, 24, seed=2)
    seen = []
    a.register_hook(lambda g: seen.append(g.stride()))
    tiledmm.matmul(a.mT, b).backward(gy)
    assert seen == [a.stride()] and a.grad.is_contiguous()
    ar, br = (t.detach().double().requires_grad_() for t in (a, b))
    (ar.mT @ br).backward(gy.double())
    for got, want in ((a.grad, ar.grad),) + (((b.grad, br.grad),) if b_grad else ()):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4 * max(1.0, want.abs().max().item()))


def test_gradient_of_alpha_and_out_beta_term():
    a, b = _t(3, 4, dtype=torch.float64, grad=True), _t(4, 2, dtype=torch.float64, grad=True, seed=1)
    alpha = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    c0 = _t(3, 2, dtype=torch.float64, grad=True, seed=2)
    y = tiledmm.ops.maybe_autograd(a, b, None, alpha, 0.0, None, None, None, None, None, {})
    y.sum().backward()
    torch.testing.assert_close(alpha.grad, (a.detach() @ b.detach()).sum().to(alpha.device))
    out = c0 * 1.0                                       # a non-leaf out: beta * out's gradient reaches c0
    r = tiledmm.ops.maybe_autograd(a, b, out, 2.0, 3.0, None, None, None, None, None, {})
    assert r is out
    r.sum().backward()
    torch.testing.assert_close(c0.grad, torch.full_like(c0, 3.0))


def test_maybe_autograd_declines_and_refuses():
    a, b = _t(3, 4), _t(4, 2, seed=1)
    assert tiledmm.ops.maybe_autograd(a, b, None, 1.0, 0.0, None, None, None, None, None, {}) is None
    with torch.no_grad():
        assert tiledmm.ops.maybe_autograd(a.requires_grad_(), b, None, 1.0, 0.0, None, None, None, None, None,
                                          {}) is None
    with pytest.raises(tiledmm.TiledmmError, match="not differentiable"):
        tiledmm.ops.maybe_autograd(a, b, None, 1.0, 0.0, None, 8, None, None, None, {})
    leaf = _t(3, 2, grad=True)
    with pytest.raises(tiledmm.TiledmmError, match="leaf"):
        tiledmm.ops.maybe_autograd(a, b, leaf, 1.0, 1.0, None, None, None, None, None, {})


def test_api_matmul_records_the_graph():
    a, b = _t(3, 4, grad=True), _t(4, 2, seed=1)
    y = tiledmm.matmul(a, b)
    assert type(y.grad_fn).__name__ == "_MatmulFunctionBackward", y.grad_fn     # tiledmm's, through api's hook
    y.sum().backward()
    torch.testing.assert_close(a.grad, torch.ones(3, 2, device=DEV) @ b.T)


@pytest.mark.slow
def test_gradcheck_gemm_both_outputs():
    """keep_pre: the loss reads y and the pre-activation z (gz reaches the backward); z alone too."""
    a, b = _t(3, 4, dtype=torch.float64, grad=True), _t(4, 2, dtype=torch.float64, grad=True, seed=1)
    bias = _t(2, dtype=torch.float64, grad=True, seed=3)

    def both(x, y, w):
        out, z = torch.ops.tiledmm.gemm(x, y, None, w, 1.0, 0.0, -1, "silu", True, None, None)
        return out + 2 * z
    assert torch.autograd.gradcheck(both, (a, b, bias), fast_mode=True)
    assert torch.autograd.gradcheck(
        lambda x, y, w: torch.ops.tiledmm.gemm(x, y, None, w, 1.0, 0.0, -1, "gelu", True, None, None)[1],
        (a, b, bias), fast_mode=True)


class _OpLog(TorchDispatchMode):
    """The names of the operators dispatched while it is active."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("act", ["none", "gelu"])
def test_eager_calls_skip_the_dispatcher(act):
    """In eager the layers call the kernels through a plain autograd.Function (forward and the
    backward's products): no tiledmm:: operator is dispatched; the same results as torch."""
    from tiledmm.nn.functional import linear
    x, w, bias = _t(2, 3, 4, grad=True), _t(5, 4, grad=True, seed=1), _t(5, grad=True, seed=2)
    gy = _t(2, 3, 5, seed=3)
    with _OpLog() as log:
        y = linear(x, w, bias, act)
        y.backward(gy)
        with torch.no_grad():
            y0 = linear(x, w, bias, act)
        m = tiledmm.matmul(x, w.mT)
    assert not [n for n in log.names if n.startswith("tiledmm")], log.names
    assert type(y.grad_fn).__name__ == "_GemmFunctionBackward" and y0.grad_fn is None
    assert type(m.grad_fn).__name__ == "_MatmulFunctionBackward"
    xr, wr, br = (t.detach().requires_grad_() for t in (x, w, bias))
    yr = _impl.activation(torch.nn.functional.linear(xr, wr, br), act)
    yr.backward(gy)
    for got, want in ((y, yr), (y0, yr), (m, xr @ wr.mT), (x.grad, xr.grad), (w.grad, wr.grad), (bias.grad, br.grad)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore:There is a performance drop")
def test_vmap_goes_through_the_operators():
    """torch.vmap's batched tensors have no data pointer: those calls take the operators (torch's
    per-sample fallback), never the kernels directly."""
    from tiledmm.nn.functional import linear
    a, b, bias = _t(3, 4, 5), _t(5, 2, seed=1), _t(2, seed=2)
    for f in (lambda x: linear(x, b.mT, bias, "relu"), lambda x: tiledmm.ops._library.matmul(x, b)):
        want = torch.stack([f(x) for x in a])
        torch.testing.assert_close(torch.vmap(f)(a), want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_double_backward_through_the_eager_matmul():
    """create_graph: the backward's products are recorded (the Function again): gradgradcheck
    (float64 on the SIMT "naive" kernel: the simulator's quickest)."""
    a, b = _t(3, 4, dtype=torch.float64, grad=True), _t(4, 2, dtype=torch.float64, grad=True, seed=1)
    assert torch.autograd.gradgradcheck(lambda x, y: _library.matmul(x, y, "naive"), (a, b), fast_mode=True)


@pytest.mark.slow
def test_double_backward_with_transposed_operands():
    """Both operands transposed views (their gradients made transposed, in their layouts), alpha != 1:
    the recorded products give the same second derivatives."""
    a, b = _t(4, 3, dtype=torch.float64, grad=True), _t(2, 4, dtype=torch.float64, grad=True, seed=1)

    def f(x, y):
        return _library.gemm(x.mT, y.mT, None, None, 0.5, 0.0, -1, "none", False, "naive", None)
    assert torch.autograd.gradgradcheck(f, (a, b), fast_mode=True)


@pytest.mark.slow
@pytest.mark.parametrize("act,keep", [("none", False), ("gelu", True), ("silu", False), ("relu", False)])
def test_double_backward_through_the_eager_functions(act, keep):
    """create_graph: the backward's products are recorded (the Functions again): gradgradcheck
    (float64 on the SIMT "naive" kernel: the simulator's quickest; its epilogue is torch's)."""
    a, b = _t(3, 4, dtype=torch.float64, grad=True), _t(4, 2, dtype=torch.float64, grad=True, seed=1)
    c, bias = _t(1, 2, dtype=torch.float64, grad=True, seed=2), _t(2, dtype=torch.float64, grad=True, seed=3)

    def f(x, y, z, w):
        return _library.gemm(x, y, z, w, 0.5, 2.0, -1, act, keep, "naive", None)
    assert torch.autograd.gradgradcheck(f, (a, b, c, bias), fast_mode=True)


@pytest.mark.parametrize("c_shape,beta,as_bias", [((1, 7), 1.0, True), ((7,), 1.0, True), ((1, 1, 7), 1.0, True),
                                                  ((1, 7), 0.5, False), ((9, 7), 1.0, False), ((2, 1, 7), 1.0, False)])
def test_row_broadcast_c_is_the_fused_bias(c_shape, beta, as_bias, monkeypatch):
    """C broadcast along rows with beta 1 reaches the kernel as a bias (no full-size copy of it);
    any other C is C. The same results either way."""
    a, b, c = _t(2, 9, 12), _t(12, 7, seed=1), _t(*c_shape, seed=2)
    seen = []
    real = _impl._fused
    monkeypatch.setattr(_impl, "_fused", lambda *args: seen.append(args) or real(*args))
    y = _impl.gemm(a, b, c, None, 1.5, beta, -1, "relu", None, None)
    (_, _, out, bias, _, beta_used, *_), = seen
    assert (bias is not None and tuple(bias.shape) == (7,) and beta_used == 0.0) == as_bias
    assert bias is not None or beta_used == beta
    want = _ref(a, b, c, None, 1.5, beta, -1, "relu")
    torch.testing.assert_close(y.double(), want, rtol=1e-4, atol=1e-4)


# -- fused epilogues against float64 ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("bias_dim,alpha,beta", [(-1, 1.0, 0.0), (-2, 1.0, 0.0), (-1, 0.5, 2.0), (None, -1.5, 1.0)])
def test_fused_epilogue_against_float64(dtype, act, bias_dim, alpha, beta, monkeypatch):
    a, b, c = _t(2, 9, 12, dtype=dtype), _t(12, 7, dtype=dtype, seed=1), _t(2, 9, 7, dtype=dtype, seed=2)
    bias = None if bias_dim is None else _t(7 if bias_dim == -1 else 9, dtype=dtype, seed=3)
    fused = []
    real = _impl._fused
    monkeypatch.setattr(_impl, "_fused", lambda *args: fused.append(real(*args)) or fused[-1])
    y = torch.ops.tiledmm.gemm(a, b, c if beta else None, bias, alpha, beta, bias_dim or -1, act, False, None,
                               None)[0]
    assert fused == [True] or (GPU and fused == [False])       # on a GPU the dispatcher may pick TMA: fallback
    want = _ref(a, b, c if beta else None, bias, alpha, beta, bias_dim, act)
    assert y.dtype == dtype and y.shape == want.shape
    tol = TOL[dtype]
    torch.testing.assert_close(y.double(), want, rtol=tol, atol=tol * want.abs().max().item())


@pytest.mark.parametrize("act", ["gelu", "silu"])
def test_fallback_epilogue_when_the_kernel_cannot_fuse(act):
    a, b, bias = _t(4, 5), _t(5, 3, seed=1), _t(3, seed=2)
    y = torch.ops.tiledmm.gemm(a, b, None, bias, 2.0, 0.0, -1, act, False, "tiled", None)[0]   # SIMT: no epilogue
    torch.testing.assert_close(y.double(), _ref(a, b, None, bias, 2.0, 0.0, -1, act), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("c_shape,act", [(None, "gelu"), ((1, 3), "silu"), ((4, 3), "none")])
def test_unfused_epilogue_passes(c_shape, act, monkeypatch):
    """Where the kernel cannot fuse, the product (here torch's, in place of tiledmm.matmul) is followed
    by one in-place bias add and one activation pass: no copy of the result, no copy of a
    row-broadcast C (it is the bias); a full C is copied once, for the kernel's beta term."""
    from tiledmm import api

    def product(a, b, *, out, alpha, beta, kernel, precision):
        assert (alpha, beta) == (1.0, 1.0 if c_shape == (4, 3) else 0.0)
        return torch.addmm(out, a, b, beta=beta, out=out)
    monkeypatch.setattr(api, "matmul", product)
    a, b, bias = _t(4, 5), _t(5, 3, seed=1), _t(3, seed=2)
    c = None if c_shape is None else _t(*c_shape, seed=3)
    with _OpLog() as log:
        y = _impl.gemm(a, b, c, bias if c is None else None, 1.0, 1.0, -1, act, "tiled", None)
    passes = [n for n in log.names if n.split(".")[1] not in ("empty", "new_empty", "view", "addmm", "expand")]
    want = {None: ["aten.add_.Tensor", "aten.gelu.default"], (1, 3): ["aten.add_.Tensor", "aten.silu.default"],
            (4, 3): ["aten.copy_.default"]}[c_shape]
    assert passes == want, log.names
    torch.testing.assert_close(y.double(), _ref(a, b, c, bias if c is None else None, 1.0, 1.0, -1, act),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("args,match", [
    (lambda: (_t(3, 4), _t(5, 2), None, None, -1, "none"), "inner dimensions"),
    (lambda: (_t(3, 4), _t(4, 2), None, _t(3), -1, "none"), "bias must be 1-D with N"),
    (lambda: (_t(3, 4), _t(4, 2), None, _t(2), -2, "none"), "bias must be 1-D with M"),
    (lambda: (_t(3, 4), _t(4, 2), _t(2, 3), None, -1, "none"), "does not broadcast"),
    (lambda: (_t(3, 4), _t(4, 2), None, None, -1, "tanh"), "activation must be one of"),
    (lambda: (_t(3, 4), _t(4, 2, dtype=torch.float64), None, None, -1, "none"), "mixed dtypes"),
])
def test_bad_calls_are_one_line_errors(args, match):
    a, b, c, bias, bias_dim, act = args()
    with pytest.raises(tiledmm.TiledmmError, match=match):
        torch.ops.tiledmm.gemm(a, b, c, bias, 1.0, 1.0, bias_dim, act, False, None, None)


# -- torch.compile --------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_forward_and_backward(backend):
    """tiledmm.matmul and the operators in one graph (no break); the gradients reach every input;
    inductor keeps each operator as one call (its FallbackKernel)."""
    from tiledmm.nn.functional import linear

    def f(x, w, bias, y):
        h = linear(x, w, bias, "gelu")
        return (tiledmm.matmul(h, y) + torch.ops.tiledmm.matmul(h, y)).sum()
    x, w, bias, y = _t(3, 4, grad=True), _t(5, 4, grad=True, seed=1), _t(5, grad=True, seed=2), _t(5, 2, seed=3)
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    got = compiled(x, w, bias, y)
    got.backward()
    grads = [t.grad.clone() for t in (x, w, bias)]
    for t in (x, w, bias):
        t.grad = None
    want = (2 * (torch.nn.functional.gelu(torch.nn.functional.linear(x, w, bias)) @ y)).sum()   # torch's own
    want.backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, t in zip(grads, (x, w, bias)):
        torch.testing.assert_close(g, t.grad, rtol=1e-5, atol=1e-5)


def test_epilogue_after_a_variant_that_cannot_fuse(monkeypatch):
    """Where the dispatcher's pick is not the blocked kernel (TMA, split-K on a GPU), the product runs
    plain and bias and activation follow in torch: the same result."""
    from tiledmm.kernels.block import dispatch as BM
    real = BM.resolved

    def other_variant(*args):
        fn = real(*args)
        return lambda a, b, c, alpha, beta: fn(a, b, c, alpha=alpha, beta=beta)     # not the blocked launch
    monkeypatch.setattr(BM, "resolved", other_variant)
    a, b, bias = _t(2, 6, 8, dtype=torch.bfloat16), _t(8, 5, dtype=torch.bfloat16, seed=1), _t(5, dtype=torch.bfloat16)
    fused = []
    real_fused = _impl._fused
    monkeypatch.setattr(_impl, "_fused", lambda *args: fused.append(real_fused(*args)) or fused[-1])
    y = torch.ops.tiledmm.gemm(a, b, None, bias, 1.0, 0.0, -1, "gelu", False, None, None)[0]
    assert fused == [False]
    want = _ref(a, b, None, bias, 1.0, 0.0, -1, "gelu")
    torch.testing.assert_close(y.double(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item())


@pytest.mark.gpu
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype,precision,tol", [(torch.bfloat16, None, 2e-2), (torch.float16, None, 4e-3),
                                                 (torch.float32, "tf32", 4e-3), (torch.float32, None, 1e-4)])
def test_gpu_linear_forward_backward_against_float64(act, dtype, precision, tol):
    from tiledmm.nn.functional import linear
    x, w, bias = _t(512, 384, dtype=dtype, grad=True), _t(640, 384, dtype=dtype, seed=1) / 20, \
        _t(640, dtype=dtype, seed=2)
    w.requires_grad_()
    bias.requires_grad_()
    y = linear(x, w, bias, act, precision=precision)
    gy = _t(512, 640, dtype=dtype, seed=3)
    y.backward(gy)
    xr, wr, br = (t.detach().double().requires_grad_() for t in (x, w, bias))
    want = _impl.activation(torch.nn.functional.linear(xr, wr, br), act)
    if act == "relu":
        # relu's derivative jumps at 0: where the rounded pre-activation (tf32: 10 mantissa bits) and
        # float64's differ in sign, the gradients differ by a whole term. The reference backward takes
        # the kink where tiledmm's own forward put it (its output's sign), in float64.
        g = gy.double() * (y.detach() > 0).double()
        grads = (g @ wr.detach(), g.t() @ xr.detach(), g.sum(0))
    else:
        want.backward(gy.double())
        grads = (xr.grad, wr.grad, br.grad)
    for got, ref in ((y, want.detach()), (x.grad, grads[0]), (w.grad, grads[1]), (bias.grad, grads[2])):
        torch.testing.assert_close(got.double(), ref, rtol=tol, atol=tol * ref.abs().max().item())


@pytest.mark.gpu
def test_gpu_compiled_step_under_cuda_graphs():
    """torch.compile(fullgraph=True) with inductor and CUDA graphs (mode="reduce-overhead"), the process's
    first Gluon launch inside it: its kept counters must not come from the graph's pool (cudagraph trees
    refuse a live tensor there that is not an output)."""
    from tiledmm.kernels.block import gluon_gemm
    from tiledmm.nn.functional import linear

    def f(x, w, bias):
        return linear(x, w, bias, "gelu").float().square().mean()
    x, w, bias = _t(256, 128, dtype=torch.bfloat16), _t(192, 128, dtype=torch.bfloat16, seed=1) / 10, \
        _t(192, dtype=torch.bfloat16, seed=2)
    with gluon_gemm._scratch_lock:        # as in a new process (what earlier launches bound stays alive)
        gluon_gemm._OUTGROWN.extend(gluon_gemm._SCRATCH.values())
        gluon_gemm._SCRATCH.clear()
    compiled = torch.compile(f, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):
        got = compiled(x, w, bias)
    assert gluon_gemm._SCRATCH, "the compiled step never reached the Gluon kernel (this test's reason)"
    want = torch.nn.functional.gelu(torch.nn.functional.linear(x.double(), w.double(), bias.double())).square().mean()
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=1e-3)
