"""The one persistent TMA kernel (kernels.matmul_tma_persistent_kernel, variant 'tma', host side in
kernels/block/tma_persistent.py), against float64.

Emulation: Triton 3.9's interpreter runs ``tl.make_tensor_descriptor`` kernels (zero-filled reads and
clipped writes at the edges included), so the kernel itself runs here on toy sizes -- plain products,
alpha/beta, EPI_SPLIT 1 and 2, a K-major B, every BIAS mode with every activation, ragged edges
(M, N, K no multiple of the tile), several tiles per program (4 "SMs"), C NaN-poisoned where beta
is 0. The interpreter's bf16 ``tl.dot`` is wrong (triton 3.9): bf16 runs on the GPU only. Also on
CPU: the variant's launch binds as one class launch (the short path) with alpha/beta, and
tiledmm.ops runs bias and activation in the TMA launch's epilogue when the dispatcher picks it.
On a GPU (@pytest.mark.gpu): every config of the variant's table, bf16 / fp16 / tf32 (K-major B),
the fused epilogue, through the variant's launch and through tiledmm.nn.functional.linear.
"""
from __future__ import annotations

import functools

import pytest

from tests.conftest import GPU

torch = pytest.importorskip("torch")

from tiledmm.kernels.block import configs as C  # noqa: E402
from tiledmm.kernels.block import fastlaunch  # noqa: E402
from tiledmm.kernels.block import heuristics as H  # noqa: E402
from tiledmm.kernels.block import tma_persistent as T  # noqa: E402
from tiledmm.kernels.block import variants as V  # noqa: E402
from tiledmm.kernels.block._vcommon import KINDS, kind_of  # noqa: E402

from .references import activation64  # noqa: E402
from .standins import Compiled, Launcher, direct_launches  # noqa: E402

DEV = "cuda" if GPU else "cpu"
TOL = {"ieee": 1e-5, "tf32": 3e-3, torch.float16: 4e-3, torch.bfloat16: 1.5e-2}
emulation_only = pytest.mark.skipif(GPU, reason="interpreter-sized configs (the GPU tests use real ones)")
ACTS = ("none", "relu", "gelu", "gelu_tanh", "silu")


def _tiny(epi: int) -> dict:
    return dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=2, EPI_SPLIT=epi, WS=False, num_warps=4, num_stages=2)


def _operands(seed, M, K, N, dtype, beta, kmajor):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=gen, dtype=torch.float64).to(DEV, dtype)
    b = torch.randn(K, N, generator=gen, dtype=torch.float64).to(DEV, dtype)
    if kmajor:
        b = b.T.contiguous().T          # K-contiguous: strides (1, K)
    c = torch.randn(M, N, generator=gen, dtype=torch.float64).to(DEV, dtype) if beta else \
        torch.full((M, N), float("nan"), device=DEV, dtype=dtype)   # every element must be written
    return a, b, c


def _reference(a, b, c, alpha, beta, bias=None, bias_mode=0, act="none"):
    ref = alpha * (a.double().cpu() @ b.double().cpu())
    if beta:
        ref = ref + beta * c.double().cpu()
    if bias_mode == 1:
        ref = ref + bias.double().cpu()[None, :]
    elif bias_mode == 2:
        ref = ref + bias.double().cpu()[:, None]
    return activation64(ref, act)


def _check(out, ref, tol):
    out = out.double().cpu()
    assert torch.isfinite(out).all(), "unwritten (NaN) or non-finite outputs"
    err = ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    assert err < tol, err


# --- the kernel in the interpreter -----------------------------------------------------------------

@emulation_only
@pytest.mark.parametrize("dtype,prec", [(torch.float32, "ieee"), (torch.float32, "tf32"), (torch.float16, "none")])
@pytest.mark.parametrize("kmajor", [False, True])
@pytest.mark.parametrize("epi", [1, 2])
def test_kernel_interpreter(dtype, prec, kmajor, epi):
    """M 37, N 72, K 56 (ragged against 16 x 32 x 16 tiles: zero-filled reads, clipped writes); 9
    tiles on 4 programs; plain, then alpha/beta."""
    M, K, N = 37, 56, 72
    for alpha, beta in [(1.0, 0.0), (2.0, -0.5)]:
        a, b, c = _operands(M + K + N + epi, M, K, N, dtype, beta, kmajor)
        assert T.b_kmajor(b) == kmajor
        ref = _reference(a, b, c, alpha, beta)
        a0, b0 = a.clone(), b.clone()
        T.launch(a, b, c, precision=prec, alpha=alpha, beta=beta, config=_tiny(epi))
        _check(c, ref, TOL[prec] if dtype == torch.float32 else TOL[dtype])
        assert torch.equal(a, a0) and torch.equal(b, b0)          # inputs never modified


@emulation_only
@pytest.mark.parametrize("bias_mode", [0, 1, 2])
@pytest.mark.parametrize("act", ACTS)
def test_fused_epilogue_interpreter(bias_mode, act):
    """Every BIAS mode with every activation: EPI_SPLIT 2 plain, EPI_SPLIT 1 with alpha/beta and a
    K-major B; the bias a strided view (stride 2) of another dtype than A's for the first."""
    M, K, N = 37, 40, 72
    gen = torch.Generator().manual_seed(bias_mode * 10 + len(act))
    for epi, alpha, beta, kmajor in [(2, 1.0, 0.0, False), (1, 0.75, 1.5, True)]:
        a, b, c = _operands(bias_mode + epi, M, K, N, torch.float32, beta, kmajor)
        n = (0, N, M)[bias_mode]
        bias = torch.randn(2 * max(n, 1), generator=gen, dtype=torch.float64).to(DEV, torch.float32)[::2] \
            if bias_mode else None
        if bias_mode and epi == 2:
            bias = bias.half()
        ref = _reference(a, b, c, alpha, beta, bias, bias_mode, act)
        T.launch(a, b, c, precision="ieee", alpha=alpha, beta=beta, config=_tiny(epi), bias=bias,
                 bias_mode=bias_mode, act=act)
        _check(c, ref, 1e-3 if bias is not None and bias.dtype == torch.float16 else TOL["ieee"])


@emulation_only
def test_warp_specialize_flag_interpreter():
    """WS = True (the unflattened, warp-specialised tile loop on a GPU): the same results here."""
    a, b, c = _operands(4, 37, 56, 72, torch.float32, 1.0, False)
    ref = _reference(a, b, c, 1.0, 1.0)
    T.launch(a, b, c, precision="ieee", beta=1.0, config=dict(_tiny(2), WS=True))
    _check(c, ref, TOL["ieee"])


@emulation_only
def test_fused_epilogue_changes_the_result():
    """The bias and the activation reach the output (the test above could not tell a skipped
    epilogue from a right one if the reference ignored them too)."""
    a, b, c = _operands(3, 20, 16, 40, torch.float32, 0.0, False)
    plain, fused = c.clone(), c.clone()
    bias = torch.full((40,), -100.0)
    T.launch(a, b, plain, precision="ieee", config=_tiny(2))
    T.launch(a, b, fused, precision="ieee", config=_tiny(2), bias=bias, bias_mode=1, act="relu")
    assert torch.equal(fused, torch.zeros_like(fused)) and not torch.equal(plain, fused)


# --- the variant's table, its applicability -----------------------------------------------------------

@pytest.mark.parametrize("kind,esize", [("16bit", 2), ("tf32", 4), ("ieee", 4)])
def test_configs_fit_shared_memory_and_heuristic_picks_from_them(kind, esize):
    table = C.TMA[kind]
    assert table and len({tuple(sorted(c.items())) for c in table}) == len(table)      # no duplicate
    for c in table:
        assert H.smem_bytes(c, esize, esize, V.TMA.traits.tma_store) <= H.H100.smem, c
        assert c.get("EPI_SPLIT", 1) in (1, 2) and c["BLOCK_N"] % c.get("EPI_SPLIT", 1) == 0
    for shape in [(1, 5120, 5120), (256, 13824, 5120), (4096, 4096, 4096), (127, 8191, 127), (16384, 16384, 64)]:
        assert T.heuristic(*shape, kind, 132) in table


def test_beta_drops_stages_only_where_the_read_back_does_not_fit():
    """beta != 0 stages C's piece once more (sizes from sm_90 compiles: 128 x 256 x 32 tf32 3 stages
    279,576 bytes, 2 stages 230,416; 128 x 256 x 64 bf16 3 stages 213,032)."""
    limit = H.H100.smem
    for kind, esize, stages in (("16bit", 2, 3), ("tf32", 4, 2)):
        meta = {k: v for k, v in C.TMA[kind][0].items() if k not in ("num_warps", "num_stages")}
        assert T._fit_beta(meta, 3, esize, esize, limit) == stages, kind
    meta = {k: v for k, v in C.TMA["16bit"][1].items() if k not in ("num_warps", "num_stages")}
    assert T._fit_beta(meta, 4, 2, 2, limit) == 3                  # 4 stages: 262,192 bytes with the read-back


def test_one_tma_variant_family_with_the_epilogue():
    names = [v.name for v in V.ALL + V.OPT_IN]
    assert "tma-persistent" not in names and {"tma", "tma-kmajor", "tma-copy", "tma-kcache"} <= set(names)
    assert V.TMA.epilogue and V.BY_NAME["tma-kmajor"].epilogue and V.BLOCKED.epilogue
    assert not V.SPLITK.epilogue and not V.BY_NAME["tma-copy"].epilogue
    assert V.TMA.traits.persistent and V.TMA.traits.tma_store and V.TMA.replayable is True
    assert set(C.TMA) == set(KINDS)


def test_model_keeps_wide_tiles_where_waves_tie(monkeypatch):
    """8192 x 16384 (Linear(4096, 16384) on 8192 tokens): 63 waves of 128 x 128 against 32 of 128 x 256;
    the TMA candidates the model ranks are the wide ones (their operand reuse counted), and 8192^3 too."""
    from tiledmm.kernels.block import dispatch as BM
    monkeypatch.setattr(BM, "emulating", lambda: False)
    for M, N, K in ((8192, 16384, 4096), (8192, 8192, 8192)):
        cands = BM.model_candidates([V.TMA], H.Problem(M, N, K, 1, "16bit", 2, 2, True), H.H100)
        assert {(cd.config["BLOCK_M"], cd.config["BLOCK_N"]) for cd in cands} == {(128, 256)}, cands
    assert C.prune(C.TMA["16bit"], 8192, 16384, 4096, 132, keep=1)[0]["BLOCK_N"] == 128   # without reuse


@pytest.mark.skipif(GPU, reason="emulation: no copy engine")
def test_not_applicable_without_hopper():
    a = torch.randn(32, 32)
    assert not T.applicable(a, a, torch.empty(32, 32), "none", 2.0, 1.0)
    assert not V.TMA.applicable(a, a, torch.empty(32, 32), "none", 1.0, 0.0)


# --- bound launches and the ops' fused path (CPU, stand-ins) ---------------------------------------

@pytest.fixture
def standin(monkeypatch):
    """FastKernels as on a GPU with a stand-in compiled kernel (tests/standins.py); returns the C
    launches recorded."""
    calls = []

    def slow(self, grid, args):
        return Compiled(Launcher(calls, 64 if "NUM_SMS" in self.meta else 0), "fn")
    direct_launches(monkeypatch, slow)
    V._fast.cache_clear()
    yield calls
    V._fast.cache_clear()


@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (2.0, 0.5)])
def test_variant_binds_as_a_class_launch(standin, alpha, beta):
    """The TMA plan, with or without alpha/beta, becomes a ClassLaunch whose C launch for a new M of
    the class passes what the variant's own launch passes (the scratch buffer aside)."""
    calls = standin
    fn = functools.partial(V.TMA.launch, precision="ieee", config=_tiny(2))
    fn.replayable = True
    a, b, c = (torch.randn(40, 24), torch.randn(24, 72), torch.randn(40, 72))
    cls, exact = fastlaunch.bind(fn, a, b, c, alpha, beta)
    assert cls is not None and exact is None
    a2, c2 = torch.randn(57, 24), torch.randn(57, 72)
    calls.clear()
    fn(a2, b, c2, alpha=alpha, beta=beta)
    own = list(calls[0])
    calls.clear()
    assert cls(9, fastlaunch._env(a2, b, c2, alpha, beta)) is True
    mine = list(calls[0])
    own[7] = mine[7] = "scratch"
    assert [v.data_ptr() if hasattr(v, "data_ptr") else v for v in own] == mine


@emulation_only
def test_ops_run_bias_and_activation_in_the_tma_epilogue(monkeypatch):
    """tiledmm.ops with the dispatcher's pick made the TMA plan (as on a Hopper GPU for a large
    Linear): the launch receives bias, bias_mode and act -- one kernel, no torch pass after -- and
    the result matches float64 (the kernel itself runs in the interpreter here)."""
    from tiledmm.kernels.block import dispatch as BM
    from tiledmm.nn.functional import linear
    seen = []

    def launch(a, b, c, **kw):
        seen.append({k: kw.get(k) for k in ("bias_mode", "act")})
        T.launch(a, b, c, **kw)
    tma = V.Variant("tma-spy", V.TMA.applicable, V.TMA.configs, launch, True, epilogue=True)
    monkeypatch.setattr(BM, "resolved", lambda a, b, c, p, al, be, *passes: BM._bind(tma, p, _tiny(2)))
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 19, 40, generator=gen, dtype=torch.float64)
    w = torch.randn(72, 40, generator=gen, dtype=torch.float64)
    bias = torch.randn(72, generator=gen, dtype=torch.float64)
    y = linear(x.float(), w.float(), bias.float(), "gelu")         # B = weight.mT: K-major
    assert seen == [{"bias_mode": 1, "act": "gelu"}]
    _check(y, activation64(x @ w.T + bias, "gelu"), TOL["ieee"])


def test_ops_without_the_epilogue_flag_apply_bias_in_torch(monkeypatch):
    """The control: a pick whose launch lacks the epilogue flag is never given the keywords (the
    product through tiledmm.matmul, bias and activation in torch), and the result is the same."""
    from tiledmm.kernels.block import dispatch as BM
    from tiledmm.ops import _impl
    fused = []
    real = _impl._fused
    monkeypatch.setattr(_impl, "_fused", lambda *args: fused.append(real(*args)) or fused[-1])
    plain = V.Variant("plain", V.BLOCKED.applicable, V.BLOCKED.configs,
                      lambda a, b, c, *, precision, alpha, beta, config: V.BLOCKED.launch(
                          a, b, c, precision=precision, alpha=alpha, beta=beta, config=config), True)
    monkeypatch.setattr(BM, "resolved", lambda a, b, c, p, al, be, *passes: BM._bind(plain, p, C.EMULATION))
    from tiledmm.nn.functional import linear
    x, w, bias = torch.randn(9, 16, device=DEV), torch.randn(24, 16, device=DEV), torch.randn(24, device=DEV)
    y = linear(x, w, bias, "silu")
    assert fused == [False]
    _check(y, activation64(x.double().cpu() @ w.double().cpu().T + bias.double().cpu(), "silu"), 1e-5)


# --- on the GPU ---------------------------------------------------------------------------------------

GPU_CASES = [(torch.bfloat16, "none", False), (torch.float16, "none", True), (torch.float32, "tf32", True),
             (torch.float32, "ieee", False)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,prec,kmajor", GPU_CASES)
@pytest.mark.parametrize("M,K,N", [(1000, 520, 776), (129, 64, 4104), (257, 4096, 1000)])
def test_every_config_gpu(dtype, prec, kmajor, M, K, N):
    """Every config of the table (EPI_SPLIT 1 and 2, WS) plain and with alpha/beta; ragged edges."""
    if not T.applicable(*_operands(0, M, K, N, dtype, 0.0, kmajor), prec):
        pytest.skip("needs a Hopper GPU")
    for cfg in C.TMA[kind_of(prec)]:
        for alpha, beta in [(1.0, 0.0), (0.5, 2.0)]:
            a, b, c = _operands(M + N, M, K, N, dtype, beta, kmajor)
            ref = _reference(a, b, c, alpha, beta)
            T.launch(a, b, c, precision=prec, alpha=alpha, beta=beta, config=cfg)
            torch.cuda.synchronize()
            _check(c, ref, TOL[prec] if dtype == torch.float32 else TOL[dtype])


FUSED_GPU = [(GPU_CASES[0], mode, act) for mode in (0, 1, 2) for act in ACTS] + \
    [(case, mode, act) for case in GPU_CASES[1:3] for mode in (0, 1, 2) for act in ("none", "gelu_tanh")]


@pytest.mark.gpu
@pytest.mark.parametrize("case,bias_mode,act", FUSED_GPU)
def test_fused_epilogue_gpu(case, bias_mode, act):
    """Every BIAS mode x activation (bf16; two activations for fp16 and tf32): the first config
    (128 x 256, EPI_SPLIT 2) plain, a 128 x 128 one with EPI_SPLIT 1 and alpha/beta; ragged edges."""
    dtype, prec, kmajor = case
    M, K, N = 1000, 776, 1032
    if not T.applicable(*_operands(7, M, K, N, dtype, 0.0, kmajor), prec):
        pytest.skip("needs a Hopper GPU")
    bias = torch.randn((0, N, M)[bias_mode], device=DEV).to(dtype) if bias_mode else None
    table = C.TMA[kind_of(prec)]
    for cfg, alpha, beta in [(table[0], 1.0, 0.0), ({**table[3], "EPI_SPLIT": 1}, 0.5, 1.5)]:
        a, b, c = _operands(bias_mode, M, K, N, dtype, beta, kmajor)
        ref = _reference(a, b, c, alpha, beta, bias, bias_mode, act)
        T.launch(a, b, c, precision=prec, alpha=alpha, beta=beta, config=cfg, bias=bias, bias_mode=bias_mode, act=act)
        torch.cuda.synchronize()
        _check(c, ref, TOL[prec] if dtype == torch.float32 else TOL[dtype])


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["gelu", "silu"])
def test_large_linear_fuses_into_the_tma_kernel_gpu(act, monkeypatch):
    """A Linear layer (bf16, 4096 x 2048 x 1024) whose plan is the TMA kernel -- the dispatcher's
    plan replaced by the TMA variant at its first fitting config, whatever the table or the model
    would pick: the epilogue runs there (the launch gets the keywords) and the result matches float64."""
    from tiledmm.kernels.block import dispatch as BM
    from tiledmm.nn.functional import linear
    x = torch.randn(4096, 1024, device=DEV, dtype=torch.bfloat16)
    w = torch.randn(2048, 1024, device=DEV, dtype=torch.bfloat16) / 32
    bias = torch.randn(2048, device=DEV, dtype=torch.bfloat16)
    assert V.TMA.applicable(x, w.T, torch.empty(4096, 2048, device=DEV, dtype=torch.bfloat16), "none", 1.0, 0.0)
    config = BM._configs(V.TMA, "16bit", 2, 2, BM.device(None), 4096)[0]
    seen = []
    real = V.TMA.launch

    def spy(*args, **kw):
        seen.append(kw.get("act"))
        return real(*args, **kw)
    monkeypatch.setattr(BM, "resolved", lambda *args: BM._bind(V.Variant("tma", V.TMA.applicable, V.TMA.configs,
                                                                           spy, True, epilogue=True), "none",
                                                                 config))
    y = linear(x, w, bias, act)
    torch.cuda.synchronize()
    assert seen == [act]
    _check(y, activation64(x.double() @ w.double().T + bias.double(), act).cpu(), TOL[torch.bfloat16])
