"""tiledmm.enable(): a TorchFunctionMode routing a model's matmuls through tiledmm (forward and
backward match torch), falling back to torch where tiledmm does not take the call, with counts."""
from __future__ import annotations

import pytest

import tiledmm
from tests.conftest import GPU

torch = pytest.importorskip("torch")
from tiledmm.ops import enable  # noqa: E402

DEV = "cuda" if GPU else "cpu"


def test_transformer_encoder_layer_forward_and_backward_match_torch():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0,
                                             batch_first=True).to(DEV)
    x = torch.randn(2, 5, 8, device=DEV)
    want = layer(x)
    want.square().sum().backward()
    want_grads = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    with enable() as mode:
        got = layer(x)
        got.square().sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for p, g in zip(layer.parameters(), want_grads):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-4)
    calls = mode.summary()["calls"]
    assert calls["linear"] == {"tiledmm": 2, "torch": 0}            # the feed-forward block
    assert calls["multi_head_attention"] == {"tiledmm": 0, "torch": 1}   # seen whole: its projections in torch


def test_each_routed_op_matches_torch_and_is_counted():
    a, b = torch.randn(3, 4, device=DEV), torch.randn(4, 5, device=DEV)
    a3, b3, c3 = torch.randn(2, 3, 4, device=DEV), torch.randn(2, 4, 5, device=DEV), torch.randn(2, 3, 5, device=DEV)
    c, bias = torch.randn(3, 5, device=DEV), torch.randn(5, device=DEV)
    cases = [lambda: torch.matmul(a, b), lambda: a @ b, lambda: a.mm(b), lambda: torch.bmm(a3, b3),
             lambda: torch.addmm(c, a, b, beta=0.5, alpha=2.0), lambda: torch.addmm(bias, a, b),
             lambda: torch.baddbmm(c3, a3, b3, alpha=-1.0), lambda: torch.nn.functional.linear(a, b.T, bias),
             lambda: a.matmul(b), lambda: a3 @ b]
    want = [f() for f in cases]
    with enable() as mode:
        got = [f() for f in cases]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    s = mode.summary()
    assert sum(c["tiledmm"] for c in s["calls"].values()) == len(cases)
    assert s["calls"]["addmm"] == {"tiledmm": 2, "torch": 0} and not s["to_torch"]


def test_unsupported_calls_fall_back_to_torch(capsys):
    # a dtype tiledmm does not take (complex on the GPU: torch has no CUDA integer matmul)
    ints = torch.arange(6, device=DEV).reshape(2, 3).to(torch.complex64 if DEV == "cuda" else torch.int64)
    x = torch.randn(2, 3, device=DEV)
    with enable(report=True) as mode:
        r1 = ints @ ints.T                                   # integer (complex) dtype
        r2 = torch.mm(x, x.T, out=torch.empty(2, 2, device=DEV))   # out=
        with pytest.raises(RuntimeError):
            torch.mm(x, x)                                   # torch's own error for torch's shapes
    assert torch.equal(r1, ints @ ints.T)
    torch.testing.assert_close(r2, x @ x.T)
    s = mode.summary()
    assert s["calls"]["matmul"] == {"tiledmm": 0, "torch": 1} and s["calls"]["mm"]["torch"] == 2
    assert f"matmul: dtype {ints.dtype}" in s["to_torch"]
    out = capsys.readouterr().out
    assert "tiledmm.enable" in out and "to torch" in out


def test_enable_is_exported():
    assert tiledmm.ops.enable is enable


def test_bias_broadcast_along_rows_goes_to_the_fused_bias(monkeypatch):
    """addmm / baddbmm whose input is a bias along N ((N,), (1, N), (1, 1, N)) with beta 1 reach the
    kernel as its bias (never a full-size copy); forward and gradients as torch's."""
    from tiledmm.ops import _impl
    seen = []
    real = _impl._fused
    monkeypatch.setattr(_impl, "_fused", lambda *args: seen.append(args) or real(*args))
    a, b = torch.randn(3, 4, device=DEV, requires_grad=True), torch.randn(4, 5, device=DEV, requires_grad=True)
    a3, b3 = torch.randn(2, 3, 4, device=DEV), torch.randn(2, 4, 5, device=DEV)
    for c, f in ((torch.randn(1, 5, device=DEV), lambda c: torch.addmm(c, a, b, alpha=0.5)),
                 (torch.randn(5, device=DEV), lambda c: c.addmm(a, b)),
                 (torch.randn(1, 1, 5, device=DEV), lambda c: torch.baddbmm(c, a3, b3)),
                 (torch.randn(5, device=DEV), lambda c: torch.baddbmm(c, a3, b3))):
        c.requires_grad_()
        want = f(c)
        gc_want = torch.autograd.grad(want.sum(), c)[0]
        seen.clear()
        with enable() as mode:
            got = f(c)
            gc = torch.autograd.grad(got.sum(), c)[0]
        assert sum(n["tiledmm"] for n in mode.summary()["calls"].values()) == 1
        bias, beta = seen[0][3], seen[0][5]
        assert bias is not None and tuple(bias.shape) == (5,) and beta == 0.0
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(gc, gc_want, rtol=1e-5, atol=1e-5)


def test_calls_not_routed_keep_their_arguments():
    x, y = torch.randn(3, device=DEV), torch.randn(3, device=DEV)
    with enable() as mode:
        got = torch.add(x, y, alpha=2.0), x.sum(dim=0, keepdim=True), torch.cat([x, y])
    torch.testing.assert_close(got[0], x + 2 * y)
    assert got[1].shape == (1,) and got[2].shape == (6,) and not mode.summary()["calls"]


def test_autocast_casts_routed_calls_as_it_casts_torchs():
    """Under torch.autocast the routed products run in autocast's dtype (as torch's do), their
    results have that dtype, and the float32 weights' gradients come back in float32."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(24, 16).to(DEV)
    x = torch.randn(8, 24, device=DEV)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        want = lin(x)
        want.float().square().sum().backward()
        want_grad = lin.weight.grad.clone()
        lin.zero_grad()
        with enable() as mode:
            got = lin(x)
            got.float().square().sum().backward()
    assert got.dtype == want.dtype == torch.bfloat16
    assert mode.summary()["calls"]["linear"] == {"tiledmm": 1, "torch": 0}
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
    assert lin.weight.grad.dtype == torch.float32
    torch.testing.assert_close(lin.weight.grad, want_grad, rtol=3e-2, atol=3e-2)
    with enable():                                 # autocast off: float32 stays float32
        assert lin(x).dtype == torch.float32
