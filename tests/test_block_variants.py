"""The issue-11 variant modules (kernels/block/{tma_copy,kmajor_cache,splitk}.py).

Emulation (Triton's interpreter on CPU torch tensors; tiny sizes and configs, the interpreter
ignores num_warps): split-K is checked against float64 with odd sizes, K = 1, M = 1, alpha/beta,
batches, NaN-poisoned outputs (the persistent TMA kernel that tma-copy and tma-kcache launch:
tests/test_tma_kernel.py). The K-major cache is plain torch and runs anywhere.
On a GPU (@pytest.mark.gpu): every variant through applicable() + launch(), against float64:
every config of its table on the first shape, its heuristic config on the others; a variant
that applies to no layout of a call is reported skipped, and one that should apply (split-K
anywhere; tma-copy on Hopper but for exact fp32) fails if nothing ran.
"""
from __future__ import annotations

import gc

import pytest

from tests.conftest import GPU

torch = pytest.importorskip("torch")

from tiledmm.kernels.block import _vcommon as V  # noqa: E402
from tiledmm.kernels.block import heuristics as H  # noqa: E402
from tiledmm.kernels.block import kmajor_cache, splitk, tma_copy, tma_persistent  # noqa: E402

VARIANTS = (tma_copy, kmajor_cache, splitk)
DEV = "cuda" if GPU else "cpu"
TOL = {torch.float32: 1e-5, "tf32": 3e-3, torch.bfloat16: 1.5e-2, torch.float16: 4e-3}
CASES = [(torch.float32, "ieee"), (torch.float32, "tf32"), (torch.bfloat16, "none"), (torch.float16, "none")]
emulation_only = pytest.mark.skipif(GPU, reason="interpreter-sized configs (the GPU tests use real ones)")


def _tol(dtype, prec):
    return TOL["tf32"] if prec == "tf32" else TOL[dtype]


def _operands(gen, shape_a, shape_b, shape_c, dtype, beta):
    a = torch.randn(shape_a, generator=gen, dtype=torch.float64).to(DEV, dtype)
    b = torch.randn(shape_b, generator=gen, dtype=torch.float64).to(DEV, dtype)
    if beta:
        c = torch.randn(shape_c, generator=gen, dtype=torch.float64).to(DEV, dtype)
    else:
        c = torch.full(shape_c, float("nan"), device=DEV, dtype=dtype)   # every element must be written
    return a, b, c


def _check(out, ref, dtype, prec):
    out = out.double().cpu()
    assert torch.isfinite(out).all(), "unwritten (NaN) or non-finite outputs"
    err = ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    assert err < _tol(dtype, prec), err


def _ref(a, b, c, alpha, beta):
    ref = alpha * (a.double().cpu() @ b.double().cpu())
    return ref + beta * c.double().cpu() if beta else ref


# --- interface ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mod", VARIANTS, ids=lambda m: m.NAME)
def test_interface(mod):
    assert isinstance(mod.NAME, str) and mod.NAME
    assert set(mod.CONFIGS) == set(V.KINDS)
    for kind, configs in mod.CONFIGS.items():
        # a product is offered those for aligned rows or (ODD_ROWS) those for rows that are not
        assert len([c for c in configs if not c.get("ODD_ROWS")]) <= 8
        for c in configs:
            assert {"num_warps", "num_stages", "BLOCK_M", "BLOCK_N", "BLOCK_K"} <= set(c)
        if configs:
            for shape in [(1, 5120, 5120), (256, 13824, 5120), (4096, 4096, 4096), (127, 8191, 127)]:
                h = mod.heuristic(*shape, kind)
                assert h in configs, (kind, shape, h)


def test_applicable_rejects_bad_inputs():
    a = torch.randn(8, 4)
    assert not splitk.applicable(a, torch.randn(4, 5, dtype=torch.float64), torch.empty(8, 5), "ieee")
    assert not splitk.applicable(a, torch.randn(4, 5), torch.empty(8, 5), "none")        # fp32 needs ieee/tf32
    assert not splitk.applicable(a.half(), torch.randn(4, 5).half(), torch.empty(8, 5).half(), "tf32")
    assert not splitk.applicable(torch.randn(4), torch.randn(4, 5), torch.empty(5), "ieee")
    assert not splitk.applicable(torch.randn(8, 0), torch.randn(0, 5), torch.empty(8, 5), "ieee")
    if not GPU:   # the copy engine's variants need a Hopper GPU
        for mod in (tma_persistent, tma_copy, kmajor_cache):
            assert not mod.applicable(a, torch.randn(4, 5), torch.empty(8, 5), "tf32")


def test_odd_rows_configs_only_where_rows_are_not_aligned(monkeypatch):
    """splitk's ODD_ROWS config (many small programs, for 16-bit rows loaded element by element) is a
    candidate for a product whose rows are not 16-byte aligned, never for one whose rows are; for
    127 x 8191 x 127 it is the 64-row candidate (it timed 13.7 us there on the H100, 64 x 128 43 us)."""
    from tiledmm.kernels.block import dispatch as bm, variants as VV
    monkeypatch.setattr(bm, "emulating", lambda: False)
    assert any(c.get("ODD_ROWS") for c in splitk.CONFIGS["16bit"])
    for aligned in (True, False):
        p = H.Problem(127, 127, 8191, 1, "16bit", 2, 2, False, aligned, False)
        names = [c.name for c in bm.model_candidates([VV.BY_NAME["splitk"]], p, H.H100)]
        odd = [n for n in names if "ODD_ROWS" in n]
        assert bool(odd) == (not aligned), names
        if not aligned:
            assert "BLOCK_M=64-BLOCK_N=64" in odd[0] and not any("BLOCK_M=64-BLOCK_N=128" in n for n in names)


# --- split-K in the interpreter ------------------------------------------------------------------

TINY = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=2)


@emulation_only
@pytest.mark.parametrize("dtype,prec", CASES)
@pytest.mark.parametrize("M,K,N", [(1, 37, 20), (33, 70, 45), (5, 1, 17), (17, 16, 1)])
@pytest.mark.parametrize("split", [1, 3])
def test_splitk_interpreter(dtype, prec, M, K, N, split):
    gen = torch.Generator().manual_seed(M * 1000 + K * 10 + N + split)
    for alpha, beta in [(1.0, 0.0), (-0.75, 1.5)]:
        a, b, c = _operands(gen, (M, K), (K, N), (M, N), dtype, beta)
        ref = _ref(a, b, c, alpha, beta)
        assert splitk.applicable(a, b, c, prec, alpha, beta)
        splitk.launch(a, b, c, precision=prec, alpha=alpha, beta=beta, config=dict(TINY, SPLIT_K=split))
        _check(c, ref, dtype, prec)


@emulation_only
@pytest.mark.parametrize("dtype,prec", [(torch.float32, "ieee"), (torch.bfloat16, "none")])
@pytest.mark.parametrize("broadcast_b", [False, True])
def test_splitk_batched_and_strided(dtype, prec, broadcast_b):
    gen = torch.Generator().manual_seed(7)
    a, _, c = _operands(gen, (3, 19, 40), (1, 1), (3, 19, 23), dtype, 0.0)
    b = torch.randn((23, 40) if broadcast_b else (3, 23, 40), generator=gen).to(dtype).transpose(-1, -2)
    a = a.transpose(-1, -2).contiguous().transpose(-1, -2)   # column-major A: any strides work
    ref = a.double() @ b.double()
    splitk.launch(a, b, c, precision=prec, config=dict(TINY, SPLIT_K=2))
    _check(c, ref, dtype, prec)


def test_splitk_split_counts():
    meta = dict(splitk.CONFIGS["16bit"][0])
    s, k_per = splitk.splits_for(1, 128, 13824, 1, meta, V.num_sms())
    assert s * k_per >= 13824 and (s - 1) * k_per < 13824 and k_per % meta["BLOCK_K"] == 0
    assert s > 1   # one output tile: split
    assert splitk.splits_for(4096, 4096, 64, 1, meta, V.num_sms())[0] == 1   # short K: never split
    s, k_per = splitk.splits_for(16, 64, 1, 1, dict(meta, SPLIT_K=5), V.num_sms())
    assert s == 1 and k_per >= 1


# --- the K-major cache (plain torch) -------------------------------------------------------------

def test_kmajor_cache_reuses_and_recopies():
    kmajor_cache.clear()
    b = torch.randn(32, 24, device=DEV)
    h0, m0 = kmajor_cache.stats["hits"], kmajor_cache.stats["misses"]
    k1 = kmajor_cache.kmajor(b)
    assert k1.stride() == (1, 32) and torch.equal(k1, b)
    k2 = kmajor_cache.kmajor(b)
    assert k2 is k1 and kmajor_cache.stats["hits"] == h0 + 1
    view = b[3:5]        # an in-place write through a view moves the shared version counter
    view.mul_(-2.0)
    k3 = kmajor_cache.kmajor(b)
    assert k3 is not k1 and torch.equal(k3, b)
    b[0, 0] = 123.0      # item assignment too
    k4 = kmajor_cache.kmajor(b)
    assert k4[0, 0].item() == 123.0 and kmajor_cache.stats["misses"] == m0 + 3
    # a new view object of the same unchanged tensor hits
    assert kmajor_cache.kmajor(b[:, :]) is k4


def test_kmajor_cache_drops_freed_sources():
    kmajor_cache.clear()
    b = torch.randn(16, 8, device=DEV)
    kmajor_cache.kmajor(b)
    assert len(kmajor_cache._cache) == 1
    del b
    gc.collect()
    kmajor_cache.kmajor(torch.randn(8, 8, device=DEV))   # any lookup prunes dead entries
    assert len(kmajor_cache._cache) == 1


def test_kmajor_cache_capacity():
    kmajor_cache.clear()
    keep = [torch.randn(4, 4, device=DEV) for _ in range(kmajor_cache.MAX_ENTRIES + 3)]
    for t in keep:
        kmajor_cache.kmajor(t)
    assert len(kmajor_cache._cache) == kmajor_cache.MAX_ENTRIES
    kmajor_cache.clear()


def test_mark_written_moves_version_while_the_kcache_holds_a_copy():
    """Our kernels' writes move an output's version counter only while kmajor_cache (the opt-in KCACHE
    policy) holds a copy it could make stale: with the cache empty an output's counter is torch's alone."""
    kmajor_cache.clear()
    t = torch.zeros(3)
    v = t._version
    V.mark_written(t)
    assert t._version == v and not kmajor_cache.holds_copies()
    w = torch.randn(8, 8, device=DEV)
    kmajor_cache.kmajor(w)
    try:
        assert kmajor_cache.holds_copies()
        V.mark_written(t)
        assert t._version > v
    finally:
        kmajor_cache.clear()


# --- on the GPU: every variant with its own configs ----------------------------------------------

GPU_SHAPES = [(257, 520, 1000), (1, 1024, 4096), (1000, 777, 1234), (129, 1, 64)]


@pytest.mark.gpu
@pytest.mark.parametrize("mod", VARIANTS, ids=lambda m: m.NAME)
@pytest.mark.parametrize("dtype,prec", CASES)
@pytest.mark.parametrize("M,K,N", GPU_SHAPES)
def test_variant_gpu(mod, dtype, prec, M, K, N):
    gen = torch.Generator().manual_seed(M + K + N)
    ran = 0
    for layout in ("row", "kmajor"):
        for alpha, beta in [(1.0, 0.0), (0.5, 2.0)] if layout == "row" else [(1.0, 0.0)]:
            a, b, c = _operands(gen, (M, K), (K, N), (M, N), dtype, beta)
            if layout == "kmajor":
                b = b.T.contiguous().T
            if not mod.applicable(a, b, c, prec, alpha, beta):
                continue
            ref = _ref(a, b, c, alpha, beta)
            kind = V.kind_of(prec)
            every = (M, K, N) == GPU_SHAPES[0]
            for cfg in mod.CONFIGS[kind] if every else [mod.heuristic(M, N, K, kind)]:
                cc = c.clone()
                mod.launch(a, b, cc, precision=prec, alpha=alpha, beta=beta, config=cfg)
                torch.cuda.synchronize()
                _check(cc, ref, dtype, prec)
                ran += 1
    hopper = V.capability()[0] >= 9
    must = mod is splitk or (hopper and mod is tma_copy and prec != "ieee")
    if must:
        assert ran > 0, f"{mod.NAME} ran nothing for {dtype} {prec} {(M, K, N)}"
    elif ran == 0:
        pytest.skip(f"{mod.NAME} applies to no layout of {dtype} {prec} {(M, K, N)} here")


@pytest.mark.gpu
def test_kmajor_cache_gpu_sees_modification():
    kmajor_cache.clear()
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(128, 256, generator=gen).cuda()
    b = torch.randn(256, 192, generator=gen).cuda()
    c = torch.empty(128, 192, device="cuda")
    if not kmajor_cache.applicable(a, b, c, "tf32"):
        pytest.skip("needs a Hopper GPU")
    kmajor_cache.launch(a, b, c, precision="tf32", alpha=1.0, beta=0.0)
    _check(c, a.double().cpu() @ b.double().cpu(), torch.float32, "tf32")
    b.mul_(-3.0)   # in place: the cached copy must not be used
    kmajor_cache.launch(a, b, c, precision="tf32", alpha=1.0, beta=0.0)
    _check(c, a.double().cpu() @ b.double().cpu(), torch.float32, "tf32")
    # B rewritten by one of our kernels (not a torch op): launch() bumps its version, so the
    # cache copies again
    x, y = torch.randn(256, 64, generator=gen).cuda(), torch.randn(64, 192, generator=gen).cuda()
    splitk.launch(x, y, b, precision="ieee")
    kmajor_cache.launch(a, b, c, precision="tf32", alpha=1.0, beta=0.0)
    _check(c, a.double().cpu() @ (x.double().cpu() @ y.double().cpu()), torch.float32, "tf32")


# --- the swapped product (kernels.py SWAP) and the transposing copy -----------------------------

def _swap_configs(prec, tiny):
    """SWAP = 1 everywhere; SWAP = 2 (B^T through registers) only for tf32."""
    return [dict(tiny, SWAP=s) for s in ((1, 2) if prec == "tf32" else (1,))]


@emulation_only
@pytest.mark.parametrize("dtype,prec", CASES)
@pytest.mark.parametrize("M,K,N", [(1, 37, 20), (33, 70, 45), (5, 1, 17)])
def test_swapped_product_interpreter(dtype, prec, M, K, N):
    from tiledmm.kernels.block import dispatch as BM
    gen = torch.Generator().manual_seed(M * 7 + K + N)
    for alpha, beta in [(1.0, 0.0), (-0.75, 1.5)]:
        a, b, c = _operands(gen, (M, K), (K, N), (M, N), dtype, beta)
        ref = _ref(a, b, c, alpha, beta)
        for cfg in _swap_configs(prec, TINY):
            for variant, extra in (("blocked", {}), ("splitk", {"SPLIT_K": 2})):
                cc = c.clone()
                BM.launch(a, b, cc, precision=prec, alpha=alpha, beta=beta, variant=variant, config={**cfg, **extra})
                _check(cc, ref, dtype, prec)


def test_few_row_configs_offered_only_for_few_rows(monkeypatch):
    from tiledmm.kernels.block import configs as C
    from tiledmm.kernels.block import dispatch as BM
    from tiledmm.kernels.block import variants as VV
    monkeypatch.setattr(BM, "emulating", lambda: False)   # the GPU's tables (16-bit, the H100's shared memory)
    few = BM._configs(VV.BLOCKED, "16bit", 2, 2, H.H100, rows=32)
    many = BM._configs(VV.BLOCKED, "16bit", 2, 2, H.H100, rows=64)
    assert all(cfg in few for cfg in C.BLOCKED_FEW_ROWS["16bit"])
    assert not any(cfg.get("SWAP") for cfg in many)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,prec", CASES[1:])
@pytest.mark.parametrize("M,K,N", [(1, 1024, 4096), (32, 777, 1234), (257, 520, 1000)])
def test_swapped_product_gpu(dtype, prec, M, K, N):
    from tiledmm.kernels.block import configs as C
    from tiledmm.kernels.block import dispatch as BM
    gen = torch.Generator().manual_seed(M + K + N)
    for alpha, beta in [(1.0, 0.0), (0.5, 2.0)]:
        a, b, c = _operands(gen, (M, K), (K, N), (M, N), dtype, beta)
        ref = _ref(a, b, c, alpha, beta)
        for cfg in C.BLOCKED_FEW_ROWS[V.kind_of(prec)]:
            for variant, extra in (("blocked", {}), ("splitk", {"SPLIT_K": 3})):
                cc = c.clone()
                BM.launch(a, b, cc, precision=prec, alpha=alpha, beta=beta, variant=variant, config={**cfg, **extra})
                torch.cuda.synchronize()
                _check(cc, ref, dtype, prec)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("R,C", [(1, 1), (63, 130), (4096, 1000), (1000, 4097)])
def test_transpose_into_gpu(dtype, R, C):
    from tiledmm.kernels.block.transpose import k_major, transpose_into
    src = torch.randn(R, C, device="cuda").to(dtype)
    before = src.clone()
    dst = torch.full((C, R + 3), float("nan"), device="cuda", dtype=dtype)[:, :R]   # a padded view
    transpose_into(src, dst)
    assert torch.equal(dst, src.T) and torch.equal(src, before)
    km = k_major(src, -2)
    assert km.stride(-2) == 1 and torch.equal(km, src)
    strided = src[:, ::2]   # a non-unit inner stride
    assert torch.equal(k_major(strided, -2), strided)


# --- the registry: variants as kernels under operand policies ---------------------------------------

def test_variants_are_kernels_under_operand_policies():
    """Every registered variant's name is its kernel's under its policy (policies.variant_name): the names
    users pass as variant= and the shipped tables store are the ones they always were, in the same order,
    and the TMA kernel is one kernel under four policies (KCACHE opt-in only)."""
    from tiledmm.kernels.block import policies as P
    from tiledmm.kernels.block import variants as VV
    for v in VV.ALL + VV.OPT_IN:
        assert v.policy in P.POLICIES and v.name == P.variant_name(v.kernel, v.policy) and VV.BY_NAME[v.name] is v
    assert [v.name for v in VV.ALL] == ["blocked", "blocked-kmajor", "tma", "tma-kmajor", "splitk", "splitk-kmajor",
                                        "tma-copy", "simt-async", "batched-small", "gluon-ws"]
    tma = {v.policy: v.name for v in VV.ALL + VV.OPT_IN if v.kernel == "tma"}
    assert tma == {P.AS_IS: "tma", P.KMAJOR: "tma-kmajor", P.COPY: "tma-copy", P.KCACHE: "tma-kcache"}
    assert [(v.name, v.policy) for v in VV.OPT_IN] == [("tma-kcache", P.KCACHE)]
    assert (tma_copy.KERNEL, tma_copy.POLICY, kmajor_cache.KERNEL, kmajor_cache.POLICY) == ("tma", P.COPY, "tma", P.KCACHE)
    with pytest.raises(ValueError, match="policy must be one of"):
        P.variant_name("tma", "cached")


def test_a_registered_variant_is_offered_and_forced_by_name_and_a_name_is_registered_once(monkeypatch):
    """A new kernel family is a module and a ``register`` call: the dispatcher offers and forces it by its
    name with no edit of its own; a name registered twice, or a module whose NAME its kernel and policy
    do not give, is refused."""
    import dataclasses
    import types
    from tiledmm.kernels.block import dispatch as BM
    from tiledmm.kernels.block import variants as VV
    monkeypatch.setattr(VV, "ALL", list(VV.ALL))
    monkeypatch.setattr(VV, "OPT_IN", list(VV.OPT_IN))
    monkeypatch.setattr(VV, "BY_NAME", dict(VV.BY_NAME))
    new = VV.register(dataclasses.replace(VV.BLOCKED, kernel="blocked-new"))
    assert VV.ALL[-1] is new and VV.BY_NAME["blocked-new"] is new
    with pytest.raises(ValueError, match="registered already"):
        VV.register(dataclasses.replace(VV.BLOCKED))
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(33, 20, generator=gen).to(DEV), torch.randn(20, 17, generator=gen).to(DEV)
    c = torch.empty(33, 17, device=DEV)
    assert any(cd.variant is new for cd in BM.candidates(a, b, c, "ieee", 1.0, 0.0))
    BM.launch(a, b, c, precision="ieee", variant="blocked-new", config=dict(TINY))
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)
    mod = types.SimpleNamespace(__name__="fake", NAME="tma-copy", KERNEL="tma", POLICY="kmajor", CONFIGS={},
                                applicable=lambda *x: False, launch=None, heuristic=None)
    with pytest.raises(ValueError, match="is 'tma-kmajor', not 'tma-copy'"):
        VV.from_module(mod)


def test_the_dispatcher_names_no_variant():
    """dispatch.py iterates the registry: no variant's name, no variant object, no variant module in it
    (the calls a variant owns are rows of rules.RULES)."""
    from pathlib import Path
    from tiledmm.kernels.block import dispatch as BM
    from tiledmm.kernels.block import variants as VV
    src = Path(BM.__file__).read_text()
    named = [v.name for v in VV.ALL + VV.OPT_IN if f'"{v.name}"' in src or f"'{v.name}'" in src]
    objects = [n for n in ("V.BLOCKED", "V.TMA", "V.SPLITK", "V.GLUON", "V.SIMT_ASYNC") if n in src]
    modules = [m for m in ("tma_copy", "kmajor_cache", "splitk", "gluon_gemm", "batched_small") if f"import {m}" in src
               or f" {m}." in src]
    assert named == objects == modules == [], (named, objects, modules)
