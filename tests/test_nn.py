"""tiledmm.nn.Linear and tiledmm.nn.functional.linear: a drop-in for torch.nn.Linear (parameters,
initialisation, state_dict), with fused activations; forward and backward against torch."""
from __future__ import annotations

import pytest

import tiledmm
from tests.conftest import GPU

torch = pytest.importorskip("torch")
import tiledmm.nn  # noqa: E402
from tiledmm.ops import _impl  # noqa: E402

DEV = "cuda" if GPU else "cpu"


def test_linear_is_a_torch_linear_with_the_same_init_and_state_dict():
    torch.manual_seed(3)
    ours = tiledmm.nn.Linear(6, 4, activation="gelu")
    torch.manual_seed(3)
    theirs = torch.nn.Linear(6, 4)
    assert isinstance(ours, torch.nn.Linear)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    for p, q in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(p, q)
    other = torch.nn.Linear(6, 4)
    ours.load_state_dict(other.state_dict())          # torch -> tiledmm
    assert torch.equal(ours.weight, other.weight) and torch.equal(ours.bias, other.bias)
    back = torch.nn.Linear(6, 4)
    back.load_state_dict(ours.state_dict())           # tiledmm -> torch
    assert torch.equal(back.weight, other.weight) and set(ours.state_dict()) == {"weight", "bias"}
    assert "activation=gelu" in repr(ours)


@pytest.mark.parametrize("act", [None, "relu", "gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_forward_backward_match_torch(act, bias):
    torch.manual_seed(0)
    layer = tiledmm.nn.Linear(8, 5, bias=bias, activation=act).to(DEV)
    ref = torch.nn.Linear(8, 5, bias=bias).to(DEV)
    ref.load_state_dict(layer.state_dict())
    x = torch.randn(2, 3, 8, device=DEV, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    y, yr = layer(x), _impl.activation(ref(xr), act or "none")
    torch.testing.assert_close(y, yr, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(y)
    y.backward(g)
    yr.backward(g)
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-5, atol=1e-5)
    for p, q in zip(layer.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-5)


def test_functional_linear_1d_input_and_no_grad():
    w, b = torch.randn(4, 3, device=DEV), torch.randn(4, device=DEV)
    x = torch.randn(3, device=DEV)
    with torch.no_grad():
        y = tiledmm.nn.functional.linear(x, w, b, "relu")
    torch.testing.assert_close(y, torch.relu(torch.nn.functional.linear(x, w, b)), rtol=1e-5, atol=1e-5)
    assert y.shape == (4,)


def test_functional_linear_bad_input():
    w = torch.randn(4, 3, device=DEV)
    with pytest.raises(tiledmm.TiledmmError, match="in_features = 3"):
        tiledmm.nn.functional.linear(torch.randn(2, 5, device=DEV), w)
    with pytest.raises(tiledmm.TiledmmError, match="activation must be one of"):
        tiledmm.nn.functional.linear(torch.randn(2, 3, device=DEV), w, activation="swish")
    with pytest.raises(tiledmm.TiledmmError, match="weight must be a 2-D"):
        tiledmm.nn.functional.linear(torch.randn(2, 3, device=DEV), torch.randn(3, device=DEV))
    with pytest.raises(tiledmm.TiledmmError, match="activation must be one of"):
        tiledmm.nn.Linear(3, 4, activation="tanh")
