"""Variant 'batched-small' (kernels/block/batched_small.py): many tiny products, G per program.

Against float64, on Triton's interpreter here (toy batches) and on the GPU where there is one
(the same tests, a larger batch): every kind, ragged M/N/K, broadcast and strided operands,
alpha/beta, NaN-poisoned outputs, batch counts that are not a multiple of G, a config from a
smaller class. And the model (heuristics.py) with the dispatcher's candidates: it picks this
variant for a batch of tiny products and never for larger ones. GPU only: tiledmm.matmul's own pick
and its bound repeat calls, a batch over gridDim.y's 65,535.
"""
from __future__ import annotations

import pytest

from tests.conftest import GPU

torch = pytest.importorskip("torch")

import tiledmm  # noqa: E402
from tiledmm import TiledmmError  # noqa: E402
from tiledmm.kernels.block import _vcommon as V  # noqa: E402
from tiledmm.kernels.block import batched_small as BS  # noqa: E402
from tiledmm.kernels.block import heuristics as H  # noqa: E402
from tiledmm.kernels.block import dispatch as bm  # noqa: E402
from tiledmm.kernels.block import variants  # noqa: E402

DEV = "cuda" if GPU else "cpu"
BATCH = 4243 if GPU else 71          # not a multiple of any G; G > 1 either way (checked)
KINDS = [(torch.float32, "ieee", 1e-6), (torch.float32, "tf32", 2e-3), (torch.bfloat16, None, 1.5e-2),
         (torch.float16, None, 2e-3)]
IDS = ["ieee", "tf32", "bf16", "fp16"]
SHAPES = [(3, 7, 5), (8, 16, 8), (17, 31, 9), (1, 1, 1), (32, 32, 32)]    # (M, K, N)


def _rand(shape, dtype, gen):
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(DEV, dtype)


def _err(got, want) -> float:
    return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def _run(a, b, c, precision, alpha=1.0, beta=0.0, config=None):
    assert BS.applicable(a, b, c, precision or "none", alpha, beta)
    BS.launch(a, b, c, precision=precision or "none", alpha=alpha, beta=beta, config=config)
    return c


def _group(M, K, N, batch, precision, config=None):
    kind = V.kind_of(precision)
    return BS.group(M, N, K, batch, kind, config or BS.heuristic(M, N, K, kind), V.num_sms(V.index_of(
        torch.empty(0, device=DEV))))


@pytest.mark.parametrize("dtype,precision,tol", KINDS, ids=IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_against_float64(dtype, precision, tol, shape):
    M, K, N = shape
    gen = torch.Generator().manual_seed(M * 1000 + K * 10 + N)
    a, b = _rand((BATCH, M, K), dtype, gen), _rand((BATCH, K, N), dtype, gen)
    a0, b0 = a.clone(), b.clone()
    c = torch.full((BATCH, M, N), float("nan"), device=DEV, dtype=dtype)    # beta = 0: never read
    _run(a, b, c, precision)
    assert _err(c, a.double() @ b.double()) < tol
    assert torch.equal(a, a0) and torch.equal(b, b0)
    G = _group(M, K, N, BATCH, precision)[0]
    assert G > 1 and BATCH % G != 0      # the last program's products are partly masked


@pytest.mark.parametrize("dtype,precision,tol", KINDS, ids=IDS)
def test_alpha_beta(dtype, precision, tol):
    gen = torch.Generator().manual_seed(7)
    a, b = _rand((BATCH, 5, 12), dtype, gen), _rand((BATCH, 12, 6), dtype, gen)
    c = _rand((BATCH, 5, 6), dtype, gen)
    want = 0.5 * (a.double() @ b.double()) - 2.0 * c.double()
    _run(a, b, c, precision, alpha=0.5, beta=-2.0)
    assert _err(c, want) < tol


@pytest.mark.parametrize("dtype,precision,tol", KINDS, ids=IDS)
@pytest.mark.parametrize("form", ["b2d", "b1", "a2d", "a1"])
def test_broadcast_operand(dtype, precision, tol, form):
    """One operand 2-D or of batch 1 (batch stride 0): every product reads the same matrix."""
    gen = torch.Generator().manual_seed(11)
    M, K, N = 6, 10, 12
    a = _rand({"a2d": (M, K), "a1": (1, M, K)}.get(form, (BATCH, M, K)), dtype, gen)
    b = _rand({"b2d": (K, N), "b1": (1, K, N)}.get(form, (BATCH, K, N)), dtype, gen)
    c = torch.full((BATCH, M, N), float("nan"), device=DEV, dtype=dtype)
    _run(a, b, c, precision)
    assert _err(c, a.double() @ b.double()) < tol


@pytest.mark.parametrize("dtype,precision,tol", KINDS, ids=IDS)
def test_strided_operands(dtype, precision, tol):
    """Transposed matrices, batch as the inner dimension, and a strided output view."""
    gen = torch.Generator().manual_seed(13)
    M, K, N = 9, 20, 7
    a = _rand((BATCH, K, M), dtype, gen).transpose(1, 2)          # column-major A
    b = _rand((N, BATCH, K), dtype, gen).permute(1, 2, 0)         # batch in the middle, B K-major
    big = torch.full((BATCH, M, 2 * N + 3), float("nan"), device=DEV, dtype=dtype)
    c = big[:, :, 1:2 * N + 1:2]                                   # every other column
    _run(a, b, c, precision)
    assert _err(c, a.double() @ b.double()) < tol
    assert torch.isnan(big[:, :, 0]).all() and torch.isnan(big[:, :, 2:2 * N + 1:2]).all()   # nothing else written


def test_config_of_a_smaller_class_is_widened():
    """A class's representative size rounds down (M = 17 is in 16's class): launch widens the blocks."""
    gen = torch.Generator().manual_seed(17)
    a, b = _rand((BATCH, 17, 31), torch.float16, gen), _rand((BATCH, 31, 9), torch.float16, gen)
    c = torch.empty((BATCH, 17, 9), device=DEV, dtype=torch.float16)
    small = BS.heuristic(16, 8, 16, "16bit")
    assert (small["BLOCK_M"], small["BLOCK_K"]) == (16, 16)
    _run(a, b, c, None, config=small)
    assert _err(c, a.double() @ b.double()) < 2e-3
    G, bm_, bn_, bk_ = _group(17, 31, 9, BATCH, None, small)
    assert (bm_, bn_, bk_) == (32, 16, 32) and G * (bm_ * bk_ + bk_ * bn_ + bm_ * bn_) <= small["ELEMS"]


@pytest.mark.parametrize("dtype,precision,tol", KINDS, ids=IDS)
def test_through_tiledmm_matmul(dtype, precision, tol):
    gen = torch.Generator().manual_seed(19)
    a, b = _rand((BATCH, 8, 16), dtype, gen), _rand((BATCH, 16, 8), dtype, gen)
    opts = {"precision": precision} if precision else {}
    c = tiledmm.matmul(a, b, kernel="triton", variant=BS.NAME, **opts)
    assert _err(c, a.double() @ b.double()) < tol


def test_refused_where_it_does_not_apply():
    gen = torch.Generator().manual_seed(23)
    f32 = torch.float32
    big = _rand((BATCH, 33, 8), f32, gen), _rand((BATCH, 8, 8), f32, gen), torch.empty((BATCH, 33, 8), device=DEV)
    few = _rand((BS.MIN_BATCH - 1, 8, 8), f32, gen), _rand((BS.MIN_BATCH - 1, 8, 8), f32, gen), \
        torch.empty((BS.MIN_BATCH - 1, 8, 8), device=DEV)
    flat = _rand((8, 8), f32, gen), _rand((8, 8), f32, gen), torch.empty((8, 8), device=DEV)
    for a, b, c in (big, few, flat):
        assert not BS.applicable(a, b, c, "ieee")
    a, b, c = _rand((BATCH, 8, 8), f32, gen), _rand((BATCH, 8, 8), f32, gen), torch.empty((BATCH, 8, 8), device=DEV)
    assert BS.applicable(a, b, c, "ieee") and BS.applicable(a, b, c, "tf32") and not BS.applicable(a, b, c, "none")
    with pytest.raises(TiledmmError, match="batched-small"):
        tiledmm.matmul(*big[:2], kernel="triton", variant=BS.NAME)


# -- the model -------------------------------------------------------------------------------------

def _pick(batch, M, K, N, dtype, precision, monkeypatch) -> str:
    """The dispatcher's candidates for this call (applicable() included) and the model's pick among
    them, as on a GPU (the interpreter offers this variant only when forced)."""
    monkeypatch.setattr(bm, "emulating", lambda: False)
    a = torch.empty((batch, M, K), dtype=dtype, device=DEV)
    b = torch.empty((batch, K, N), dtype=dtype, device=DEV)
    c = torch.empty((batch, M, N), dtype=dtype, device=DEV)
    cands = bm.candidates(a, b, c, precision, 1.0, 0.0)
    return H.pick(cands, bm._problem(a, b, c, precision), H.H100).variant.name


def test_registered_for_any_batch_count():
    v = variants.BY_NAME[BS.NAME]
    assert v in variants.ALL and v.splits_batch and v.replayable is True


@pytest.mark.parametrize("dtype,precision", [(torch.float32, "ieee"), (torch.float32, "tf32"),
                                             (torch.bfloat16, "none"), (torch.float16, "none")], ids=IDS)
def test_model_picks_it_for_many_tiny_products(dtype, precision, monkeypatch):
    for shape in [(20000, 8, 16, 8), (70000, 8, 16, 8), (10000, 32, 32, 32), (50000, 4, 4, 4), (10000, 3, 29, 17)]:
        assert _pick(*shape, dtype, precision, monkeypatch) == BS.NAME, shape


@pytest.mark.parametrize("dtype,precision", [(torch.float32, "ieee"), (torch.bfloat16, "none")], ids=["ieee", "bf16"])
def test_model_never_picks_it_for_larger_products(dtype, precision, monkeypatch):
    assert _pick(4, 512, 512, 512, dtype, precision, monkeypatch) != BS.NAME
    assert _pick(2000, 64, 32, 32, dtype, precision, monkeypatch) != BS.NAME
    assert _pick(BS.MIN_BATCH - 1, 8, 16, 8, dtype, precision, monkeypatch) != BS.NAME
    assert not BS.prune(BS.CONFIGS[V.kind_of(precision)], 512, 512, 512, 132, 4)   # no config for the model


# -- on the GPU: the default pick, bound repeat calls, a batch over gridDim.y's limit ----------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype,precision,tol", KINDS, ids=IDS)
def test_gpu_default_pick_and_repeat_calls(dtype, precision, tol, monkeypatch):
    """tiledmm.matmul's own pick (no variant named) is this kernel, and repeat calls -- the short
    path's bound launch -- compute each call's own operands."""
    monkeypatch.setenv("TILEDMM_TABLE", "off")      # the model's pick, not a shipped table's
    gen = torch.Generator().manual_seed(29)
    opts = {"precision": precision} if precision else {}
    for _ in range(3):
        a, b = _rand((20000, 8, 16), dtype, gen), _rand((20000, 16, 8), dtype, gen)
        out = torch.full((20000, 8, 8), float("nan"), device=DEV, dtype=dtype)
        tiledmm.matmul(a, b, out=out, **opts)
        assert _err(out, a.double() @ b.double()) < tol
    key = bm.plan_key(a, b, out, precision or "none", 1.0, 0.0)
    assert bm.choices()[key]["variant"] == BS.NAME


@pytest.mark.gpu
def test_gpu_batch_over_the_grid_limit():
    gen = torch.Generator().manual_seed(31)
    batch = variants.MAX_GRID_YZ + 4470
    a, b = _rand((batch, 3, 5), torch.float32, gen), _rand((batch, 5, 7), torch.float32, gen)
    c = torch.full((batch, 3, 7), float("nan"), device=DEV)
    _run(a, b, c, "ieee")
    assert _err(c, a.double() @ b.double()) < 1e-6
