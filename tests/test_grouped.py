"""Grouped products (tiledmm.grouped_matmul, torch.ops.tiledmm.grouped_mm, tiledmm.nn.GroupedLinear, the
routing of torch._grouped_mm under tiledmm.enable(), the triton-grouped kernel) against float64 per group.

Emulation: Triton's interpreter runs the real persistent kernel on CPU tensors (4 "SMs": every program
walks several groups' tiles) at toy sizes -- every layout and dtype, empty and ragged groups, the part
after the last group, offsets past the extent or decreasing, the fused bias and activations, the
transposed small-group tile, the copy-engine (TMA) path, gradcheck in float64, opcheck, compile
fullgraph, and the errors. Compiled for sm_90 on the CPU (in a subprocess: the interpreter owns this
one): the main configs use wgmma and TMA. On a GPU (@pytest.mark.gpu): larger ragged groups through
the heuristic's configs and every candidate config, CUDA-graph capture with offsets changed between
replays, no host synchronisation, GroupedLinear and the routing against torch._grouped_mm.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import tiledmm
from tests.conftest import GPU

torch = pytest.importorskip("torch")
import tiledmm.ops  # noqa: E402
from tiledmm import TiledmmError  # noqa: E402
from tiledmm.ops import _impl  # noqa: E402

DEV = "cuda" if GPU else "cpu"
# tiledmm.matmul's bounds for the dtype (the fuzzer's), relative to the float64 product's norm
TOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}
LAYOUTS = ["m", "n", "k", "batch"]
ACTS = ["none", "relu", "gelu", "gelu_tanh", "silu"]


def _kernel():
    from tiledmm.kernels.block import grouped as K
    return K


def _ranges(offs: list, extent: int) -> list:
    """The groups' [start, end) as the kernel defines them: ends clipped to the extent, never before
    the previous end."""
    out, prev = [], 0
    for o in offs:
        end = max(min(o, extent), prev)
        out.append((prev, end))
        prev = end
    return out


def reference(a, b, offs, layout, bias=None, act="none"):
    """float64 per group: each group's product, bias and activation; zero outside every group."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    bias = None if bias is None else bias.detach().double().cpu()
    if layout == "batch":
        out = a @ b + (0 if bias is None else bias[:, None, :])
        return _impl.activation(out, act)
    ends = offs.cpu().tolist()
    if layout == "m":
        out = torch.zeros(a.shape[0], b.shape[2], dtype=torch.float64)
        for g, (s, e) in enumerate(_ranges(ends, a.shape[0])):
            out[s:e] = _impl.activation(a[s:e] @ b[g] + (0 if bias is None else bias[g]), act)
    elif layout == "n":
        out = torch.zeros(a.shape[1], b.shape[1], dtype=torch.float64)
        for g, (s, e) in enumerate(_ranges(ends, b.shape[1])):
            out[:, s:e] = _impl.activation(a[g] @ b[:, s:e] + (0 if bias is None else bias[s:e]), act)
    else:
        out = torch.zeros(len(ends), a.shape[0], b.shape[1], dtype=torch.float64)
        for g, (s, e) in enumerate(_ranges(ends, a.shape[1])):
            out[g] = _impl.activation(a[:, s:e] @ b[s:e] + (0 if bias is None else bias[g]), act)
    return out


def err(got, ref) -> float:
    ref = ref.double().cpu()
    return ((got.double().cpu() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def _t(*shape, dtype=torch.float32, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed * 1000 + sum(shape))
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype).to(DEV).requires_grad_(grad)


def operands(layout, dtype, M=11, N=9, K=7, ends=(3, 3, 8, 10), seed=0, grad=False):
    """a, b, offs of a toy call: ragged groups, an empty one, and (layouts "m", "n") a part after
    the last group; for "k" the last group ends before K too."""
    G = len(ends)
    offs = torch.tensor(ends, dtype=torch.int32, device=DEV)
    if layout == "m":
        a, b = _t(M, K, dtype=dtype, seed=seed, grad=grad), _t(G, K, N, dtype=dtype, seed=seed + 1, grad=grad)
    elif layout == "n":
        a, b = _t(G, M, K, dtype=dtype, seed=seed, grad=grad), _t(K, M, dtype=dtype, seed=seed + 1, grad=grad)
    elif layout == "k":
        a, b = _t(M, N, dtype=dtype, seed=seed, grad=grad), _t(N, K, dtype=dtype, seed=seed + 1, grad=grad)
    else:
        a, b, offs = _t(G, M, K, dtype=dtype, seed=seed, grad=grad), _t(G, K, N, dtype=dtype, seed=seed + 1,
                                                                       grad=grad), None
    return a, b, offs


def _bias(layout, a, b, offs, dtype=torch.float32, grad=False):
    n = b.shape[-1]
    shape = (n,) if layout == "n" else ((offs.shape[0] if offs is not None else a.shape[0]), n)
    return _t(*shape, dtype=dtype, seed=7, grad=grad)


# -- every layout and dtype, against float64 --------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_and_dtype(layout, dtype):
    """Ragged groups (3, 0, 5, 2 rows), an empty one, a part after the last group (zero), into an out
    poisoned with NaN (every element must be written); the inputs unchanged."""
    a, b, offs = operands(layout, dtype)
    a0, b0 = a.clone(), b.clone()
    ref = reference(a, b, offs, layout)
    out = torch.full(ref.shape, float("nan"), dtype=dtype, device=DEV)
    got = tiledmm.grouped_matmul(a, b, offs, out=out)
    assert got is out and got.dtype == dtype and tuple(got.shape) == tuple(ref.shape)
    assert err(got, ref) < TOL[dtype], err(got, ref)
    assert not got.isnan().any()
    if layout == "m":
        assert (got[10:] == 0).all()                 # after offs[-1] = 10: no group
    if layout == "n":
        assert (got[:, 10:] == 0).all()
    assert torch.equal(a, a0) and torch.equal(b, b0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_copy_engine_path_in_the_interpreter(layout):
    """The TMA path (descriptors over a and b, tiles at the groups' offsets, K zeroed past a group in
    layout "k"), forced where the operands fit the copy engine's rules: the interpreter runs it."""
    K_ = _kernel()
    dtype = torch.float16
    if layout == "m":
        a, b = _t(40, 16, dtype=dtype), _t(3, 24, 16, dtype=dtype, seed=1).mT     # b K-major: a MoE weight
        offs = torch.tensor([5, 5, 37], dtype=torch.int32, device=DEV)
    elif layout == "n":
        a, b = _t(3, 24, 16, dtype=dtype), _t(40, 16, dtype=dtype, seed=1).T       # b K-major
        offs = torch.tensor([5, 5, 37], dtype=torch.int32, device=DEV)
    elif layout == "k":
        a, b = _t(40, 16, dtype=dtype).T, _t(40, 24, dtype=dtype, seed=1)          # xᵀ @ dy: a weight gradient
        offs = torch.tensor([5, 5, 37], dtype=torch.int32, device=DEV)
    else:
        a, b, offs = _t(3, 24, 16, dtype=dtype), _t(3, 24, 16, dtype=dtype, seed=1).mT, None
    assert K_.tma_fits(a, b, layout)
    ref = reference(a, b, offs, layout)
    c = torch.full(ref.shape, float("nan"), dtype=dtype, device=DEV)
    K_.launch(a, b, c, offs, layout, config={"TMA": True})
    assert K_._last["tma"]
    assert err(c, ref) < TOL[dtype]


def test_copy_engine_rules():
    K_ = _kernel()
    h = torch.float16
    x, w = torch.zeros(8, 16, dtype=h), torch.zeros(2, 24, 16, dtype=h)
    assert K_.tma_fits(x, w.mT, "m") and K_.tma_fits(x, w.mT.contiguous(), "m")
    assert not K_.tma_fits(x.T.contiguous().T, w.mT, "m")     # A M-major: rows of a group along the unit stride
    assert not K_.tma_fits(x.float(), w.mT.float(), "m")      # 16-bit only
    assert not K_.tma_fits(torch.zeros(8, 13, dtype=h)[:, :12], torch.zeros(2, 12, 8, dtype=h), "m")   # 26-byte rows
    assert K_.tma_fits(x.T, x, "k") and not K_.tma_fits(x.T.contiguous(), x, "k")


@pytest.mark.parametrize("tma", [False, True])
def test_small_group_path_transposed_tile(tma):
    """The transposed tile (SWAP: wgmma's narrow side on the tokens) that the heuristic picks where
    groups average few rows: groups of 0-3 rows among 9 experts."""
    K_ = _kernel()
    dtype = torch.float16
    a, b = _t(20, 16, dtype=dtype), _t(9, 32, 16, dtype=dtype, seed=1).mT
    offs = torch.tensor([1, 1, 4, 6, 6, 9, 11, 14, 17], dtype=torch.int32, device=DEV)
    ref = reference(a, b, offs, "m")
    c = torch.full(ref.shape, float("nan"), dtype=dtype, device=DEV)
    K_.launch(a, b, c, offs, "m", config=dict(K_.CONFIGS["tiny"], BLOCK_N=16, BLOCK_K=16, TMA=tma))
    assert K_._last["config"]["SWAP"] == 1 and K_._last["tma"] == tma
    assert err(c, ref) < TOL[dtype]


def test_heuristic_reads_only_totals():
    """On a GPU the tile follows the average group size: the transposed 16- or 32-row tiles for few rows."""
    K_ = _kernel()
    if not GPU:
        assert K_.heuristic("m", 10, 10, 10, 2, 2, "none") == K_.EMULATION
        return
    assert K_.heuristic("m", 256, 4096, 4096, 128, 2, "none")["SWAP"] == 1
    assert K_.heuristic("m", 65536, 768, 2048, 128, 2, "none")["BLOCK_M"] == 128


# -- the fused epilogue ----------------------------------------------------------------------------------

@pytest.mark.parametrize("act", ACTS)
def test_bias_and_activation_per_group(act):
    a, b, offs = operands("m", torch.float32)
    bias = _bias("m", a, b, offs)
    got = tiledmm.grouped_matmul(a, b, offs, bias=bias, activation=None if act == "none" else act)
    ref = reference(a, b, offs, "m", bias, act)
    assert err(got, ref) < 1e-5
    assert (got[10:] == 0).all()          # no group, no bias there


@pytest.mark.parametrize("layout", ["n", "k", "batch"])
def test_bias_in_the_other_layouts(layout):
    a, b, offs = operands(layout, torch.bfloat16)
    bias = _bias(layout, a, b, offs, dtype=torch.float32)
    got = tiledmm.grouped_matmul(a, b, offs, bias=bias, activation="gelu", out_dtype=torch.float32)
    assert got.dtype == torch.float32
    assert err(got, reference(a, b, offs, layout, bias, "gelu")) < TOL[torch.bfloat16]


# -- offsets, empty groups and sizes -----------------------------------------------------------------------

@pytest.mark.parametrize("ends", [(3, 1, 50), (-2, 4, 4, 30), (0, 0, 0), (11, 11, 11)])
def test_offsets_past_the_extent_or_decreasing(ends):
    """Not checked (that would read offs on the host): clipped to the extent, each end the largest so
    far; every row has one group or none (zero)."""
    a, b, offs = operands("m", torch.float32, ends=ends)
    got = tiledmm.grouped_matmul(a, b, offs)
    assert err(got, reference(a, b, offs, "m")) < 1e-5 if got.abs().sum() else (got == 0).all()


def test_empty_results_no_groups_and_k_zero():
    a, b = _t(0, 4), _t(2, 4, 3)
    assert tiledmm.grouped_matmul(a, b, torch.tensor([0, 0], dtype=torch.int32, device=DEV)).shape == (0, 3)
    a, b = _t(5, 4), _t(0, 4, 3)                      # no experts: every row after the last group
    got = tiledmm.grouped_matmul(a, b, torch.zeros(0, dtype=torch.int32, device=DEV))
    assert got.shape == (5, 3) and (got == 0).all()
    a, b = _t(5, 0), _t(2, 0, 3)                      # K = 0: the bias and activation alone
    bias = _t(2, 3, seed=3)
    got = tiledmm.grouped_matmul(a, b, torch.tensor([2, 4], dtype=torch.int32, device=DEV), bias=bias,
                                 activation="relu")
    want = torch.zeros(5, 3)
    want[:2], want[2:4] = bias[0].relu(), bias[1].relu()
    assert torch.equal(got.cpu(), want)
    a, b = _t(6, 3), _t(3, 4)                         # layout "k" with no groups: (0, 6, 4)
    assert tiledmm.grouped_matmul(a, b, torch.zeros(0, dtype=torch.int32, device=DEV)).shape == (0, 6, 4)


def test_out_that_aliases_an_input_and_strided_operands():
    a, b, offs = operands("m", torch.float32, M=12, K=9, N=9, ends=(4, 12, 12, 12))
    ref = reference(a, b, offs, "m")
    a2 = a.clone()
    tiledmm.grouped_matmul(a2[:, :9], b, offs, out=a2[:, :9])        # out is a's own memory
    assert err(a2[:, :9], ref) < 1e-5
    big = _t(12, 20, seed=5)
    at = big[:, ::2][:, :9]                                           # every other column: stride 2
    got = tiledmm.grouped_matmul(at, b.mT.contiguous().mT, offs)      # b K-major
    assert err(got, reference(at, b, offs, "m")) < 1e-5


@pytest.mark.skipif(GPU, reason="torch's CPU fallback of _grouped_mm (the GPU tests compare with CUDA's)")
@pytest.mark.parametrize("layout", LAYOUTS)
def test_matches_torch_grouped_mm_on_the_cpu(layout):
    """torch 2.13's CPU _grouped_mm as a second reference (its rules: 16-byte aligned strides; groups
    cover the extent -- it leaves the rest unwritten)."""
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("no torch._grouped_mm")
    a, b, offs = operands(layout, torch.bfloat16, M=16, N=16, K=24, ends=(8, 8, 16, 24) if layout != "m"
                          else (3, 3, 11, 16))
    if layout == "n":
        a, b = _t(4, 16, 16, dtype=torch.bfloat16), _t(16, 24, dtype=torch.bfloat16, seed=1)
    if layout == "k":
        a, b = _t(16, 24, dtype=torch.bfloat16), _t(24, 16, dtype=torch.bfloat16, seed=1)
    try:
        want = torch._grouped_mm(a, b, offs)
    except RuntimeError as e:
        pytest.skip(f"torch's _grouped_mm here: {e}")
    got = tiledmm.grouped_matmul(a, b, offs)
    ref = reference(a, b, offs, layout)
    assert err(got, ref) < TOL[torch.bfloat16] and err(want, ref) < TOL[torch.bfloat16]
    assert err(got, want.double()) < 2e-2


# -- autograd, the operator, torch.compile -----------------------------------------------------------------

@pytest.mark.parametrize("layout,act", [("m", "silu"), ("n", "none"), ("k", "gelu"), ("batch", "relu")])
def test_gradcheck_float64(layout, act):
    """Gradients of a, b and the bias through the kernel itself (float64 multiply-adds): every layout's
    backward is grouped products of the other layouts."""
    a, b, offs = operands(layout, torch.float64, M=5, N=3, K=4, ends=(2, 2, 4), grad=True)
    bias = _bias(layout, a, b, offs, dtype=torch.float64, grad=True)
    f = lambda a, b, bias: tiledmm.grouped_matmul(a, b, offs, bias=bias, activation=act)  # noqa: E731
    assert torch.autograd.gradcheck(f, (a, b, bias), fast_mode=True)


@pytest.mark.parametrize("layout,act,keep", [("m", "gelu", True), ("k", "none", False)])
def test_opcheck(layout, act, keep):
    a, b, offs = operands(layout, torch.float32, M=5, N=3, K=4, ends=(2, 2, 4), grad=True)
    bias = _bias(layout, a, b, offs, grad=True)
    torch.library.opcheck(torch.ops.tiledmm.grouped_mm.default, (a, b, offs, bias, None, act, keep, None))


def test_compile_fullgraph_forward_and_backward():
    """GroupedLinear and grouped_matmul in one graph (no break; offs a graph input, never read), the
    gradients equal eager's."""
    torch.manual_seed(0)
    layer = tiledmm.nn.GroupedLinear(3, 4, 5, bias=True, activation="silu").to(DEV)
    x, _, offs = operands("m", torch.float32, M=6, K=4, N=5, ends=(2, 2, 5))
    x.requires_grad_(True)
    y2 = _t(3, 5, 2, seed=4)

    def f(x, offs):
        h = layer(x, offs)
        return tiledmm.grouped_matmul(h, y2, offs).square().sum()
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    got = compiled(x, offs)
    got.backward()
    grads = [t.grad.clone() for t in (x, layer.weight, layer.bias)]
    for t in (x, layer.weight, layer.bias):
        t.grad = None
    want = f(x, offs)
    want.backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, t in zip(grads, (x, layer.weight, layer.bias)):
        torch.testing.assert_close(g, t.grad, rtol=1e-5, atol=1e-5)


def test_grouped_linear_forward_and_backward():
    """Against torch autograd through the float64 per-group reference; the weight is (experts, out, in)."""
    layer = tiledmm.nn.GroupedLinear(4, 7, 5, bias=True, dtype=torch.float64, device=DEV)
    assert layer.weight.shape == (4, 5, 7) and layer.bias.shape == (4, 5)
    x, _, offs = operands("m", torch.float64, M=11, K=7, N=5, grad=True)
    y = layer(x, offs)
    gy = _t(*y.shape, dtype=torch.float64, seed=9)
    y.backward(gy)
    xr, wr, br = (t.detach().clone().requires_grad_(True) for t in (x, layer.weight, layer.bias))
    parts = [xr[s:e] @ wr[g].T + br[g] for g, (s, e) in enumerate(_ranges(offs.tolist(), 11))]
    want = torch.cat(parts + [torch.zeros(1, 5, dtype=torch.float64)])
    want.backward(gy)
    for got, ref in ((y, want), (x.grad, xr.grad), (layer.weight.grad, wr.grad), (layer.bias.grad, br.grad)):
        torch.testing.assert_close(got.detach(), ref.detach(), rtol=1e-10, atol=1e-10)
    assert "num_experts=4" in repr(layer)


# -- tiledmm.enable() ------------------------------------------------------------------------------------

def test_enable_routes_torch_grouped_mm():
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("no torch._grouped_mm")
    a, b, offs = operands("m", torch.float32, grad=True)
    with tiledmm.enable() as mode:
        y = torch._grouped_mm(a, b, offs=offs)
        y.sum().backward()
        with pytest.raises(RuntimeError):          # float64: torch's call (which refuses it)
            torch._grouped_mm(a.detach().double(), b.detach().double(), offs)
    s = mode.summary()
    assert s["calls"]["grouped_mm"] == {"tiledmm": 1, "torch": 1}
    assert s["to_torch"] == {"grouped_mm: dtype torch.float64": 1}
    assert err(y, reference(a, b, offs, "m")) < 1e-5
    ones = torch.ones(11, 9, dtype=torch.float64)
    torch.testing.assert_close(a.grad.double().cpu(), reference(ones, b.mT, offs, "m"), rtol=1e-5, atol=1e-5)


def test_enable_leaves_bias_and_autocast_to_torch():
    from tiledmm.ops import _grouped
    a, b, offs = operands("m", torch.float32)
    assert _grouped.route((a, b, offs, _bias("m", a, b, offs)), {})[1] == "bias"
    assert _grouped.route((a, b), {"offs": None})[1] == "shapes"
    assert _grouped.route((a, b), {"offs": offs, "scale": 2})[1] == "extra arguments"
    with torch.autocast(DEV, dtype=torch.bfloat16):
        assert _grouped.route((a, b, offs), {})[1] == "autocast"


# -- errors ------------------------------------------------------------------------------------------------

def _err_cases():
    f32 = torch.float32
    a, b = _t(6, 4), _t(2, 4, 3)
    o = torch.tensor([2, 6], dtype=torch.int32, device=DEV)
    return [
        ((a, b, None), {}, "need offs"),
        ((a, b, o.long()), {}, "1-D int32"),
        ((a, b, o[None]), {}, "1-D int32"),
        ((a, b, torch.tensor([6], dtype=torch.int32, device=DEV)), {}, "1 group ends but b has 2 groups"),
        ((a, _t(2, 5, 3), o), {}, "inner dimensions differ"),
        ((a.half(), b, o), {}, "mixed dtypes"),
        ((a.int(), b.int(), o), {}, "unsupported dtype"),
        ((a[None, None], b, o), {}, "2-D or 3-D"),
        ((_t(2, 6, 4), b, o), {}, "offs must be None"),
        ((_t(3, 6, 4), b, None), {}, "group counts differ"),
        ((a, b, o), {"bias": _t(3)}, r"bias must be a float tensor of shape \(2, 3\)"),
        ((_t(2, 6, 4), _t(4, 9), o), {"bias": _t(2, 9)}, r"shape \(9,\)"),
        ((a, b, o), {"out": _t(6, 4)}, "out must be a 6x3 float32"),
        ((a, b, o), {"out": _t(6, 3).half(), "out_dtype": f32}, "out must be a 6x3 float32"),
        ((a, b, o), {"out_dtype": torch.int8}, "out_dtype must be one of"),
        ((a, b, o), {"activation": "tanh"}, "activation must be one of"),
        ((a, b, o), {"precision": "tf32x"}, "precision"),
        ((a.half(), b.half(), o), {"precision": "tf32"}, "precision"),
        (([1.0], b, o), {}, "takes torch tensors"),
        ((a, b, o.cpu() if GPU else o.to("meta")), {}, "1-D int32 tensor on " + DEV),
        ((a, b, o), {"out": torch.zeros(6, 1, device=DEV).expand(6, 3)}, "overlapping elements"),
    ] + ([((a.cpu(), b, o), {}, "different devices")] if GPU else [])


@pytest.mark.parametrize("case", range(len(_err_cases())))
def test_errors_are_one_line(case):
    args, kw, match = _err_cases()[case]
    with pytest.raises(TiledmmError, match=match) as e:
        tiledmm.grouped_matmul(*args, **kw)
    assert "\n" not in str(e.value)


def test_emulation_limit_and_wrong_device():
    if GPU:
        with pytest.raises(TiledmmError, match="cuda tensors"):
            tiledmm.grouped_matmul(torch.zeros(4, 4), torch.zeros(1, 4, 4), torch.tensor([4], dtype=torch.int32))
        return
    a, b = torch.zeros(2048, 64), torch.zeros(1, 64, 64)
    with pytest.raises(TiledmmError, match="emulation limit"):
        tiledmm.grouped_matmul(a, b, torch.tensor([2048], dtype=torch.int32))
    with pytest.raises(TiledmmError, match="cpu tensors"):
        tiledmm.grouped_matmul(a.to("meta"), b.to("meta"), torch.tensor([2048], dtype=torch.int32, device="meta"))


def test_grouped_linear_rejects_bad_input():
    layer = tiledmm.nn.GroupedLinear(2, 4, 3).to(DEV)
    with pytest.raises(TiledmmError, match=r"\(tokens, 4\)"):
        layer(_t(5, 3), torch.tensor([2, 5], dtype=torch.int32, device=DEV))
    with pytest.raises(TiledmmError, match="at least one expert"):
        tiledmm.nn.GroupedLinear(0, 4, 3)


# -- the registered kernel, and the import ---------------------------------------------------------------

def test_registered_kernel_runs_tiledmm_matmul():
    """triton-grouped in tiledmm.matmul's contract: a 2-D product, a batch with b broadcast (stride 0),
    float64, a float32 out for 16-bit inputs."""
    a, b = _t(9, 7), _t(7, 5, seed=1)
    torch.testing.assert_close(tiledmm.matmul(a, b, kernel="triton-grouped"), a @ b, rtol=1e-5, atol=1e-5)
    a3 = _t(3, 9, 7, dtype=torch.float64)
    b3 = _t(7, 5, dtype=torch.float64, seed=2)
    assert err(tiledmm.matmul(a3, b3, kernel="triton-grouped"), a3 @ b3) < 1e-12
    h = _t(9, 7, dtype=torch.bfloat16)
    out = torch.empty(9, 9, device=DEV)
    tiledmm.matmul(h, h.T, kernel="triton-grouped", out=out)
    assert err(out, h.double() @ h.double().T) < 1e-5


def test_import_stays_light():
    """import tiledmm and the registry load no Triton (nor torch); tiledmm.grouped_matmul loads torch only."""
    code = ("import sys, tiledmm; tiledmm.registry.names(); print('triton' in sys.modules, 'torch' in sys.modules); "
            "f = tiledmm.grouped_matmul; print('triton' in sys.modules, 'torch' in sys.modules)")
    env = dict(os.environ, TILEDMM_QUIET="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    lines = out.stdout.split("\n")
    assert lines[0] == "False False", out.stdout
    assert lines[1].endswith("True"), out.stdout


# -- compiled for sm_90 on the CPU -------------------------------------------------------------------------

_COMPILE = r"""
import json, os, re, sys
import tiledmm
os.environ.pop("TRITON_INTERPRET", None)       # this process compiles: jit functions, not interpreted ones
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tiledmm.kernels.block import grouped as K
fn = K.grouped_kernel
names = fn.arg_names
out = []
for layout, a_k, b_k, cfg, dtype in json.loads(sys.argv[1]):
    cfg = dict(cfg)
    warps, stages = cfg.pop("num_warps"), cfg.pop("num_stages")
    tma = cfg.pop("TMA")
    const = dict(cfg, LAYOUT=K.LAYOUTS[layout], TMA=tma, A_KMAJOR=a_k, B_KMAJOR=b_k,
                 PRECISION={"fp32": "ieee", "fp64": "ieee"}.get(dtype, "none"), ACC64=dtype == "fp64",
                 UPCAST=False, HAS_BIAS=True, ACT="silu")
    if layout == "batch":
        const["offs_ptr"] = None
    sig = {n: ("*" + dtype if n in ("a_ptr", "b_ptr", "c_ptr", "bias_ptr") else "*i32" if n == "offs_ptr" else "i32")
           for n in names}
    sig.update({k: "constexpr" for k in const})
    src = ASTSource(fn, sig, {(names.index(k),): v for k, v in const.items()})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    ptx = k.asm["ptx"]
    out.append({"wgmma": sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx))),
                "tma": "cp.async.bulk.tensor" in ptx, "shared": k.metadata.shared})
print(json.dumps(out))
"""


@pytest.mark.compiles
def test_compiles_for_sm90_with_wgmma_and_tma():
    """The heuristic's main configs compile for sm_90 (this Triton's CUDA backend, on the CPU): wgmma on
    the 128-wide tiles, m64n16/n32 on the transposed small-group tiles, TMA loads, shared memory within
    the H100's 227 KB; the pointer path compiles too, and float32 and float64 (multiply-adds)."""
    pytest.importorskip("triton.backends.nvidia")
    K_ = _kernel()
    C = K_.CONFIGS
    jobs = [("m", True, True, dict(C["large"], TMA=True), "bf16"),
            ("m", True, True, dict(C["tiny"], TMA=True), "bf16"),
            ("k", False, False, dict(C["k64"], TMA=True), "bf16"),
            ("m", True, False, dict(C["small"], TMA=False), "fp16"),
            ("batch", True, True, dict(C["square"], TMA=True), "bf16"), ("n", True, False, K_.FP32["ieee"], "fp32"),
            ("m", True, False, dict(K_.FP64, SWAP=0), "fp64")]
    env = dict(os.environ, TILEDMM_QUIET="1", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", _COMPILE, json.dumps(jobs)], env=env, capture_output=True, text=True)
    if r.returncode and "ptxas" in r.stderr.lower():
        pytest.skip("no ptxas here")
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res[0]["wgmma"] == ["m64n256k16"] and res[0]["tma"]
    assert res[1]["wgmma"] == ["m64n16k16"] and res[1]["tma"]
    assert res[2]["wgmma"] == ["m64n128k16"] and res[2]["tma"]
    assert res[3]["wgmma"] == ["m64n32k16"] and not res[3]["tma"]
    assert res[4]["tma"]
    assert not res[5]["wgmma"] and not res[6]["wgmma"]          # exact float32 and float64: multiply-adds
    assert all(x["shared"] <= 232448 for x in res)


# -- on a GPU --------------------------------------------------------------------------------------------

def _skewed(G: int, M: int, seed: int, empty: float = 0.0) -> torch.Tensor:
    """Group ends with sizes proportional to u^2 (skewed routing), a fraction ``empty`` of groups empty."""
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(G, generator=g) ** 2
    if empty:
        w[torch.randperm(G, generator=g)[: int(G * empty)]] = 0
    sizes = torch.floor(w / w.sum() * M).long()
    sizes[int(torch.argmax(w))] += M - int(sizes.sum())
    return torch.cumsum(sizes, 0).to(torch.int32)


@pytest.mark.gpu
@pytest.mark.parametrize("layout,dtype", [("m", torch.bfloat16), ("m", torch.float16), ("n", torch.bfloat16),
                                          ("k", torch.bfloat16), ("batch", torch.float16)])
def test_gpu_layouts_against_float64(layout, dtype):
    """Skewed groups, a quarter of them empty, through the copy engine (the layouts MoE layers use: b
    K-major, a weight gradient's xᵀ M-major), then contiguous operands with a bias and silu."""
    G, M, K, N = 8, 1000, 256, 384
    offs = _skewed(G, {"m": M, "n": N, "k": K, "batch": M}[layout], 1, empty=0.25).cuda()
    w = _t(G, N, K, dtype=dtype, seed=1) / 16
    if layout == "m":
        a, b = _t(M, K, dtype=dtype), w.mT
    elif layout == "n":
        a, b = _t(G, M, K, dtype=dtype), _t(N, K, dtype=dtype, seed=2).T
    elif layout == "k":
        a, b = _t(K, M, dtype=dtype).T, _t(K, N, dtype=dtype, seed=2)      # xᵀ (M-major) @ dy
    else:
        a, b, offs = _t(G, 64, K, dtype=dtype), w.mT, None
    got = tiledmm.grouped_matmul(a, b, offs)
    assert err(got, reference(a, b, offs, layout)) < TOL[dtype]
    assert _kernel()._last["tma"], "the copy-engine path on Hopper"
    bias = _bias(layout, a, b, offs)
    got = tiledmm.grouped_matmul(a.contiguous(), b.contiguous(), offs, bias=bias, activation="silu")
    assert err(got, reference(a, b, offs, layout, bias, "silu")) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(["large", "square", "square4", "medium", "small", "tiny", "k64"]))
def test_gpu_every_candidate_config(name):
    """Every config of the table through the copy engine (the pointer path: the two small-group tiles)."""
    K_ = _kernel()
    a, w = _t(3000, 512, dtype=torch.bfloat16), _t(16, 640, 512, dtype=torch.bfloat16, seed=1) / 16
    offs = _skewed(16, 3000, 2, empty=0.1).cuda()
    ref = reference(a, w.mT, offs, "m")
    for tma in (True, False) if name in ("small", "tiny") else (True,):
        c = torch.full(ref.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
        K_.launch(a, w.mT, c, offs, "m", config=dict(K_.CONFIGS[name], TMA=tma))
        assert K_._last["tma"] == tma
        assert err(c, ref) < TOL[torch.bfloat16], (name, tma)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,precision", [(torch.float32, None), (torch.float32, "tf32"), (torch.float64, None)])
def test_gpu_float32_and_float64(dtype, precision):
    """The pointer path: exact float32 (multiply-adds), tf32, float64 (multiply-adds in float64)."""
    a, b, offs = operands("m", dtype, M=300, K=72, N=40, ends=(50, 50, 230, 290))
    got = tiledmm.grouped_matmul(a, b, offs, precision=precision)
    assert err(got, reference(a, b, offs, "m")) < (3e-3 if precision == "tf32" else TOL[dtype])


@pytest.mark.gpu
def test_gpu_no_host_sync_and_cuda_graph_replay_follows_offs():
    """offs is never read on the host: no synchronisation (torch's sync debug mode), and a captured call
    replays with whatever offs holds then."""
    a, w = _t(512, 256, dtype=torch.bfloat16), _t(4, 128, 256, dtype=torch.bfloat16, seed=1) / 16
    offs = torch.tensor([100, 100, 300, 512], dtype=torch.int32, device="cuda")
    tiledmm.grouped_matmul(a, w.mT, offs)          # compiled before the capture
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        tiledmm.grouped_matmul(a, w.mT, offs)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        tiledmm.grouped_matmul(a, w.mT, offs)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = tiledmm.grouped_matmul(a, w.mT, offs)
    for ends in ([100, 100, 300, 512], [0, 256, 256, 400], [512, 512, 512, 512]):
        offs.copy_(torch.tensor(ends, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        assert err(y, reference(a, w.mT, offs, "m")) < TOL[torch.bfloat16], ends


@pytest.mark.gpu
def test_gpu_grouped_linear_and_routing_match_torch():
    G, M, K, N = 8, 2048, 512, 768
    layer = tiledmm.nn.GroupedLinear(G, K, N, dtype=torch.bfloat16, device="cuda")
    x = _t(M, K, dtype=torch.bfloat16, grad=True)
    offs = _skewed(G, M, 3, empty=0.125).cuda()
    y = layer(x, offs)
    gy = _t(M, N, dtype=torch.bfloat16, seed=5)
    y.backward(gy)
    xr, wr = x.detach().double().requires_grad_(True), layer.weight.detach().double().requires_grad_(True)
    parts = [xr[s:e] @ wr[g].T for g, (s, e) in enumerate(_ranges(offs.tolist(), M))]
    want = torch.cat(parts)
    want.backward(gy.double())
    for got, ref in ((y, want), (x.grad, xr.grad), (layer.weight.grad, wr.grad)):
        assert err(got, ref) < TOL[torch.bfloat16]
    want_t = torch._grouped_mm(x.detach(), layer.weight.detach().mT, offs=offs)
    with tiledmm.enable() as mode:
        got_t = torch._grouped_mm(x.detach(), layer.weight.detach().mT, offs=offs)
    assert mode.summary()["calls"]["grouped_mm"]["tiledmm"] == 1
    assert err(got_t, want_t.double()) < TOL[torch.bfloat16]


def test_gradcheck_with_a_weight_used_transposed():
    """A K-major b (a weight stored (G, N, K) and used as w.mT, as MoE layers call it) gets its gradient in
    its own memory order, (gᵀ @ a)ᵀ: right in every layout (float64 gradcheck)."""
    dt = torch.float64
    offs = torch.tensor([3, 3, 7], dtype=torch.int32)
    g = torch.Generator().manual_seed(5)

    def r(*s):
        return torch.randn(*s, dtype=dt, generator=g).requires_grad_(True)
    for a, w, o in ((r(7, 5), r(3, 4, 5), offs), (r(3, 6, 5), r(7, 5), offs), (r(6, 7), r(4, 7), offs),
                    (r(3, 6, 5), r(3, 4, 5), None)):
        assert torch.autograd.gradcheck(lambda x, y: tiledmm.grouped_matmul(x, y.mT, o), (a, w), fast_mode=True)


@pytest.mark.gpu
def test_gpu_host_tensors_are_computed_on_the_gpu():
    """CPU tensors on a GPU machine, as tiledmm.matmul takes them: computed on the GPU, returned on the host."""
    g = torch.Generator().manual_seed(9)
    x, w = torch.randn(10, 8, generator=g), torch.randn(3, 8, 6, generator=g)
    offs = torch.tensor([4, 4, 10], dtype=torch.int32)
    y = tiledmm.grouped_matmul(x, w, offs)
    assert y.device.type == "cpu"
    want = torch.cat([x[:4].double() @ w[0].double(), x[4:].double() @ w[2].double()])
    assert float((y.double() - want).norm() / want.norm()) < 1e-5
