"""Batch-invariant mode (tiledmm.batch_invariant, TILEDMM_BATCH_INVARIANT=1): every output row bitwise
independent of M and of the other rows, and the same from run to run.

In emulation: the Triton family's kernels run in Triton's interpreter and the SIMT ladder's in numba's
simulator, so the bitwise checks cover the mode's plumbing (the plan keyed without M, one config per N
and K) at toy sizes; the GPU tests (marked gpu) check the real kernels for M from 1 to 8192."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import tiledmm
from tests.conftest import GPU
from tiledmm import api, invariance

torch = pytest.importorskip("torch")

from tiledmm.kernels.block import heuristics as H  # noqa: E402
from tiledmm.kernels.block import invariant  # noqa: E402
from tiledmm.kernels.block import dispatch as bm  # noqa: E402
from tiledmm.kernels.block import splitk  # noqa: E402
from tiledmm.kernels.block import variants as V  # noqa: E402

DEV = "cuda" if GPU else "cpu"
ROOT = Path(__file__).resolve().parents[1]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# the row counts checked in emulation (one full product of EMU_M rows against each of its prefixes)
EMU_M = 64
EMU_ROWS = (1, 2, 3, 7, 16, 17, 31, 32, 33, 48, 63)


def _mismatches(a, b, rows, **kw) -> list[int]:
    """The row counts m for which matmul(a[:m], b) is not bitwise matmul(a, b)[:m]."""
    full = tiledmm.matmul(a, b, **kw)
    return [m for m in rows if not torch.equal(tiledmm.matmul(a[:m], b, **kw), full[:m])]


# -- the mode itself -----------------------------------------------------------------------------------

def test_the_mode_is_a_nestable_context_of_its_own_thread():
    assert not invariance.active()
    seen = {}
    with tiledmm.batch_invariant():
        assert invariance.active()
        with tiledmm.batch_invariant(False):
            assert not invariance.active()
            with tiledmm.batch_invariant():
                assert invariance.active()
            assert not invariance.active()
        assert invariance.active()
        t = threading.Thread(target=lambda: seen.setdefault("other", invariance.active()))
        t.start()
        t.join()
    assert not invariance.active()
    assert seen["other"] is False           # another thread starts with the environment's default
    with pytest.raises(ZeroDivisionError):
        with tiledmm.batch_invariant():
            1 / 0
    assert not invariance.active()          # left on an exception too


def test_the_environment_variable_turns_it_on():
    code = ("import tiledmm, torch; from tiledmm import invariance; from tiledmm.kernels.block import invariant;"
            "a = torch.randn(5, 8); b = torch.randn(8, 6);"
            "tiledmm.matmul(a, b);"
            "print(invariance.active(), len(invariant.choices()))")
    env = dict(os.environ, TILEDMM_BATCH_INVARIANT="1", PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["True", "1"]      # on, and the call took the mode's plan


def test_the_plan_key_has_no_m_and_the_plan_is_one_per_n_and_k():
    a = torch.randn(40, 24, device=DEV)
    b = torch.randn(24, 16, device=DEV)
    c = torch.empty(40, 16, device=DEV)
    keys = {invariant.key_of(a[:m], b, c[:m], "ieee", 1.0, 0.0) for m in (1, 2, 17, 40)}
    assert len(keys) == 1
    with tiledmm.batch_invariant():
        fns = {id(bm.resolved(a[:m], b, c[:m], "ieee", 1.0, 0.0)) for m in (1, 2, 17, 40)}
    assert len(fns) == 1
    other_n = invariant.key_of(a, b[:, :15], c[:, :15], "ieee", 1.0, 0.0)
    assert other_n not in keys                               # N itself, not its class, is in the key


def test_the_mode_ignores_the_store_the_table_tuning_and_the_normal_resolver(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("the batch-invariant mode consulted the normal dispatcher's choice")
    monkeypatch.setattr(bm, "_resolve", forbidden)
    monkeypatch.setattr(bm.tuning, "lookup", forbidden)
    monkeypatch.setattr(bm.shipped, "table_for", forbidden)
    monkeypatch.setattr(bm.R, "ruling", forbidden)
    invariant.forget()
    a = torch.randn(9, 20, device=DEV)
    b = torch.randn(20, 12, device=DEV)
    with tiledmm.batch_invariant():
        got = tiledmm.matmul(a, b)
    torch.testing.assert_close(got, a @ b, rtol=1e-5, atol=1e-5)
    (choice,) = invariant.choices().values()
    assert V.BY_NAME[choice["variant"]].invariant is not None


def test_the_short_path_keeps_the_modes_plans_apart(monkeypatch):
    made = []

    class Spec:
        @staticmethod
        def fast_plan(kind, a, precision):
            made.append(invariance.active())
            return object()
    monkeypatch.setattr(api, "_fast_plans", {})
    monkeypatch.setattr(api, "_invariant_plans", {})
    a = torch.randn(3, 4)
    normal = api._plan_for(Spec, "torch", None, None, a, a)
    with tiledmm.batch_invariant():
        inv = api._plan_for(Spec, "torch", None, None, a, a)
        assert api._plan_for(Spec, "torch", None, None, a, a) is inv
    assert normal is not inv and made == [False, True]
    assert api._plan_for(Spec, "torch", None, None, a, a) is normal


# -- the choice -----------------------------------------------------------------------------------------

def _model_candidates(kind: str, esize: int, dev: H.Device) -> list:
    out = []
    for v in (V.BLOCKED, V.TMA, V.GLUON):
        for cfg in v.invariant(v.configs(kind)):
            if H.fits(cfg, esize, esize, v.traits.tma_store, dev.smem):
                out.append((v, H.Candidate(bm.candidate_name(v.name, cfg), cfg, v.traits, 0, v), lambda rows: 0))
    return out


@pytest.mark.parametrize("kind,esize", [("16bit", 2), ("tf32", 4), ("ieee", 4)])
def test_the_choice_on_an_h100_splits_nothing_and_is_the_same_for_any_call(kind, esize):
    for N, K in ((4096, 4096), (11008, 4096), (4096, 11008), (128, 8192), (8191, 127), (5120, 13824)):
        cands = _model_candidates(kind, esize, H.H100)

        def problem(rows):
            return H.Problem(rows, N, K, 1, kind, esize, esize, kind != "tf32", True, True)
        v, cd, score = invariant.choose(cands, problem, H.H100)
        assert cd.config.get("SPLIT_K", 1) == 1 and not cd.config.get("TAIL") and not cd.config.get("SWAP")
        assert v.invariant is not None and score >= 1.0
        assert invariant.choose(cands, problem, H.H100)[1] is cd      # a function of N, K and the layout only


def test_split_and_tail_configs_are_never_offered():
    """The Gluon kernel's split and tail (arrival-order adds, a split that follows M): never; split-K only
    with its split count fixed in the config and its partials added in split order (ORDERED)."""
    for kind in ("16bit", "tf32"):
        for cfg in V.GLUON.invariant(V.GLUON.configs(kind)):
            assert cfg["SPLIT_K"] == 1 and cfg["TAIL"] == 0
    assert V.SIMT_ASYNC.invariant is None
    assert all(v.invariant is None for v in V.ALL if v.name in ("tma-copy", "batched-small"))
    for kind in ("16bit", "tf32", "ieee"):
        offered = V.SPLITK.invariant(V.SPLITK.configs(kind))
        assert offered and all(c["SPLIT_K"] >= 2 and c["ORDERED"] and not c.get("SWAP") for c in offered)


# -- split-K with its split fixed by N and K -----------------------------------------------------------------

def _split_candidates(kind: str, esize: int, dev: H.Device, N: int, K: int, variants=(V.BLOCKED, V.SPLITK)) -> list:
    """The mode's candidates of ``variants`` for (N, K) on ``dev`` (invariant.candidates' rules without
    tensors): each config that fits, a split one where ``invariant.split_of`` offers it."""
    out = []
    for v in variants:
        for cfg in v.invariant(v.configs(kind)):
            if H.fits(cfg, esize, esize, v.traits.tma_store, dev.smem) and \
                    invariant.split_of(v, cfg, N, K, dev) is not None:
                out.append((v, H.Candidate(bm.candidate_name(v.name, cfg), cfg, v.traits, 0, v), lambda rows: 0))
    return out


def test_a_split_is_offered_only_where_it_is_the_same_at_every_m_and_splits():
    dev = H.H100
    cfg = dict(V.SPLITK.configs("16bit")[0])
    assert invariant.split_of(V.SPLITK, cfg, 4096, 4096, dev) is None        # its split follows M: never
    fixed = V.SPLITK.invariant([cfg])
    by_count = {c["SPLIT_K"]: invariant.split_of(V.SPLITK, c, 127, 8192, dev) for c in fixed}
    assert by_count[2] == 2 and by_count[16] == 16
    assert by_count[64] is None                      # slices of 1 K step (BLOCK_K 128): under MIN_SLICE_STEPS
    assert invariant.split_of(V.SPLITK, fixed[0], 127, 128, dev) is None     # one slice: the unsplit configs'
    for c in fixed:                                  # the slices: K and the config alone, whatever M or the SMs
        assert len({splitk.splits_for(m, n, 8192, b, c, sms) for m in (1, 7, 100, 8192) for n in (1, 127)
                    for b in (1, 3) for sms in (4, 132)}) == 1


@pytest.mark.parametrize("kind,esize,N,K,aligned", [("16bit", 2, 127, 8191, False), ("16bit", 2, 128, 8192, True),
                                                    ("ieee", 4, 4096, 4096, True), ("tf32", 4, 127, 8191, True)])
def test_few_row_long_k_products_take_a_fixed_split_on_an_h100(kind, esize, N, K, aligned):
    """Where the output's tiles leave most of an H100's SMs idle at few rows and K is long, the ladder's
    choice is split-K with its split fixed (127 x 8191 x 127 bf16 cost 13.5x the normal mode without it)."""
    cands = _split_candidates(kind, esize, H.H100, N, K, (V.BLOCKED, V.TMA, V.SPLITK) if aligned else
                              (V.BLOCKED, V.SPLITK))

    def problem(rows):
        return H.Problem(rows, N, K, 1, kind, esize, esize, False, aligned, aligned)
    v, cd, score = invariant.choose(cands, problem, H.H100)
    assert v is V.SPLITK and cd.config["ORDERED"] and invariant.split_of(v, cd.config, N, K, H.H100) >= 2, cd.name
    no_split = [c for c in cands if c[0] is not V.SPLITK]
    assert invariant.choose(no_split, problem, H.H100)[1] is not cd


def test_a_narrow_win_of_a_split_over_the_ladder_is_not_taken(monkeypatch):
    """bf16 4096 x 11008 on an H100: a split scores about 2 % better over the ladder (few rows gain, many
    rows lose about 2x): within SPLIT_MARGIN, so the unsplit choice stands; without the margin, the split."""
    N, K = 4096, 11008
    cands = _split_candidates("16bit", 2, H.H100, N, K, (V.BLOCKED, V.TMA, V.GLUON, V.SPLITK))

    def problem(rows):
        return H.Problem(rows, N, K, 1, "16bit", 2, 2)
    assert invariant.choose(cands, problem, H.H100)[0] is not V.SPLITK
    monkeypatch.setattr(invariant, "SPLIT_MARGIN", 1.0)
    assert invariant.choose(cands, problem, H.H100)[0] is V.SPLITK


def test_the_mode_judges_a_splits_reduce_as_a_pass_of_its_own():
    """``modelled_us`` adds the reduce's pass over the partials to the model's time of a split (the normal
    model overlaps it with the product), and nothing to a config that splits nothing."""
    cfg = V.SPLITK.invariant([dict(V.SPLITK.configs("16bit")[4])])[2]          # 128 x 128 x 64, SPLIT_K 8
    split = H.Candidate("s", cfg, V.SPLITK.traits)
    plain = H.Candidate("b", dict(V.BLOCKED.configs("16bit")[0]), V.BLOCKED.traits)
    for M in (1, 8192):
        p = H.Problem(M, 4096, 4096)
        assert invariant.modelled_us(split, p, H.H100) == pytest.approx(
            H.estimate_us(cfg, p, split.traits, H.H100)[0] + (4 * 8 + 2) * M * 4096 / H.H100.bandwidth)
        assert invariant.modelled_us(plain, p, H.H100) == H.estimate_us(plain.config, p, plain.traits, H.H100)[0]


# -- bitwise, in emulation (the GPU's kernels below) ------------------------------------------------------

@pytest.mark.parametrize("dtype", list(DTYPES))
def test_rows_do_not_depend_on_m(dtype):
    torch.manual_seed(1)
    t = DTYPES[dtype]
    a = torch.randn(EMU_M, 48, device=DEV).to(t)
    b = torch.randn(48, 40, device=DEV).to(t)
    with tiledmm.batch_invariant():
        first = tiledmm.matmul(a, b)
        assert _mismatches(a, b, EMU_ROWS) == []
        assert torch.equal(tiledmm.matmul(a, b), first)          # and again: the same bits
    ref = a.double() @ b.double()
    assert float((first.double() - ref).norm() / ref.norm()) < {"float32": 1e-5}.get(dtype, 2e-2)


def test_rows_do_not_depend_on_m_with_a_transposed_weight_and_an_epilogue():
    torch.manual_seed(2)
    a = torch.randn(EMU_M, 40, device=DEV)
    w = torch.randn(24, 40, device=DEV)              # x @ w.T, as F.linear reads its weight
    c = torch.randn(EMU_M, 24, device=DEV)
    with tiledmm.batch_invariant():
        assert _mismatches(a, w.T, EMU_ROWS) == []
        full = tiledmm.matmul(a, w.T, out=c.clone(), alpha=0.5, beta=2.0)
        for m in (1, 5, 33):
            assert torch.equal(tiledmm.matmul(a[:m], w.T, out=c[:m].clone(), alpha=0.5, beta=2.0), full[:m])


def test_rows_sliced_out_of_a_batch_of_sequences_take_the_same_plan(monkeypatch):
    """x[:, :s] of a (batch, sequence, features) x does not view as one tall product (the batch path would
    take another kernel): the mode copies it into one, so its rows go through x's plan, with F.linear's
    fused bias under enable() too. Bitwise on the GPU; in emulation the interpreter's tl.dot (numpy's
    matmul of the tile) rounds a row by its place in the tile, which slicing moves, so there: the same
    plans, and close."""
    torch.manual_seed(7)
    x = torch.randn(3, 12, 20, device=DEV)
    w = torch.randn(16, 20, device=DEV)
    bias = torch.randn(16, device=DEV)
    keys = []
    real = invariant.resolved

    def spy(a, b, c, precision, alpha, beta, passes=0):
        keys.append((invariant.key_of(a, b, c, precision, alpha, beta, passes), a.dim()))
        return real(a, b, c, precision, alpha, beta, passes)
    monkeypatch.setattr(invariant, "resolved", spy)
    check = torch.equal if GPU else (lambda p, q: torch.allclose(p, q, rtol=1e-5, atol=1e-5))
    with tiledmm.batch_invariant():
        full = tiledmm.matmul(x, w.T)
        for s in (2, 5, 11):
            assert not x[:, :s].is_contiguous()
            assert check(tiledmm.matmul(x[:, :s], w.T), full[:, :s]), s
        with torch.no_grad(), tiledmm.enable():
            lin = torch.nn.functional.linear(x, w, bias)
            for s in (2, 7):
                assert check(torch.nn.functional.linear(x[:, :s], w, bias), lin[:, :s]), s
    torch.testing.assert_close(lin, x @ w.T + bias, rtol=1e-5, atol=1e-5)
    assert len(set(keys)) == 2 and {k[1] for k in keys} == {2}     # one plan each (plain, bias), 2-D, every call
    assert sorted(k[0][14] for k in set(keys)) == [0, 1]           # the bias in the kernel's epilogue (passes 1)


SPLIT_ROWS = (1, 2, 7, 33, 64, 100)


@pytest.mark.parametrize("N,K", [(24, 512), (16, 384)])
def test_rows_do_not_depend_on_m_with_a_fixed_split_of_k(N, K):
    """Few columns and a long K: the mode's choice (on the interpreter's 4-SM stand-in) is split-K with its
    split fixed by K, and every row is bitwise the same whatever M, with alpha and beta too (the reduce
    kernel's epilogue). The choice is asserted: without the split this test checks nothing new."""
    torch.manual_seed(10)
    a = torch.randn(100, K, device=DEV)
    b = torch.randn(K, N, device=DEV)
    c = torch.randn(100, N, device=DEV)
    invariant.forget()
    with tiledmm.batch_invariant():
        full = tiledmm.matmul(a, b)
        (choice,) = invariant.choices().values()
        assert _mismatches(a, b, SPLIT_ROWS) == []
        assert torch.equal(tiledmm.matmul(a, b), full)
        epi = tiledmm.matmul(a, b, out=c.clone(), alpha=0.5, beta=2.0)
        for m in (1, 7, 33):
            assert torch.equal(tiledmm.matmul(a[:m], b, out=c[:m].clone(), alpha=0.5, beta=2.0), epi[:m]), m
    if not GPU:
        assert choice["variant"] == "splitk" and choice["splits"] >= 2 and choice["config"]["ORDERED"], choice
    ref = a.double() @ b.double()
    assert float((full.double() - ref).norm() / ref.norm()) < 1e-5
    torch.testing.assert_close(epi, 0.5 * (a @ b) + 2.0 * c, rtol=1e-5, atol=1e-4)


def test_a_batch_is_not_offered_the_split():
    """3-D operands: split-K is not offered (its launch puts the batch on gridDim.y, 65,535 at most, and
    the ladder judges one product), so a batch takes what it took before."""
    a = torch.randn(3, 8, 512, device=DEV)
    b = torch.randn(3, 512, 16, device=DEV)
    c = torch.empty(3, 8, 16, device=DEV)
    assert V.SPLITK.splits_batch is False
    assert all(v.splits_batch for v in invariant.offered(a, b, c, "ieee", 1.0, 0.0))
    assert V.SPLITK in invariant.offered(a[0], b[0], c[0], "ieee", 1.0, 0.0)


def test_the_check_sees_a_split_of_k():
    """The comparison is sharp enough to catch what the mode rules out: split-K, whose number of K
    slices follows M, changes the sums of some rows (here M = 16 against 64)."""
    torch.manual_seed(0)
    a = torch.randn(64, 512, device=DEV)
    b = torch.randn(512, 16, device=DEV)
    if GPU:
        pytest.skip("the GPU's split-K pick differs; the GPU tests check the real kernels")
    assert _mismatches(a, b, (1, 2, 5, 16, 17, 33, 48), variant="splitk") != []


def test_a_transformer_forward_pass_under_enable_is_batch_invariant():
    """A small decoder block, every product through tiledmm.enable(): each sequence's output is the
    same alone, with one other sequence and with all (the batch rows of x)."""
    torch.manual_seed(3)
    model = _Block(d=16, heads=2, ff=32).to(DEV).eval()
    x = torch.randn(5, 6, 16, device=DEV)
    with torch.no_grad(), tiledmm.enable() as mode, tiledmm.batch_invariant():
        full = model(x)
        parts = [model(x[:n]) for n in (1, 2, 4)]
    for n, y in zip((1, 2, 4), parts):
        assert torch.equal(y, full[:n]), n
    calls = mode.summary()["calls"]
    assert calls["linear"]["tiledmm"] > 0 and calls["linear"]["torch"] == 0
    assert calls["matmul"]["tiledmm"] > 0 and calls["matmul"]["torch"] == 0


class _Block(torch.nn.Module):
    """Pre-norm attention (explicit matmuls, causal) and a GELU feed-forward block."""

    def __init__(self, d: int, heads: int, ff: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, ff), torch.nn.Linear(ff, d)

    def forward(self, x):
        B, S, D = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(D, dim=-1)
        q, k, v = (t.reshape(B, S, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) / (D // self.heads) ** 0.5
        mask = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1)
        att = torch.matmul(scores.masked_fill(mask, float("-inf")).softmax(-1), v)
        x = x + self.proj(att.transpose(1, 2).reshape(B, S, D))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


@pytest.mark.slow
@pytest.mark.parametrize("kernel,dtype", [("autotuned", "float64"), ("tiled", "float32")])
def test_simt_rungs_are_invariant_as_they_are(kernel, dtype):
    """The SIMT ladder sums each output element over k in one order whatever its tile (no split, no
    atomics): its rows do not depend on M, mode or not."""
    if GPU:
        pytest.skip("the GPU test below runs the ladder at full size")
    torch.manual_seed(4)
    t = getattr(torch, dtype)
    a = torch.randn(24, 16, dtype=t)
    b = torch.randn(16, 8, dtype=t)
    assert _mismatches(a, b, (1, 5, 16), kernel=kernel) == []


def test_simt_autotuned_rungs_take_their_first_configuration_in_the_mode(monkeypatch):
    from tiledmm.kernels.simt import _launch, k10_autotune

    def forbidden(*args, **kwargs):
        raise AssertionError("the batch-invariant mode consulted the SIMT tuner")
    monkeypatch.setattr(_launch.tuning, "choose", forbidden)
    a = torch.randn(6, 8, dtype=torch.float64, device=DEV)
    b = torch.randn(8, 5, dtype=torch.float64, device=DEV)
    with tiledmm.batch_invariant():
        got = tiledmm.matmul(a, b, kernel="autotuned")
        assert _launch.tuned("autotuned", a, b, got, {}, k10_autotune.CANDIDATES, None, None, {}) is \
            k10_autotune.CANDIDATES["float64"][0]
    torch.testing.assert_close(got, a @ b)


# -- the real kernels (GPU) ------------------------------------------------------------------------------

GPU_ROWS = sorted(set(range(1, 65)) | {96, 127, 128, 129, 255, 256, 257, 511, 512, 777, 1000, 1023, 1024, 1025,
                                       2047, 2048, 3000, 4095, 4096, 4097, 6000, 8191})
GPU_CASES = [("bfloat16", None), ("float16", None), ("float32", "tf32"), ("float32", "ieee")]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,precision", GPU_CASES)
@pytest.mark.parametrize("N,K,transposed", [(4096, 4096, False), (4096, 4096, True), (1000, 777, False),
                                            (11008, 4096, True)])
def test_gpu_rows_bitwise_for_m_1_to_8192(dtype, precision, N, K, transposed):
    torch.manual_seed(5)
    t = DTYPES[dtype]
    a = torch.randn(8192, K, device="cuda").to(t)
    b = torch.randn(N, K, device="cuda").to(t).T if transposed else torch.randn(K, N, device="cuda").to(t)
    with tiledmm.batch_invariant():
        full = tiledmm.matmul(a, b, precision=precision)
        assert _mismatches(a, b, GPU_ROWS, precision=precision) == []
        assert torch.equal(tiledmm.matmul(a, b, precision=precision), full)
        rows = a[3000:3007]                      # rows computed at another place of the batch
        assert torch.equal(tiledmm.matmul(rows, b, precision=precision), full[3000:3007])
    ref = a[:256].double() @ b.double()
    from tiledmm.harness import tolerance
    assert float((full[:256].double() - ref).norm() / ref.norm()) < tolerance(dtype, precision)
    for ch in invariant.choices().values():
        assert V.BY_NAME[ch["variant"]].invariant is not None and not ch["config"].get("TAIL")
        assert ch["config"].get("SPLIT_K", 1) == 1 or (ch["config"].get("ORDERED") and ch["splits"] >= 2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,precision", GPU_CASES)
@pytest.mark.parametrize("N,K", [(127, 8191), (128, 8192)])
def test_gpu_a_fixed_split_of_k_is_bitwise_for_m_1_to_8192(dtype, precision, N, K):
    """Few columns, long K: the mode's choice is split-K, its split fixed by K (the model on an H100 picks it
    for each of these; tests above), and every row is bitwise the same from M = 1 to 8192."""
    torch.manual_seed(11)
    t = DTYPES[dtype]
    a = torch.randn(8192, K, device="cuda").to(t)
    b = torch.randn(K, N, device="cuda").to(t)
    invariant.forget()
    with tiledmm.batch_invariant():
        full = tiledmm.matmul(a, b, precision=precision)
        assert _mismatches(a, b, GPU_ROWS, precision=precision) == []
        assert torch.equal(tiledmm.matmul(a[3000:3007], b, precision=precision), full[3000:3007])
    (choice,) = invariant.choices().values()
    assert choice["splits"] >= 2 and choice["config"]["ORDERED"], choice
    ref = a[:256].double() @ b.double()
    from tiledmm.harness import tolerance
    assert float((full[:256].double() - ref).norm() / ref.norm()) < tolerance(dtype, precision)


@pytest.mark.gpu
def test_gpu_batched_and_out_calls_are_invariant():
    torch.manual_seed(6)
    a = torch.randn(6, 300, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(6, 512, 640, device="cuda", dtype=torch.bfloat16)
    with tiledmm.batch_invariant():
        full = tiledmm.matmul(a, b)
        for n, m in ((1, 300), (3, 17), (6, 1), (2, 299)):
            assert torch.equal(tiledmm.matmul(a[:n, :m], b[:n]), full[:n, :m]), (n, m)


@pytest.mark.gpu
def test_gpu_the_same_bits_in_another_process():
    code = ("import hashlib, torch, tiledmm; torch.manual_seed(7);"
            "a = torch.randn(3000, 4096, device='cuda', dtype=torch.bfloat16);"
            "b = torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16);"
            "{first}"
            "c = tiledmm.matmul(a, b);"
            "print(hashlib.sha256(c.cpu().view(torch.int16).numpy().tobytes()).hexdigest())")
    env = dict(os.environ, TILEDMM_BATCH_INVARIANT="1", PYTHONPATH=str(ROOT / "src"))
    # the second process sees a call of another M first: the plan must not depend on the call history
    runs = [subprocess.run([sys.executable, "-c", code.format(first=first)], env=env, capture_output=True,
                           text=True, timeout=300, cwd=ROOT) for first in ("", "tiledmm.matmul(a[:5], b);")]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    assert runs[0].stdout.split()[-1] == runs[1].stdout.split()[-1]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_transformer_forward_under_enable(dtype):
    torch.manual_seed(8)
    model = _Block(d=1024, heads=8, ff=4096).to("cuda", dtype).eval()
    x = torch.randn(12, 128, 1024, device="cuda", dtype=dtype)
    with torch.no_grad(), tiledmm.enable(), tiledmm.batch_invariant():
        full = model(x)
        for n in (1, 3, 7, 11):
            assert torch.equal(model(x[:n]), full[:n]), n


@pytest.mark.gpu
@pytest.mark.parametrize("kernel,dtype", [("autotuned", torch.float64), ("async", torch.float32)])
def test_gpu_simt_rungs_are_invariant(kernel, dtype):
    torch.manual_seed(9)
    a = torch.randn(2048, 1024, device="cuda", dtype=dtype)
    b = torch.randn(1024, 1024, device="cuda", dtype=dtype)
    assert _mismatches(a, b, (1, 7, 128, 129, 1000, 2047), kernel=kernel) == []
