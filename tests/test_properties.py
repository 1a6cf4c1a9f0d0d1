"""Property tests (hypothesis): random shapes 0..40, broadcast batches, transposed / sliced /
negative-stride views, dtypes, alpha/beta, out -- every kernel family against float64, the
output poisoned first. Emulation in CI (toy sizes); the same properties hold on a GPU."""
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


def view(x: np.ndarray, how: str) -> np.ndarray:
    """The same values as x, laid out another way."""
    if how == "T":
        return np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2)
    if how == "neg":
        return np.ascontiguousarray(x[..., ::-1, ::-1])[..., ::-1, ::-1]
    if how == "slice":
        big = np.zeros(x.shape[:-1] + (2 * x.shape[-1] + 1,), x.dtype)
        big[..., 1::2] = x
        return big[..., 1::2]
    return x


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
                va=draw(st.sampled_from(["c", "T", "neg", "slice"])), vb=draw(st.sampled_from(["c", "T", "neg"])),
                alpha=draw(st.sampled_from([1.0, -0.5, 2.0])), beta=draw(st.sampled_from([0.0, 1.0, -1.5])),
                use_out=draw(st.booleans()), kind=draw(st.sampled_from(["numpy", "torch"])),
                seed=draw(st.integers(0, 2 ** 16)))


def as_kind(x: np.ndarray, kind: str, dtype: str):
    if kind == "numpy" and dtype != "bfloat16":
        return x.astype(dtype, copy=False)
    t = torch.from_numpy(np.ascontiguousarray(x)).to(getattr(torch, dtype))
    return t if x.flags.c_contiguous else torch.from_numpy(x.copy()).to(getattr(torch, dtype))


@settings(max_examples=30 if not GPU else 200, deadline=None, suppress_health_check=list(HealthCheck))
@given(problems())
def test_matmul_matches_float64(p):
    rng = np.random.default_rng(p["seed"])
    kind = "torch" if p["dtype"] == "bfloat16" else p["kind"]
    a64, b64 = rng.standard_normal(p["a"]), rng.standard_normal(p["b"])
    a = as_kind(view(a64.astype(np.float32 if p["dtype"] == "bfloat16" else p["dtype"]), p["va"]), kind, p["dtype"])
    b = as_kind(view(b64.astype(np.float32 if p["dtype"] == "bfloat16" else p["dtype"]), p["vb"]), kind, p["dtype"])
    if GPU and kind == "torch":
        a, b = a.cuda(), b.cuda()
    A = np.asarray(a.double().cpu() if kind == "torch" else a, np.float64)   # the rounded inputs
    B = np.asarray(b.double().cpu() if kind == "torch" else b, np.float64)
    want = np.matmul(A, B) * p["alpha"]
    out = None
    beta = p["beta"] if p["use_out"] else 0.0
    if p["use_out"]:
        c64 = rng.standard_normal(want.shape)
        out = as_kind(c64.astype(np.float32), kind, p["dtype"])
        if GPU and kind == "torch":
            out = out.cuda()
        C = np.array(out.double().cpu() if kind == "torch" else out, np.float64)   # a copy: out is poisoned next
        if beta == 0.0:   # poison: beta == 0 must never read it
            out[...] = float("nan")
        want = want + beta * C
    got = tiledmm.matmul(a, b, kernel=p["kernel"], tile=4 if p["kernel"] != "triton" else None, out=out,
                         alpha=p["alpha"], beta=beta)
    g = np.asarray(got.double().cpu() if kind == "torch" else got, np.float64)
    assert g.shape == want.shape
    assert not np.isnan(g).any()
    err = np.linalg.norm(g - want) / (np.linalg.norm(want) or 1.0)
    assert err <= TOL[p["dtype"]] * 4, (p, err)
    if out is not None:
        assert got is out
