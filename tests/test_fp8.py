"""FP8: tiledmm.scaled_matmul, tiledmm.quantize_fp8 / dequantize_fp8, the torch.ops.tiledmm.scaled_mm and
quantize_fp8 operators, the FP8 linear (tiledmm.nn.Linear(fp8=...), tiledmm.enable(fp8=...)).

On the CPU the kernels run in Triton's interpreter (toy sizes): every recipe, scale shape, layout and
batch against float64 on the dequantised operands, within the bound the docs state; the quantisation
against torch's own cast; every bad call's one-line error; opcheck; torch.compile(fullgraph=True); the
linear's state_dict and its forward and backward against the high-precision layer. On a Hopper GPU
(@pytest.mark.gpu) the same checks at real sizes, the compiled kernels' configs, and the accuracy of
long K with and without promotion."""
from __future__ import annotations

import pytest

import tiledmm
from tests.conftest import GPU

torch = pytest.importorskip("torch")
import tiledmm.nn  # noqa: E402
from tiledmm import TiledmmError  # noqa: E402
from tiledmm.fp8 import FP8_MAX  # noqa: E402

from .references import activation64  # noqa: E402

DEV = "cuda" if GPU else "cpu"
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
U = {BF16: 2.0 ** -8, FP16: 2.0 ** -11, FP32: 2.0 ** -24}   # one rounding of the result
ACC = 2.0 ** -11            # the documented accumulation term (promoted)


def _randn(*shape, seed=0, scale=1.0, device=DEV):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(torch.float32).to(device)


def _expand64(scale, shape):
    """The scale of every element of an x of ``shape``, in float64, from the recipes' definitions."""
    s = scale.double()
    if s.numel() == 1:
        return s.reshape(())
    if len(shape) == 1:
        return _expand64(s.reshape(1, -1), (1,) + tuple(shape)).reshape(shape)
    R, C = shape[-2], shape[-1]
    rr = 1 if s.shape[-2] in (R, 1) else 128
    cc = 1 if s.shape[-1] in (C, 1) else 128
    return s.repeat_interleave(rr, dim=-2)[..., :R, :].repeat_interleave(cc, dim=-1)[..., :C]


def _quant_ref(x, scale, dtype):
    """torch's own cast (round to nearest even) of x / scale, saturated."""
    m = FP8_MAX[dtype]
    return (x.float() / _expand64(scale, x.shape).float()).clamp(-m, m).to(dtype)


def _operands(M, K, N, recipe, da=E4M3, db=E4M3, batch=None, seed=0):
    """Quantised a (M, K) and b = w.t() (K-major) with their scales, from random data."""
    lead = (batch,) if batch else ()
    a = _randn(*lead, M, K, seed=seed)
    w = _randn(*lead, N, K, seed=seed + 1, scale=0.5)
    a8, sa = tiledmm.quantize_fp8(a, recipe, da, block=(1, 128))
    w8, sw = tiledmm.quantize_fp8(w, recipe, db, block=(128, 128))
    return a8, w8.mT, sa, (sw.mT if sw.dim() >= 2 else sw)


def _ref64(a8, b8, sa, sb, bias=None, act="none"):
    a = a8.double() * _expand64(sa, a8.shape)
    b = b8.double() * _expand64(sb, b8.shape)
    r = a @ b
    if bias is not None:
        r = r + bias.double()
    return activation64(r, act)


def _relerr(got, want) -> float:
    return ((got.double() - want).norm() / want.norm()).item()


# -- quantisation ----------------------------------------------------------------------------------

QUANT_CASES = [("tensorwise", (1, 128)), ("rowwise", (1, 128)), ("blockwise", (1, 128)), ("blockwise", (128, 128))]


@pytest.mark.parametrize("recipe, block", QUANT_CASES)
@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_quantize_matches_torchs_cast_and_the_scale_convention(recipe, block, dtype):
    x = _randn(70, 300, scale=3.0)
    x[5, 7] = 0.0
    x0 = x.clone()
    q, s = tiledmm.quantize_fp8(x, recipe, dtype, block=block)
    assert torch.equal(x, x0)                                       # the input is not modified
    assert q.dtype == dtype and q.shape == x.shape and s.dtype == torch.float32
    want_shape = {"tensorwise": (), "rowwise": (70, 1)}.get(recipe, (70, 3) if block == (1, 128) else (1, 3))
    assert tuple(s.shape) == want_shape
    # the scale is the group's amax / fp8_max
    ex = _expand64(s, x.shape).expand(x.shape)
    amax = torch.zeros_like(x, dtype=torch.float64)
    for idx in torch.unique(ex).tolist():
        grp = ex == idx
        amax[grp] = x.double().abs()[grp].max()
    torch.testing.assert_close(ex.expand_as(x), (amax / FP8_MAX[dtype]).expand_as(x), rtol=2e-7, atol=0)
    ref = _quant_ref(x, s, dtype)
    if GPU:      # the GPU's division may differ from the CPU's by an ulp: at most one fp8 step apart
        bad = (q.float() != ref.float())
        assert bad.float().mean() < 1e-3
    else:
        assert torch.equal(q.float(), ref.float())
    # the documented round-trip bound
    d = tiledmm.dequantize_fp8(q, s, torch.float64)
    frac, floor = (2.0 ** -4, 2.0 ** -10) if dtype == E4M3 else (2.0 ** -3, 2.0 ** -17)
    assert ((d - x.double()).abs() <= frac * x.double().abs() + floor * ex * (1 + 1e-6)).all()


def test_quantize_layouts_batches_and_sizes():
    x = _randn(3, 40, 130)
    for t in (x, x.transpose(1, 2), x[:, ::2, :], x[0], x[0, 0]):   # batched, transposed, strided, 2-D, 1-D
        for recipe in ("tensorwise", "rowwise", "blockwise"):
            q, s = tiledmm.quantize_fp8(t, recipe)
            assert q.shape == t.shape and q.is_contiguous()
            assert torch.equal(q.float(), _quant_ref(t, s, E4M3).float()) or GPU
    q, s = tiledmm.quantize_fp8(x, "blockwise", block=(128, 128))
    assert s.shape == (3, 1, 2)
    q, s = tiledmm.quantize_fp8(torch.zeros(0, 5, device=DEV), "rowwise")
    assert q.shape == (0, 5) and s.shape == (0, 1)
    q, s = tiledmm.quantize_fp8(torch.zeros(4, 5, device=DEV), "tensorwise")     # all zeros: a tiny positive scale
    assert (q.float() == 0).all() and 0 < s.item() < 1e-12


@pytest.mark.parametrize("bad, match", [
    (lambda: tiledmm.quantize_fp8(torch.ones(3, 3, dtype=torch.int32)), "float32, bfloat16"),
    (lambda: tiledmm.quantize_fp8(torch.ones(3, 3), "colwise"), "recipe must be one of"),
    (lambda: tiledmm.quantize_fp8(torch.ones(3, 3), dtype=torch.float16), "float8_e4m3fn or"),
    (lambda: tiledmm.quantize_fp8(torch.ones(3, 3), "blockwise", block=(64, 64)), r"\(1, 128\)"),
    (lambda: tiledmm.quantize_fp8(torch.ones(3), "blockwise", block=(128, 128)), "two dimensions"),
    (lambda: tiledmm.quantize_fp8(torch.tensor(1.0)), "at least one dimension"),
    (lambda: tiledmm.dequantize_fp8(torch.ones(3), torch.ones(())), "float8 tensor"),
])
def test_quantize_errors(bad, match):
    with pytest.raises(TiledmmError, match=match) as e:
        bad()
    assert "\n" not in str(e.value)


# -- the scaled product against float64 -------------------------------------------------------------

@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "blockwise"])
@pytest.mark.parametrize("out_dtype", [BF16, FP16, FP32])
@pytest.mark.parametrize("fast", [False, True])
def test_every_recipe_against_float64_within_the_documented_bound(recipe, out_dtype, fast):
    M, K, N = (300, 1000, 270) if GPU else (37, 300, 45)        # ragged: no dimension a multiple of a tile
    a8, b8, sa, sb = _operands(M, K, N, recipe, seed=3)
    c = tiledmm.scaled_matmul(a8, b8, sa, sb, out_dtype=out_dtype, use_fast_accum=fast)
    assert c.dtype == out_dtype and c.shape == (M, N)
    err = _relerr(c, _ref64(a8, b8, sa, sb))
    bound = U[out_dtype] + (ACC if not fast or recipe == "blockwise" else 2.0 ** -8)
    assert err <= bound, (recipe, out_dtype, fast, err, bound)


def test_mixed_formats_and_mixed_outer_scales():
    a8, b8, sa, sb = _operands(20, 200, 30, "rowwise", da=E5M2, db=E4M3, seed=4)
    for ssa, ssb in ((sa, sb), (sa.max(), sb), (sa, sb.max().reshape(1, 1))):     # rowwise with per tensor
        c = tiledmm.scaled_matmul(a8, b8, ssa, ssb, out_dtype=FP32)
        assert _relerr(c, _ref64(a8, b8, ssa, ssb)) <= U[FP32] + ACC
    c = tiledmm.scaled_matmul(b8.t(), a8.t(), sb.t(), sa.t(), out_dtype=FP32)     # e4m3 @ e5m2, the other way
    assert _relerr(c, _ref64(b8.t(), a8.t(), sb.t(), sa.t())) <= U[FP32] + ACC


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "blockwise"])
def test_layouts_other_than_wgmmas_give_the_same_result(recipe):
    """A row-major and B K-major are read as they are; any other layout costs one transposing copy."""
    a8, b8, sa, sb = _operands(24, 260, 40, recipe, seed=5)
    want = tiledmm.scaled_matmul(a8, b8, sa, sb, out_dtype=FP32)
    a_cm = a8.t().contiguous().t()               # A column-major
    b_rm = b8.contiguous()                       # B row-major (N contiguous)
    padded = torch.zeros(24, 300, dtype=torch.uint8, device=DEV)     # rows 300 bytes apart: K-contiguous, padded
    padded[:, :260] = a8.view(torch.uint8)
    a_sl = padded[:, :260].view(a8.dtype)
    for a, b in ((a_cm, b8), (a8, b_rm), (a_cm, b_rm), (a_sl, b8)):
        got = tiledmm.scaled_matmul(a, b, sa, sb, out_dtype=FP32)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("recipe", ["rowwise", "blockwise"])
def test_batches_with_shared_and_per_batch_scales(recipe):
    B, M, K, N = 3, 20, 200, 36
    a8, b8, sa, sb = _operands(M, K, N, recipe, batch=B, seed=6)
    c = tiledmm.scaled_matmul(a8, b8, sa, sb, out_dtype=FP32)            # per-batch scales, both batched
    assert c.shape == (B, M, N)
    assert _relerr(c, _ref64(a8, b8, sa, sb)) <= U[FP32] + ACC
    c = tiledmm.scaled_matmul(a8, b8[0], sa, sb[0], out_dtype=FP32)      # b 2-D: broadcast over a's batch
    assert _relerr(c, _ref64(a8, b8[0], sa, sb[0])) <= U[FP32] + ACC
    c = tiledmm.scaled_matmul(a8[0], b8, sa[0], sb, out_dtype=FP32)      # a 2-D, b batched, scale_a shared
    assert c.shape == (B, M, N)
    assert _relerr(c, _ref64(a8[0], b8, sa[0], sb)) <= U[FP32] + ACC


@pytest.mark.parametrize("act", ["none", "relu", "gelu", "gelu_tanh", "silu"])
def test_bias_and_activation_in_the_epilogue(act):
    a8, b8, sa, sb = _operands(30, 256, 50, "blockwise", seed=7)
    bias = _randn(50, seed=8).to(BF16)
    c = tiledmm.scaled_matmul(a8, b8, sa, sb, out_dtype=FP32, bias=bias, activation=None if act == "none" else act)
    assert _relerr(c, _ref64(a8, b8, sa, sb, bias, act)) <= U[FP32] + ACC


def test_out_inputs_untouched_and_trivial_sizes():
    a8, b8, sa, sb = _operands(16, 130, 24, "rowwise", seed=9)
    keep = [t.clone() for t in (a8, b8, sa, sb)]
    out = torch.full((24, 16), float("nan"), device=DEV).t()           # a transposed out, poisoned
    r = tiledmm.scaled_matmul(a8, b8, sa, sb, out_dtype=FP32, out=out)
    assert r is out and not out.isnan().any()
    torch.testing.assert_close(out, tiledmm.scaled_matmul(a8, b8, sa, sb, out_dtype=FP32), rtol=0, atol=0)
    for t, k in zip((a8, b8, sa, sb), keep):
        assert torch.equal(t.view(torch.uint8) if t.dtype in (E4M3, E5M2) else t,
                           k.view(torch.uint8) if k.dtype in (E4M3, E5M2) else k)
    z = tiledmm.scaled_matmul(a8[:0], b8, sa[:0], sb)
    assert z.shape == (0, 24)
    one = torch.ones((), device=DEV)
    k0 = tiledmm.scaled_matmul(torch.zeros(3, 0, device=DEV).to(E4M3), torch.zeros(0, 4, device=DEV).to(E4M3), one,
                               one, out_dtype=FP32, bias=torch.arange(4.0, device=DEV), activation="relu")
    torch.testing.assert_close(k0, torch.arange(4.0, device=DEV).expand(3, 4))


def _e(M=8, K=256, N=16):
    a8, b8, sa, sb = _operands(M, K, N, "blockwise", seed=10)
    return a8, b8, sa, sb


@pytest.mark.parametrize("bad, match", [
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a.float(), b, sa, sb), "float8_e4m3fn or float8_e5m2 operands"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b.to(BF16), sa, sb), "b: torch 256x16 bfloat16"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b[:100], sa, sb), "inner dimensions differ"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b, sa[:, :1], sb), r"name no recipe.*blockwise scale_a \(8, 2\)"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b, sa, sb.t()), "name no recipe"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b, sa.reshape(-1), sb), "name no recipe"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b, sa.double(), sb), "must be float32"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b, sa, -sb), "holds -.*positive and finite"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b, sa * 0, sb), "holds 0.0"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b, sa.fill_(float("nan")), sb), "holds nan"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b, sa, sb.fill_(float("inf"))), "scale_b 2x1 holds inf"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b, 1.0, sb), "float32 torch tensor"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b, sa, sb, out_dtype=torch.float64), "out_dtype"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b, sa, sb, bias=torch.ones(5, device=DEV)), "bias must be"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b, sa, sb, activation="tanh"), "activation must be"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b, sa, sb, out=torch.empty(8, 16, device=DEV)), "out must be"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b, sa.to("meta"), sb), "another device"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a.unsqueeze(0).expand(2, 8, 256), b.unsqueeze(0).expand(3, 256, 16),
                                                sa, sb), "batch sizes differ"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a[0], b, sa, sb), "2-D or 3-D"),
    (lambda a, b, sa, sb: tiledmm.scaled_matmul(a, b, sa, sb, config="huge"), "unknown fp8 config"),
])
def test_bad_calls_get_one_line_errors(bad, match):
    a8, b8, sa, sb = _e()
    with pytest.raises(TiledmmError, match=match) as e:
        bad(a8, b8, sa, sb)
    assert "\n" not in str(e.value)


def test_rowwise_scale_a_with_blockwise_scale_b_is_refused():
    a8, b8, sa, sb = _operands(8, 300, 200, "blockwise", seed=11)
    with pytest.raises(TiledmmError, match="name no recipe"):
        tiledmm.scaled_matmul(a8, b8, sa[:, :1], sb)


def test_check_scales_false_skips_the_read():
    a8, b8, sa, sb = _e()
    c = tiledmm.scaled_matmul(a8, b8, sa, sb, check_scales=False)      # fine scales: the same result
    torch.testing.assert_close(c, tiledmm.scaled_matmul(a8, b8, sa, sb))


def test_registered_as_a_kernel_family():
    spec = tiledmm.registry.get("triton-fp8")
    assert spec.family == "block" and set(spec.dtypes) == {"float8_e4m3fn", "float8_e5m2"}
    assert "triton-fp8" in tiledmm.kernel_names()
    with pytest.raises(TiledmmError, match="scaled_matmul"):            # tiledmm.matmul points to the FP8 API
        tiledmm.matmul(torch.ones(2, 2).to(E4M3), torch.ones(2, 2).to(E4M3))


@pytest.mark.parametrize("config, recipe, fast", [("swap16x64", "blockwise", False), ("swap32x64", "rowwise", True),
                                                  ("128x128k64", "rowwise", False), ("128x128k64", "blockwise", False),
                                                  ("64x64", "tensorwise", True)])
def test_named_configs_swapped_tiles_and_two_phase_promotion(config, recipe, fast):
    """The configs' paths in the kernel: the swapped tile (C^T = B^T A^T, few rows), BLOCK_K 64 with a
    promotion every two phases (STEPS 2), fast accumulation; a batch on the grid's second axis."""
    M, K, N = (5, 300, 70) if config.startswith("swap") else (40, 300, 70)
    a8, b8, sa, sb = _operands(M, K, N, recipe, batch=2, seed=26)
    c = tiledmm.scaled_matmul(a8, b8, sa, sb, out_dtype=FP32, use_fast_accum=fast, config=config)
    assert _relerr(c, _ref64(a8, b8, sa, sb)) <= U[FP32] + ACC


@pytest.mark.skipif(GPU, reason="the GPU tests run the TMA kernel on the copy engine itself")
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "blockwise"])
@pytest.mark.parametrize("fast", [False, True])
def test_persistent_tma_kernel_in_the_interpreter(recipe, fast, monkeypatch):
    """The persistent TMA kernel (a GPU's default for large products) on the interpreter's descriptors:
    ragged M and N, K a multiple of 16 (the descriptors' row alignment) but not of 128."""
    from tiledmm.kernels.block import fp8_kernels as K
    monkeypatch.setattr(K, "_hopper", lambda t: True)
    monkeypatch.setattr(K, "num_sms", lambda index=None: 3)          # 6 tiles on 3 programs: each walks two
    a8, b8, sa, sb = _operands(37, 336, 45, recipe, seed=25)
    assert K.tma_takes(a8.unsqueeze(0), b8.unsqueeze(0), torch.empty(1, 37, 45))
    cfg = dict(K.CONFIGS["tma64x128"], BLOCK_M=32, BLOCK_N=32, num_warps=1, num_stages=1)
    c = tiledmm.scaled_matmul(a8, b8, sa, sb, out_dtype=FP32, use_fast_accum=fast, config=cfg)
    assert _relerr(c, _ref64(a8, b8, sa, sb)) <= U[FP32] + ACC


_COMPILE = r"""
import json, os, re, sys
import tiledmm                                     # decides emulation (sets TRITON_INTERPRET) ...
os.environ.pop("TRITON_INTERPRET", None)           # ... which must be off for a real compile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tiledmm.kernels.block import fp8_kernels as K

def build(fn, meta, ptrs, warps, stages, div=()):
    names = fn.arg_names
    sig = {n: "constexpr" if n in meta else ptrs.get(n, "i32") for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if sig[n].startswith("*") or n in div}
    src = ASTSource(fn, sig, {(names.index(k),): v for k, v in meta.items()}, attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    return {"mma": sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.\w+\.f32\.(e\dm\d\.e\dm\d)",
                                         k.asm["ptx"]))),
            "tma": "cp.async.bulk.tensor" in k.asm["ptx"], "cvt": "satfinite" in k.asm["ptx"],
            "shared": k.metadata.shared}

mm_ptrs = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e5", "c_ptr": "*bf16", "sa_ptr": "*fp32", "sb_ptr": "*fp32",
           "bias_ptr": "*bf16"}
out = {}
for name, blockwise, promote, act in (("tma128x128", True, 128, "gelu"), ("tma128x256", False, 0, "none"),
                                      ("128x128", False, 128, "silu"), ("swap16x64", True, 128, "none")):
    conf = dict(K.CONFIGS[name])
    warps, stages = conf.pop("num_warps"), conf.pop("num_stages")
    tma = conf.pop("TMA", 0)
    conf.pop("PROMOTE_K", None)
    meta = dict(conf, BLOCKWISE=blockwise, PROMOTE=promote, STEPS=1, HAS_BIAS=True, ACT=act)
    if tma:
        meta.update(NUM_SMS=132, WS=False, stride_cn=1)
        out[name] = build(K.scaled_mm_tma_kernel, meta, mm_ptrs, warps, stages, ("stride_am", "stride_bn", "stride_cm"))
    else:
        meta.update(EVEN_K=True, stride_ak=1, stride_bk=1, stride_cn=1)
        out[name] = build(K.scaled_mm_kernel, meta, mm_ptrs, warps, stages,
                          ("N", "K", "stride_am", "stride_bn", "stride_cm", "stride_ab", "stride_bb", "stride_cb"))
q_ptrs = {"x_ptr": "*bf16", "q_ptr": "*fp8e4nv", "s_ptr": "*fp32", "amax_ptr": "*fp32"}
fmt = dict(EPS=K.EPS, FP8_MAX=448.0, ROUND=False, MANT=3, MIN_EXP=-6, stride_xc=1)
out["row_blocks"] = build(K.quantize_groups_kernel, dict(fmt, BLOCK_R=32, BLOCK_C=128, TILE_R=1), q_ptrs, 4, 1)
out["tiles"] = build(K.quantize_groups_kernel, dict(fmt, BLOCK_R=32, BLOCK_C=128, TILE_R=128), q_ptrs, 4, 1)
print(json.dumps(out))
"""


@pytest.mark.compiles
def test_kernels_compile_for_sm90_to_fp8_wgmma():
    """The product's TMA and pointer kernels (e4m3 x e5m2, blockwise, promoted, fused epilogue) and the
    quantisation kernels compile for sm_90a with this Triton's CUDA backend: fp8 wgmma, TMA loads, the
    saturating conversion, shared memory within the H100's 227 KiB."""
    import json
    import os
    import subprocess
    import sys
    env = dict(os.environ, TILEDMM_QUIET="1")
    r = subprocess.run([sys.executable, "-c", _COMPILE], capture_output=True, text=True, env=env, timeout=900)
    if r.returncode and ("ptxas" in r.stderr.lower() or "no module named 'triton.backends" in r.stderr.lower()):
        pytest.skip(f"no CUDA backend here: {r.stderr.strip().splitlines()[-1]}")
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for name in ("tma128x128", "tma128x256", "128x128", "swap16x64"):
        assert got[name]["mma"] == ["e4m3.e5m2"] or (name == "swap16x64" and got[name]["mma"] == ["e5m2.e4m3"]), got
        assert 2 * 16384 <= got[name]["shared"] <= 232448 - 1024 or name == "swap16x64"     # pipelined
    assert got["tma128x128"]["tma"] and got["tma128x256"]["tma"] and not got["128x128"]["tma"]
    assert got["row_blocks"]["cvt"] and got["tiles"]["cvt"]


# -- operators, compile --------------------------------------------------------------------------------

# opcheck's schema test compares float8 inputs with torch.allclose, which float8 does not have on the
# CPU: the other tests for the product (test_out_inputs_untouched_and_trivial_sizes checks no input changes)
NO_SCHEMA = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def test_opcheck_scaled_mm_and_quantize():
    a8, b8, sa, sb = _operands(8, 130, 12, "rowwise", seed=12)
    bias = _randn(12, seed=13)
    torch.library.opcheck(torch.ops.tiledmm.scaled_mm.default, (a8, b8, sa, sb, bias, BF16, "gelu", False),
                          test_utils=NO_SCHEMA)
    a8, b8, sa, sb = _operands(8, 130, 12, "blockwise", seed=12)
    torch.library.opcheck(torch.ops.tiledmm.scaled_mm.default, (a8, b8, sa, sb, None, FP32, "none", True),
                          test_utils=NO_SCHEMA)
    x = _randn(9, 140)
    for recipe, rows in (("tensorwise", 1), ("rowwise", 1), ("blockwise", 1), ("blockwise", 128)):
        torch.library.opcheck(torch.ops.tiledmm.quantize_fp8.default, (x, recipe, rows, E4M3))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_quantise_and_product(backend):
    a = _randn(12, 140, seed=14)
    w = _randn(20, 140, seed=15)

    def f(a, w):
        a8, sa = tiledmm.quantize_fp8(a, "blockwise")
        w8, sw = tiledmm.quantize_fp8(w, "blockwise", block=(128, 128))
        return tiledmm.scaled_matmul(a8, w8.t(), sa, sw.t(), out_dtype=FP32, activation="relu")
    got = torch.compile(f, fullgraph=True, backend=backend)(a, w)
    torch.testing.assert_close(got, f(a, w), rtol=1e-6, atol=1e-6)


# -- the FP8 linear ---------------------------------------------------------------------------------

@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "blockwise"])
def test_linear_state_dict_is_torchs(recipe):
    torch.manual_seed(3)
    ours = tiledmm.nn.Linear(6, 4, fp8=recipe)
    torch.manual_seed(3)
    theirs = torch.nn.Linear(6, 4)
    assert isinstance(ours, torch.nn.Linear) and f"fp8={recipe}" in repr(ours)
    assert set(ours.state_dict()) == set(theirs.state_dict()) == {"weight", "bias"}
    for k, v in ours.state_dict().items():
        assert torch.equal(v, theirs.state_dict()[k])
    other = torch.nn.Linear(6, 4)
    ours.load_state_dict(other.state_dict())
    back = torch.nn.Linear(6, 4)
    back.load_state_dict(ours.state_dict())
    assert torch.equal(back.weight, other.weight) and torch.equal(back.bias, other.bias)


FP8_LIN = {"tensorwise": 0.08, "rowwise": 0.08, "blockwise": 0.08}   # fp8 rounding: a few % of each tensor


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "blockwise"])
@pytest.mark.parametrize("dtype", [BF16, FP32])
def test_linear_forward_backward_close_to_high_precision(recipe, dtype):
    torch.manual_seed(0)
    T, K, N = (512, 768, 640) if GPU else (40, 200, 36)
    layer = tiledmm.nn.Linear(K, N, fp8=recipe).to(DEV, dtype)
    ref = torch.nn.Linear(K, N).to(DEV, torch.float64)
    ref.load_state_dict(layer.state_dict())
    x = _randn(2, T // 2, K, seed=16).to(dtype).requires_grad_()
    xr = x.detach().double().requires_grad_()
    y, yr = layer(x), ref(xr)
    assert y.dtype == dtype and y.shape == yr.shape
    g = _randn(*y.shape, seed=17).to(dtype)
    y.backward(g)
    yr.backward(g.double())
    tol = FP8_LIN[recipe]
    assert _relerr(y, yr.detach()) < tol
    assert _relerr(x.grad, xr.grad) < tol
    assert _relerr(layer.weight.grad, ref.weight.grad) < tol
    assert _relerr(layer.bias.grad, ref.bias.grad) < 1e-2
    assert layer.weight.grad.dtype == dtype


def test_linear_with_activation_and_without_bias():
    layer = tiledmm.nn.Linear(130, 20, bias=False, fp8="rowwise", activation="gelu").to(DEV)
    x = _randn(7, 130, seed=18).requires_grad_()
    y = layer(x)
    want = torch.nn.functional.gelu(x.double() @ layer.weight.double().t())
    assert _relerr(y, want.detach()) < 0.08
    y.sum().backward()                       # a gradient expanded from a sum (stride 0): quantised as it is
    assert x.grad.shape == x.shape and layer.weight.grad is not None and not x.grad.isnan().any()


def test_linear_fp8_refuses_bad_recipes_and_dtypes():
    with pytest.raises(TiledmmError, match="recipe must be one of"):
        tiledmm.nn.Linear(4, 4, fp8="delayed")
    with pytest.raises(TiledmmError, match="float32, bfloat16 or float16"):
        tiledmm.nn.Linear(4, 4, fp8="rowwise").double()(torch.ones(2, 4, dtype=torch.float64, device=DEV))


def test_enable_fp8_routes_a_models_linears():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 32)).to(DEV)
    x = _randn(10, 64, seed=19).requires_grad_()
    with tiledmm.enable(fp8="rowwise") as mode:
        y = model(x)
        y.square().mean().backward()
    assert mode.summary()["calls"]["linear"]["tiledmm"] == 2
    want = model(x.detach())
    assert _relerr(y, want.detach().double()) < 0.08
    with pytest.raises(TiledmmError, match="recipe must be one of"):
        tiledmm.enable(fp8="bogus")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_linear_forward_and_backward(backend):
    torch.manual_seed(2)
    layer = tiledmm.nn.Linear(140, 24, fp8="blockwise").to(DEV)
    x = _randn(6, 140, seed=20).requires_grad_()

    def step(x):
        return layer(x).square().sum()
    loss = torch.compile(step, fullgraph=True, backend=backend)(x)
    loss.backward()
    gx, gw = x.grad.clone(), layer.weight.grad.clone()
    x.grad = None
    layer.weight.grad = None
    want = step(x)
    want.backward()
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gx, x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gw, layer.weight.grad, rtol=1e-5, atol=1e-5)


# -- on a Hopper GPU ---------------------------------------------------------------------------------

CONFIG_NAMES = ["tma128x256", "tma128x128", "tma128x128p256", "tma64x128", "128x256", "128x128", "128x128w4",
                "128x128k64", "64x128", "64x64", "swap32x64", "swap16x64", "swap16x128"]


def test_the_gpu_tests_cover_every_config():
    from tiledmm.kernels.block import fp8_kernels as K
    assert CONFIG_NAMES == list(K.CONFIGS)


@pytest.mark.gpu
@pytest.mark.parametrize("config", CONFIG_NAMES)
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "blockwise"])
def test_gpu_every_config_against_float64(config, recipe):
    from tiledmm.kernels.block import fp8_kernels as K
    fast = config in K.FAST_ONLY
    if fast and recipe == "blockwise":
        pytest.skip("fast-accumulation-only config; blockwise scaling promotes")
    for M, N, K_ in ((200, 300, 640), (1, 256, 512), (257, 129, 1000)):
        a8, b8, sa, sb = _operands(M, K_, N, recipe, seed=21)
        c = torch.full((M, N), float("nan"), device=DEV, dtype=BF16)
        tiledmm.scaled_matmul(a8, b8, sa, sb, out=c, use_fast_accum=fast, config=config)
        err = _relerr(c, _ref64(a8, b8, sa, sb))
        assert err <= U[BF16] + (2.0 ** -8 if fast else ACC), (config, recipe, M, N, K_, err)


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "blockwise"])
def test_gpu_long_k_with_promotion_stays_within_2x_of_short_k(recipe):
    """The accuracy target: K = 16384 with promotion within 2x of K = 1024's error (fp32 output, so
    the accumulation is what is measured)."""
    errs = {}
    for K_ in (1024, 16384):
        a8, b8, sa, sb = _operands(256, K_, 256, recipe, seed=22)
        errs[K_] = _relerr(tiledmm.scaled_matmul(a8, b8, sa, sb, out_dtype=FP32), _ref64(a8, b8, sa, sb))
    assert errs[16384] <= max(2 * errs[1024], 2.0 ** -20), errs
    assert errs[16384] <= ACC


@pytest.mark.gpu
def test_gpu_matches_torch_scaled_mm():
    a8, b8, sa, sb = _operands(512, 1024, 768, "rowwise", seed=23)
    for fast in (False, True):
        ours = tiledmm.scaled_matmul(a8, b8, sa, sb, use_fast_accum=fast)
        theirs = torch._scaled_mm(a8, b8, sa, sb, out_dtype=BF16, use_fast_accum=fast)
        assert _relerr(ours, theirs.double()) < 2 * U[BF16]
    a8, b8, sa, sb = _operands(512, 1024, 768, "tensorwise", seed=23)
    theirs = torch._scaled_mm(a8, b8, sa, sb, out_dtype=BF16)
    assert _relerr(tiledmm.scaled_matmul(a8, b8, sa, sb), theirs.double()) < 2 * U[BF16]


@pytest.mark.gpu
def test_gpu_host_tensors_and_cuda_graph_capture():
    a8, b8, sa, sb = _operands(64, 256, 64, "rowwise", seed=24)
    want = tiledmm.scaled_matmul(a8, b8, sa, sb)
    got = tiledmm.scaled_matmul(a8.cpu(), b8.cpu(), sa.cpu(), sb.cpu())
    assert got.device.type == "cpu" and torch.equal(got, want.cpu())
    out = torch.empty_like(want)
    tiledmm.scaled_matmul(a8, b8, sa, sb, out=out)          # compiles outside the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        tiledmm.scaled_matmul(a8, b8, sa, sb, out=out)      # no scale read while capturing
    out.zero_()
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want)


@pytest.mark.gpu
def test_gpu_repeat_calls_take_the_bound_launch():
    """A call's signature (shapes, strides, dtypes, alignments, options) is bound after its first call:
    later calls with new tensors launch the compiled kernel directly -- and compute their own result."""
    from tiledmm import fp8 as F8
    cases = ((16, 256, 512, "rowwise", None, None), (300, 512, 1024, "blockwise", None, "gelu"),
             (256, 384, 256, "tensorwise", BF16, "relu"), (2048, 1024, 512, "rowwise", FP32, None))
    for M, N, K_, recipe, bias_dtype, act in cases:
        sets = [_operands(M, K_, N, recipe, seed=s) for s in (30, 31, 32)]
        bias = None if bias_dtype is None else _randn(N, seed=33).to(bias_dtype)
        n0 = len(F8._bound)
        for i, s in enumerate(sets):
            got = tiledmm.scaled_matmul(*s, bias=bias, activation=act, check_scales=False)
            assert len(F8._bound) == n0 + 1, (M, N, K_, recipe, i)       # bound by the first call, then used
            assert _relerr(got, _ref64(*s, bias, act or "none")) <= U[BF16] + ACC, (M, N, K_, recipe, i)
