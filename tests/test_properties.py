"""Property tests (hypothesis): random shapes 0..40, broadcast batches, dtypes, alpha/beta, out --
every kernel family against float64, the output poisoned first, the inputs unchanged after. Operands
come in their strided layouts as they are: numpy transposed / sliced / negative-stride views, torch
(incl. bf16 and fp16) transposed, sliced, row-padded and misaligned-offset views, torch outs
transposed or sliced. Emulation in CI (toy sizes); the same properties hold on a GPU."""
import numpy as np
import pytest
import torch

import tiledmm

from .conftest import GPU

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

TOL = {"float32": 1e-5, "float64": 1e-12, "float16": 5e-3, "bfloat16": 2e-2}
FAMILIES = {"triton": (40, ("float32", "float16", "bfloat16")), "tiled": (12, ("float32", "float64")),
            "naive": (10, ("float32", "float64"))}


NP_VIEWS = ("c", "T", "neg", "slice")
TORCH_VIEWS = ("c", "T", "slice", "pad", "offset")     # torch has no negative strides


def view(x: np.ndarray, how: str) -> np.ndarray:
    """The same values as x, laid out another way (numpy)."""
    if how == "T":
        return np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2)
    if how == "neg":
        return np.ascontiguousarray(x[..., ::-1, ::-1])[..., ::-1, ::-1]
    if how == "slice":
        big = np.zeros(x.shape[:-1] + (2 * x.shape[-1] + 1,), x.dtype)
        big[..., 1::2] = x
        return big[..., 1::2]
    return x


def torch_view(t: torch.Tensor, how: str) -> torch.Tensor:
    """The same values as t (contiguous), laid out another way: column-major (transposed storage),
    every other column of a wider buffer, rows padded to a longer leading dimension, or one
    element into its storage (an offset that breaks 16-byte alignment)."""
    if how == "T":
        return t.mT.contiguous().mT
    if how == "slice":
        big = torch.zeros(t.shape[:-1] + (2 * t.shape[-1] + 1,), dtype=t.dtype, device=t.device)
        big[..., 1::2] = t
        return big[..., 1::2]
    if how == "pad":
        big = torch.zeros(t.shape[:-1] + (t.shape[-1] + 3,), dtype=t.dtype, device=t.device)
        big[..., :t.shape[-1]] = t
        return big[..., :t.shape[-1]]
    if how == "offset":
        flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
        flat[1:] = t.reshape(-1)
        return flat[1:].view(t.shape)
    return t


@st.composite
def problems(draw):
    kernel = draw(st.sampled_from(sorted(FAMILIES)))
    top, dtypes = FAMILIES[kernel]
    dtype = draw(st.sampled_from(dtypes))
    m, k, n = (draw(st.integers(0, top)) for _ in range(3))
    batch = draw(st.sampled_from([(), (2,), (1, 2), (2, 1)]))
    b_batch = draw(st.sampled_from([(), batch, tuple(1 for _ in batch)]))
    if kernel != "triton" and len(batch) > 1:
        batch, b_batch = batch[:1], b_batch[:1]
    return dict(kernel=kernel, dtype=dtype, a=batch + (m, k), b=b_batch + (k, n),
                va=draw(st.sampled_from(NP_VIEWS)), vb=draw(st.sampled_from(NP_VIEWS[:3])),
                ta=draw(st.sampled_from(TORCH_VIEWS)), tb=draw(st.sampled_from(TORCH_VIEWS)),
                to=draw(st.sampled_from(TORCH_VIEWS[:3])),
                alpha=draw(st.sampled_from([1.0, -0.5, 2.0])), beta=draw(st.sampled_from([0.0, 1.0, -1.5])),
                use_out=draw(st.booleans()), kind=draw(st.sampled_from(["numpy", "torch"])),
                seed=draw(st.integers(0, 2 ** 16)))


def make(x64: np.ndarray, kind: str, dtype: str, np_how: str, torch_how: str):
    """x64 rounded to dtype, as a numpy array (one of NP_VIEWS) or a torch tensor on the kernels'
    device (one of TORCH_VIEWS: the strided layout reaches the kernel as it is)."""
    if kind == "numpy":
        return view(x64.astype(dtype), np_how)
    t = torch.from_numpy(x64).to(getattr(torch, dtype))
    return torch_view(t.cuda() if GPU else t, torch_how)


def host64(x, kind: str) -> np.ndarray:
    return x.double().cpu().numpy().copy() if kind == "torch" else np.array(x, np.float64)


@settings(max_examples=60 if not GPU else 200, deadline=None, suppress_health_check=list(HealthCheck))
@given(problems())
def test_matmul_matches_float64(p):
    rng = np.random.default_rng(p["seed"])
    kind = "torch" if p["dtype"] == "bfloat16" else p["kind"]
    a = make(rng.standard_normal(p["a"]), kind, p["dtype"], p["va"], p["ta"])
    b = make(rng.standard_normal(p["b"]), kind, p["dtype"], p["vb"], p["tb"])
    A, B = host64(a, kind), host64(b, kind)            # the rounded inputs
    a_strides = a.stride() if kind == "torch" else a.strides
    want = np.matmul(A, B) * p["alpha"]
    out = None
    beta = p["beta"] if p["use_out"] else 0.0
    if p["use_out"]:
        out = make(rng.standard_normal(want.shape), kind, p["dtype"], "c", p["to"])
        C = host64(out, kind)                          # a copy: out is poisoned next
        if beta == 0.0:   # poison: beta == 0 must never read it
            out[...] = float("nan")
        want = want + beta * C
    got = tiledmm.matmul(a, b, kernel=p["kernel"], tile=4 if p["kernel"] != "triton" else None, out=out,
                         alpha=p["alpha"], beta=beta)
    g = host64(got, kind)
    assert g.shape == want.shape
    assert not np.isnan(g).any()
    err = np.linalg.norm(g - want) / (np.linalg.norm(want) or 1.0)
    assert err <= TOL[p["dtype"]] * 4, (p, err)
    # inputs are never modified, nor re-laid out
    assert np.array_equal(host64(a, kind), A) and np.array_equal(host64(b, kind), B)
    assert (a.stride() if kind == "torch" else a.strides) == a_strides
    if out is not None:
        assert got is out


def test_torch_views_are_strided():
    """The layouts the property test draws are what they say (so a contiguous copy cannot creep back)."""
    t = torch.arange(24.0, dtype=torch.bfloat16).reshape(2, 3, 4)
    for how in TORCH_VIEWS:
        v = torch_view(t, how)
        assert torch.equal(v, t) and v.dtype == torch.bfloat16
        assert v.is_contiguous() == (how in ("c", "offset"))
    assert torch_view(t, "T").stride() == (12, 1, 3)
    assert torch_view(t, "slice").stride() == (27, 9, 2)
    assert torch_view(t, "pad").stride() == (21, 7, 1)
    assert torch_view(t, "offset").storage_offset() == 1
