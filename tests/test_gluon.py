"""The Gluon warp-specialised Hopper GEMM (kernels/block/gluon_gemm.py, issue 24).

On the CPU: its launch logic -- which products it takes and why not (one-line reasons), the
descriptor plan (which tensor each TMA descriptor covers, block shapes, transposition flags,
grid), the no-timing config pick and the shared-memory budget -- and, where the installed Triton
has its CUDA backend (ptxas), that the kernel compiles for sm_90a to warp-specialised wgmma code,
with every fused epilogue (bias x activation). The bound launch path: tests/test_gluon_launch.py.
On a Hopper GPU (@pytest.mark.gpu): results against float64 for ragged edges, transposed and
offset operands, alpha/beta, bf16/fp16/tf32, every bias x activation, with the output poisoned
first; repeated calls on new pointers and shapes through the bound C launch, threads, a CUDA graph.
"""
import os
import re
import threading
import types

import pytest
import torch

from tiledmm import TiledmmError
from tiledmm.kernels.block import gluon_gemm as G

from .references import activation64

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


def _mats(M, N, K, dtype=BF16, a_t=False, b_t=False, device="cpu"):
    a = torch.randn((K, M) if a_t else (M, K), device=device).to(dtype)
    b = torch.randn((N, K) if b_t else (K, N), device=device).to(dtype)
    c = torch.empty(M, N, device=device, dtype=dtype)
    return (a.t() if a_t else a), (b.t() if b_t else b), c


# -- applicability: every refusal is one line naming what is wrong ----------------------------------

@pytest.mark.parametrize("case, expect", [
    (lambda: (torch.randn(2, 2, 8, 8).to(BF16), torch.randn(8, 8).to(BF16), torch.empty(2, 2, 8, 8, dtype=BF16)),
     "batched 3-D only"),
    (lambda: (torch.randn(2, 8, 64).to(BF16), torch.randn(64, 64).to(BF16), torch.empty(2, 8, 64, dtype=BF16)),
     "M a multiple of 64"),
    (lambda: (torch.randn(2, 64, 72).to(BF16), torch.randn(2, 72, 64).to(BF16), torch.empty(2, 64, 64, dtype=BF16)),
     "K of 64"),
    (lambda: (torch.randn(64, 2, 64).to(BF16).permute(1, 0, 2), torch.randn(64, 64).to(BF16),
              torch.empty(2, 64, 64, dtype=BF16)), "batch stride of one matrix"),
    (lambda: (torch.randn(2, 64, 64).to(BF16), torch.randn(64, 64).to(BF16),
              torch.empty(2, 64, 64, dtype=BF16).transpose(1, 2)), "strides"),
    (lambda: (torch.randn(8, 8).to(BF16), torch.randn(8, 8).to(FP16), torch.empty(8, 8, dtype=BF16)), "dtypes"),
    (lambda: (torch.randn(8, 8, dtype=torch.float64), torch.randn(8, 8, dtype=torch.float64),
              torch.empty(8, 8, dtype=torch.float64)), "dtypes"),
    (lambda: (torch.randn(8, 0).to(BF16), torch.randn(0, 8).to(BF16), torch.empty(8, 8, dtype=BF16)), "empty"),
    (lambda: (torch.randn(16, 32).to(BF16)[:, ::2], torch.randn(16, 8).to(BF16), torch.empty(16, 8, dtype=BF16)),
     "strides"),
    (lambda: (torch.randn(8, 16).to(BF16), torch.randn(16, 8).to(BF16), torch.empty(8, 8, dtype=BF16).t()), "strides"),
    (lambda: (torch.randn(8, 12).to(BF16), torch.randn(12, 8).to(BF16), torch.empty(8, 8, dtype=BF16)), "16-byte"),
    (lambda: (torch.randn(8 * 16 + 1).to(BF16)[1:].view(8, 16), torch.randn(16, 8).to(BF16),
              torch.empty(8, 8, dtype=BF16)), "16-byte"),
])
def test_why_not_names_the_problem(case, expect):
    a, b, c = case()
    why = G.why_not(a, b, c, "none")
    assert why is not None and expect in why and "\n" not in why
    assert not G.applicable(a, b, c, "none")


def test_why_not_float32_needs_tf32_and_one_k_major_operand():
    """tf32: one operand may come from registers in any layout, the other is read K-major from
    shared memory; only A column-major with B row-major (neither K-major) is refused."""
    a, b, c = _mats(16, 16, 16, FP32)
    assert "only tf32" in G.why_not(a, b, c, "ieee")
    a, b, c = _mats(16, 16, 16, FP32, a_t=True, b_t=False)
    why = G.why_not(a, b, c, "tf32")
    assert "K-major" in why and "A column-major and B row-major" in why
    for a_t, b_t in ((False, False), (False, True), (True, True)):
        a, b, c = _mats(16, 16, 16, FP32, a_t=a_t, b_t=b_t)
        why = G.why_not(a, b, c, "tf32")
        assert why is None or "K-major" not in why, (a_t, b_t, why)


def test_why_not_on_the_cpu_is_about_the_machine_only():
    """A product the kernel could run is refused here for the machine's sake alone."""
    a, b, c = _mats(64, 64, 64, BF16, a_t=True, b_t=True)
    why = G.why_not(a, b, c, "none")
    assert why in ("Gluon kernels do not run in Triton's interpreter", "needs a Hopper GPU (sm_90)") \
        or (why is None and G._is_hopper() and os.environ.get("TRITON_INTERPRET") != "1")


# -- the descriptor plan: what each TMA descriptor covers ------------------------------------------

@pytest.mark.parametrize("a_t, b_t", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("cfg", G.CONFIGS["16bit"])
def test_descriptor_plan(a_t, b_t, cfg):
    M, N, K = 300, 520, 264
    a, b, c = _mats(M, N, K, BF16, a_t, b_t)
    plan = G.descriptor_plan(a, b, c, cfg)
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    bnp = bn // cfg.get("PARTS", 1)       # a PARTS tile: B's block and C's staging are one column slice
    ta, blk_a = plan["a"]
    tb, blk_b = plan["b"]
    tc, blk_c = plan["c"]
    assert plan["A_T"] == a_t and plan["B_T"] == b_t
    # a transposed operand is described by its transpose: a row-major view of the same memory
    for t, src in ((ta, a), (tb, b)):
        assert t.data_ptr() == src.data_ptr() and t.stride(1) == 1
    assert tuple(ta.shape) == ((K, M) if a_t else (M, K)) and blk_a == ([bk, bm] if a_t else [bm, bk])
    assert tuple(tb.shape) == ((N, K) if b_t else (K, N)) and blk_b == ([bnp, bk] if b_t else [bk, bnp])
    assert tc is c and blk_c == [bm, bnp // cfg["EPI_SPLIT"]]
    assert plan["tiles"] == -(-M // bm) * -(-N // bn)


# -- the configs and the no-timing pick ------------------------------------------------------------

@pytest.mark.parametrize("kind, esize, out", [("16bit", 2, 2), ("tf32", 4, 4)])
def test_configs_fit_shared_memory(kind, esize, out):
    for cfg in G.CONFIGS[kind]:
        assert G.smem_bytes(cfg, esize, out) <= G.SMEM_LIMIT, cfg
        assert cfg["BLOCK_N"] <= 256 and cfg["num_warps"] == (4 if cfg["BLOCK_M"] == 64 else 8)


def test_smem_bytes_counts_ring_and_staging():
    cfg = G._c(128, 256, 64, 8, 3)
    assert G.smem_bytes(cfg, 2, 2) == 3 * (128 + 256) * 64 * 2 + 128 * 256 * 2
    assert G.smem_bytes(dict(cfg, EPI_SPLIT=2), 2, 2) == 3 * (128 + 256) * 64 * 2 + 128 * 256


@pytest.mark.parametrize("M, N, K, kind, tile", [
    (8192, 8192, 8192, "16bit", (128, 256)),     # many tiles: the largest tile
    (64, 4096, 4096, "16bit", (64, 64)),         # one tile row: small tiles to fill the SMs
    (512, 4096, 4096, "16bit", (128, 128)),      # 128 tiles of 128x128 fill one wave
    (8192, 8192, 8192, "tf32", (128, 256)),
    (64, 4096, 4096, "tf32", (64, 128)),         # 32 tiles: split in two, 64 units in one wave
    (100, 104, 8, "16bit", (64, 64)),            # one K-step: no split
])
def test_heuristic_pick(M, N, K, kind, tile):
    cfg = G.heuristic(M, N, K, kind, 132, 2 if kind == "16bit" else 4)
    assert (cfg["BLOCK_M"], cfg["BLOCK_N"]) == tile
    assert cfg in G.CONFIGS[kind]
    tiles = -(-M // tile[0]) * -(-N // tile[1])
    assert cfg["SPLIT_K"] == 1 or (tiles * cfg["SPLIT_K"] <= 132 and -(-K // cfg["BLOCK_K"]) >= 4 * cfg["SPLIT_K"])
    assert cfg["SPLIT_K"] == (2 if (M, kind) == (64, "tf32") else 1)


@pytest.mark.parametrize("M, N, K, tile, split", [
    # tf32 with an operand in registers (a row-major B): the register path's own measured rates
    (4096, 4096, 4096, (256, 128), 1),
    (256, 13824, 5120, (256, 128), 1),          # 108 tiles of 256x128: one wave
    (256, 5120, 13824, (128, 128), 1),          # 40 tiles of 256x128 would leave 92 SMs idle
    (512, 4096, 4096, (128, 128), 1),
    (128, 8192, 8192, (64, 128), 1),
    (64, 4096, 4096, (64, 128), 2),
])
def test_heuristic_pick_with_a_register_operand(M, N, K, tile, split):
    cfg = G.heuristic(M, N, K, "tf32", 132, 4, reg=True)
    assert (cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["SPLIT_K"]) == (*tile, split)
    # 256x128 has a measured rate only with a register operand: never the K-major pick
    assert G.heuristic(M, N, K, "tf32", 132, 4)["BLOCK_M"] != 256


@pytest.mark.parametrize("M, N, K, tail", [
    (1100, 4096, 4096, True),     # 144 tiles of 128x256: 12 past one wave, split 8 ways
    (1280, 4096, 4096, True),     # 160: 28 past, 4 ways
    (2432, 4096, 4096, True),     # 304: 40 past two waves, 2 ways
    (1536, 4096, 4096, False),    # 192: 60 past, 2 ways -- modelled 7 % slower than 128x128's three waves (NEAR: 5 %):
                                  # 128x128, whose 384 tiles fill their waves (H100: 81 us against 104)
    (4096, 4096, 4096, False),    # 512: 116 past, nothing splits
    (1024, 4096, 4096, False),    # 128: one wave
])
def test_heuristic_splits_the_tail_only_where_a_partial_wave_splits(M, N, K, tail):
    cfg = G.heuristic(M, N, K, "16bit", 132, 2)
    tiles = -(-M // cfg["BLOCK_M"]) * -(-N // cfg["BLOCK_N"])
    assert cfg in G.CONFIGS["16bit"]
    assert bool(cfg["TAIL"] and G.tail_plan(tiles, -(-K // cfg["BLOCK_K"]), 132)[1] > 1) == tail
    # the launch takes the plain build where nothing splits
    assert G._plain_unless_split(cfg, M, N, K, 132)["TAIL"] == int(tail)


def test_plain_unless_split_counts_a_batchs_tiles():
    """The launch's choice between the TAIL build and its plain twin counts every tile of the launch, as the
    split does (``_units``): one 768x2816 product is 66 tiles of 128x256 (a partial wave, split 2 ways); two
    are 132, one whole wave (nothing to split: the plain build)."""
    cfg = G.CONFIGS["16bit"][0]
    assert cfg["TAIL"] and G._units(66, 64, 132, 1, 1)[1] == 2 and G._units(132, 64, 132, 1, 1)[1] == 1
    assert G._plain_unless_split(cfg, 768, 2816, 4096, 132)["TAIL"] == 1
    assert G._plain_unless_split(cfg, 768, 2816, 4096, 132, batch=2)["TAIL"] == 0


def _python(fn, **names):
    """A @gluon.jit function's own Python function, to run on Python ints: the module's other Gluon
    functions as their Python functions too, ``names`` for the rest (e.g. ``gl``)."""
    glb = dict(fn.fn.__globals__, **names)
    for k, v in list(glb.items()):
        if type(v).__name__ in ("JITFunction", "GluonJITFunction") and hasattr(v, "fn"):
            glb[k] = types.FunctionType(v.fn.__code__, glb, v.fn.__name__, v.fn.__defaults__)
    return glb[fn.fn.__name__]


@pytest.mark.parametrize("M, N, K, batch, split, tail", [
    (1100, 4096, 4096, 1, 1, 1),     # 144 tiles of 128x256: 12 past one wave, split 8 ways
    (1300, 1000, 700, 1, 1, 1),      # ragged: 44 tiles, 11 K-steps
    (256, 4096, 640, 3, 1, 1),       # a batch of 3: 96 tiles, split 2 ways over 10 K-steps
    (640, 4096, 4096, 1, 1, 0),      # the plain build: a unit a tile
    (200, 1000, 1000, 2, 4, 0),      # split-K: 4 units a tile, the last one short (16 K-steps)
    (300, 520, 264, 1, 3, 0),        # split-K 3 ways over 5 K-steps: the last unit short
])
def test_the_kernels_work_units_cover_every_k_step_of_every_tile_once(M, N, K, batch, split, tail):
    """The kernel's own unit mapping (``gluon_kernel._units``, ``_unit``, ``_tile_coords``, run in Python on the
    host's plan, ``_units``): the persistent programs' units compute every K-step of every output tile of every
    product exactly once, each tile's (product, pid_m, pid_n) is a distinct block inside its product, and a tail
    tile's split units are adjacent and share it out as ``tail_split`` even parts."""
    pytest.importorskip("triton.experimental.gluon")
    from tiledmm.kernels.block import gluon_kernel as GK
    cfg = G.CONFIGS["16bit"][0]
    bm, bn, bk, sms, group = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], 132, cfg["GROUP_M"]
    npm, npn, kt = -(-M // bm), -(-N // bn), -(-K // bk)
    tiles = npm * npn * batch
    tail_at, tail_split, units = G._units(tiles, kt, sms, split, tail)
    gl = types.SimpleNamespace(cdiv=lambda x, y: -(-x // y))
    unit_of = _python(GK._unit, gl=gl)
    assert _python(GK._units, gl=gl)(npm, npn, batch, tail_at, tail_split, split, tail) == units
    done, blocks = {}, {}
    for p in range(min(sms, units)):
        for u in range(p, units, sms):                  # program p's units, as the persistent loop walks them
            tile, product, pid_m, pid_n, lo, hi = unit_of(u, npm, npn, kt, tail_at, tail_split, group, split, tail)
            assert 0 <= product < batch and 0 <= pid_m < npm and 0 <= pid_n < npn and 0 <= lo < hi <= kt
            assert blocks.setdefault(tile, (product, pid_m, pid_n)) == (product, pid_m, pid_n)
            if tail and u >= tail_at:
                assert hi - lo <= -(-kt // tail_split)
            for k in range(lo, hi):
                assert (tile, k) not in done
                done[(tile, k)] = u
    assert len(done) == tiles * kt and len(set(blocks.values())) == tiles


def test_operand_mode_is_the_kernels():
    """0: both operands from shared memory; tf32: 1 an M-major A from registers, 2 a row-major B (the tile
    transposed, B^T from registers) -- the host's reading of the kernel's _operand_mode."""
    for a_t, b_t, want in ((False, True, 0), (False, False, 2), (True, True, 1)):
        a, b, _ = _mats(16, 16, 16, FP32, a_t=a_t, b_t=b_t)
        assert G.operand_mode(a, b) == want
    for a_t, b_t in ((False, False), (True, True)):
        a, b, _ = _mats(16, 16, 16, BF16, a_t=a_t, b_t=b_t)
        assert G.operand_mode(a, b) == 0


def test_descriptor_plan_halves_the_staging_tile_along_m_for_the_transposed_tile():
    """EPI_SPLIT = 2: the output staging tile is half the tile along N, but along M where the kernel
    computes the tile transposed (tf32, B row-major: the registers hold M within each thread)."""
    cfg = G._c(256, 128, 32, 8, 3, epi=2)
    a, b, c = _mats(512, 512, 64, FP32)
    assert G.descriptor_plan(a, b, c, cfg)["c"][1] == [128, 128]
    a, b, c = _mats(512, 512, 64, FP32, b_t=True)
    assert G.descriptor_plan(a, b, c, cfg)["c"][1] == [256, 64]


@pytest.mark.compiles
def test_heuristic_skips_configs_over_the_shared_memory_limit():
    # a float32 output doubles the staging tile: 128x256 with 4 stages and EPI_SPLIT=2 no longer fits
    cfg = G.heuristic(8192, 8192, 8192, "16bit", 132, out_esize=4)
    assert G.smem_bytes(cfg, 2, 4) <= G.SMEM_LIMIT


# -- compiling for sm_90a on the CPU (the installed Triton's CUDA backend) -------------------------

def _compile(cfg, dtype=BF16, a_t=False, b_t=False, has_beta=False, bias=0, act="none"):
    triton = pytest.importorskip("triton")
    try:
        from triton.backends.compiler import GPUTarget
        from triton.experimental.gluon._runtime import GluonASTSource
    except ImportError as e:  # pragma: no cover  (a Triton without Gluon's runtime)
        pytest.skip(f"no Gluon compiler: {e}")
    K = G._kernel()
    a, b, c = _mats(128, 256, 128, dtype, a_t, b_t)
    plan = G.descriptor_plan(a, b, c, cfg)
    descs = [K.descriptor(*plan[x]) for x in "abc"]
    if not hasattr(descs[0], "__mangle__"):   # Triton 3.6: no signature string from a descriptor here
        pytest.skip("this Triton's descriptors have no __mangle__ (the GPU tests compile the kernel)")
    names = K.gluon_ws_kernel.arg_names
    ptr = "*" + {BF16: "bf16", FP16: "fp16", FP32: "fp32"}[dtype]
    sig = {"a_desc": descs[0].__mangle__(), "b_desc": descs[1].__mangle__(), "c_desc": descs[2].__mangle__(),
           "c_ptr": ptr, "stride_cm": "i32", "bias_ptr": ptr, "stride_bias": "i32",
           "ws_ptr": "*fp32", "cnt_ptr": "*i32",
           "M": "i32", "N": "i32", "K": "i32", "batch": "i32", "a_step": "i32", "b_step": "i32", "c_step": "i32",
           "tail_at": "i32", "tail_split": "i32", "alpha": "fp32", "beta": "fp32"}
    const = dict(STAGES=cfg["num_stages"], A_T=plan["A_T"], B_T=plan["B_T"], GROUP_M=cfg["GROUP_M"], NUM_SMS=132,
                 HAS_BETA=has_beta, ALPHA_ONE=not has_beta, EPI_SPLIT=cfg["EPI_SPLIT"], SPLIT_K=cfg["SPLIT_K"],
                 TAIL=cfg.get("TAIL", 0), PARTS=cfg.get("PARTS", 1), LOADER_REGS=G.LOADER_REGS, BIAS=bias, ACT=act,
                 num_warps=cfg["num_warps"])
    sig.update({k: "constexpr" for k in const})
    assert tuple(sig) == G.PARAMS == tuple(names)
    src = GluonASTSource(K.gluon_ws_kernel, sig, {(names.index(k),): v for k, v in const.items()})
    try:
        return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": cfg["num_warps"]})
    except RuntimeError as e:
        if "ptxas" in str(e).lower():
            pytest.skip(f"no ptxas: {e}")
        raise


@pytest.mark.compiles
@pytest.mark.parametrize("a_t, b_t", [(False, False), (True, True)])
def test_a_tile_of_three_parts_compiles_to_three_wgmmas_a_step(a_t, b_t):
    """The 128x192 tile (PARTS = 3): three m64n64 wgmmas a K-step (not one of n192: register tensors are
    powers of two), B loaded as three 64-column slices, the output stored slice by slice by TMA."""
    cfg = next(c for c in G.CONFIGS["16bit"] if c.get("PARTS", 1) == 3)
    assert (cfg["BLOCK_M"], cfg["BLOCK_N"]) == (128, 192)
    k = _compile(cfg, BF16, a_t, b_t)
    ptx = k.asm["ptx"]
    assert "m64n64k16.f32.bf16.bf16" in ptx and "m64n192" not in ptx and "m64n128" not in ptx
    # per warpgroup, 64 K-elements a stage in 16-element steps, three accumulators: 12 wgmmas in the main loop
    assert ptx.count("wgmma.mma_async") >= 12
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::\w+\.global\.mbarrier", ptx)) >= 4  # A, 3 x B
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx
    assert k.metadata.shared <= G.SMEM_LIMIT + 2048
    assert k.metadata.shared >= G.smem_bytes(cfg, 2, 2)


def test_a_parts_config_is_checked():
    a, b, c = _mats(256, 600, 128)
    cfg = next(c for c in G.CONFIGS["16bit"] if c.get("PARTS", 1) == 3)
    assert G._full_config(dict(cfg), 256, 600, 128, a, c, 132) == cfg
    # a tile width given without PARTS is one accumulator wide, whatever the model picks
    assert "PARTS" not in G._full_config({"BLOCK_N": 128}, 256, 600, 128, a, c, 132)
    for bad in (dict(cfg, SPLIT_K=2), dict(cfg, TAIL=1), dict(cfg, BLOCK_N=160), dict(cfg, PARTS=2)):
        with pytest.raises(TiledmmError, match="PARTS=3"):
            G._full_config(bad, 256, 600, 128, a, c, 132)
    a32, _, c32 = _mats(256, 600, 128, FP32)
    with pytest.raises(TiledmmError, match="16-bit"):
        G._full_config(dict(cfg), 256, 600, 128, a32, c32, 132)


@pytest.mark.compiles
@pytest.mark.parametrize("cfg, dtype, a_t, b_t, mma", [
    (G.CONFIGS["16bit"][0], BF16, True, True, "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16"),
    (G.CONFIGS["16bit"][5], FP16, False, False, "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"),
    (G._c(64, 128, 64, 4, 6, split=4), BF16, False, True, "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"),
    (G.CONFIGS["tf32"][0], FP32, False, True, "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32"),
    (G.CONFIGS["tf32"][0], FP32, False, False, "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32"),
    (G.CONFIGS["tf32"][1], FP32, False, False, "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32"),
    (G.CONFIGS["tf32"][1], FP32, True, True, "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32"),
])
def test_compiles_to_warp_specialised_wgmma(cfg, dtype, a_t, b_t, mma):
    k = _compile(cfg, dtype, a_t, b_t)
    ptx = k.asm["ptx"]
    assert mma in ptx
    # wgmma's first operand: from registers ({...} of .b32) for tf32 with an M-major A or a row-major B
    # (the tile transposed: m64 over BN, n = BM), a shared-memory descriptor (a .b64) otherwise
    first = re.search(r"wgmma\.mma_async[^;]*?\}\s*,\s*(\{|%rd)", ptx).group(1)
    assert (first == "{") == (dtype == FP32 and (a_t or not b_t)), first
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.shared::\w+\.global\.mbarrier", ptx)   # TMA loads
    # TMA store; a split-K build's tiles all leave through the fix-up's masked stores (_sum_partials)
    assert ("cp.async.bulk.tensor.2d.global.shared::cta" in ptx) == (cfg["SPLIT_K"] == 1)
    # register reallocation: the loader warp is set to LOADER_REGS, the consumers take more
    assert re.search(rf"setmaxnreg\.\w+\.sync\.aligned\.u32\s+{G.LOADER_REGS}\b", ptx)
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+2[0-9]{2}\b", ptx)
    assert k.metadata.shared <= G.SMEM_LIMIT + 2048


@pytest.mark.compiles
@pytest.mark.parametrize("bias", [0, 1, 2])
@pytest.mark.parametrize("act", G.ACTS)
def test_compiles_with_every_fused_epilogue(bias, act):
    """BIAS x ACT: the bias is the only global load of a plain (beta = 0, unsplit) kernel; erf and
    the sigmoid-based activations use exp2, relu a max."""
    ptx = _compile(dict(G.CONFIGS["16bit"][5], TAIL=0), BF16, bias=bias, act=act).asm["ptx"]
    assert ("ld.global" in ptx) == (bias != 0)
    assert ("ex2.approx" in ptx) == (act in ("gelu", "gelu_tanh", "silu"))
    if act == "relu":
        assert re.search(r"\bmax\.(nan\.)?f32", ptx)


@pytest.mark.compiles
def test_compiles_the_fused_linear_tile():
    """The 128x256 two-warpgroup tile with EPI_SPLIT=2 (nn.Linear's shapes) with bias + gelu and beta."""
    k = _compile(G.CONFIGS["16bit"][0], BF16, has_beta=True, bias=1, act="gelu")
    assert "ld.global" in k.asm["ptx"] and k.metadata.shared <= G.SMEM_LIMIT + 2048


# -- on a Hopper GPU: against float64 --------------------------------------------------------------

def _check(M, N, K, dtype, cfg=None, a_t=False, b_t=False, alpha=1.0, beta=0.0):
    a, b, c = _mats(M, N, K, dtype, a_t, b_t, device="cuda")
    if beta:
        c.copy_(torch.randn(M, N, device="cuda"))
    else:
        c.fill_(float("nan"))
    c0, a0, b0 = c.clone(), a.clone(), b.clone()
    prec = "tf32" if dtype == FP32 else "none"
    assert G.applicable(a, b, c, prec, alpha, beta), G.why_not(a, b, c, prec, alpha, beta)
    G.launch(a, b, c, precision=prec, alpha=alpha, beta=beta, config=cfg)
    torch.cuda.synchronize()
    assert not torch.isnan(c).any()
    assert torch.equal(a, a0) and torch.equal(b, b0)       # inputs untouched
    ref = alpha * (a.double() @ b.double()) + (beta * c0.double() if beta else 0)
    err = ((c.double() - ref).norm() / ref.norm()).item()
    assert err < {BF16: 1e-2, FP16: 2e-3, FP32: 2e-3}[dtype], err


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("cfg", G.CONFIGS["16bit"])
def test_gpu_ragged_every_config(dtype, cfg):
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    _check(777, 1000, 1000, dtype, cfg)


_PARTS3 = [c for c in G.CONFIGS["16bit"] if c.get("PARTS", 1) == 3]


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", _PARTS3, ids=lambda c: f"{c['BLOCK_M']}x{c['BLOCK_N']}")
@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("a_t, b_t", [(False, False), (True, False), (False, True), (True, True)])
def test_gpu_a_tile_of_three_parts(cfg, dtype, a_t, b_t):
    """The 128x192 and 64x192 tiles: N ending in each of the three 64-column slices (1000 = 5 x 192 + 40,
    1080 = ... + 120, 1144 = ... + 184) and on a tile edge (960), many tiles (two rounds), alpha and beta, the
    bias and an activation, and a batch in one launch (sizes multiples of 8: TMA's 16-byte rows in every
    layout)."""
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    for M, N, K in ((776, 1000, 1000), (304, 1080, 264), (128, 1144, 72), (256, 960, 4096), (1496, 4000, 320)):
        _check(M, N, K, dtype, cfg, a_t, b_t)
    _check(304, 1080, 264, dtype, cfg, a_t, b_t, alpha=0.5, beta=2.0)
    _check_epilogue(336, 1000, 200, cfg, 1, "gelu", FP32, alpha=0.5, beta=2.0, a_t=a_t, b_t=b_t, dtype=dtype)
    _check_epilogue(336, 1144, 200, cfg, 2, "silu", dtype, a_t=a_t, b_t=b_t, dtype=dtype)
    a, b, c = _batch(3, 256, 1000, 320, dtype, a_t, b_t, device="cuda")
    c.fill_(float("nan"))
    G.launch(a, b, c, precision="none", config=cfg)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    for p in range(3):
        assert ((c[p].double() - ref[p]).norm() / ref[p].norm()).item() < {BF16: 1e-2, FP16: 2e-3}[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("a_t, b_t", [(True, False), (False, True), (True, True)])
def test_gpu_transposed(dtype, a_t, b_t):
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    _check(304, 520, 264, dtype, None, a_t, b_t)
    _check(784, 1000, 1000, dtype, G.CONFIGS["16bit"][0], a_t, b_t)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [BF16, FP16, FP32])
def test_gpu_alpha_beta(dtype):
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    _check(333, 264, 200, dtype, None, b_t=dtype == FP32, alpha=0.5, beta=2.0)


@pytest.mark.gpu
@pytest.mark.parametrize("a_t, b_t", [(False, True), (False, False), (True, True)])
@pytest.mark.parametrize("cfg", G.CONFIGS["tf32"])
def test_gpu_tf32_every_config(cfg, a_t, b_t):
    """Both operands K-major from shared memory; A M-major from registers; B row-major, the tile
    computed transposed with B^T from registers. Three launches of one input set agree bitwise."""
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    _check(784 if a_t else 777, 1000, 1000, FP32, cfg, a_t, b_t)     # a column-major A: 16-byte row stride
    _check(304, 520, 264, FP32, cfg, a_t, b_t, alpha=-1.0, beta=1.0)
    a, b, _ = _mats(1000, 776, 1032, FP32, a_t, b_t, device="cuda")
    outs = [torch.full((1000, 776), float("nan"), device="cuda") for _ in range(3)]
    for o in outs:
        G.launch(a, b, o, precision="tf32", config=cfg)
    torch.cuda.synchronize()
    assert all(torch.equal(outs[0], o) for o in outs[1:])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, cfg", [(BF16, G._c(128, 128, 64, 8, 4, split=2)), (FP16, G._c(64, 128, 64, 4, 6, split=4)),
                                        (FP32, G.CONFIGS["tf32"][3])])
def test_gpu_split_k(dtype, cfg):
    """Repeated launches (the arrival counters reset themselves), empty splits (K=72: 2-3 K-steps
    over 2-4 splits), alpha/beta applied once after the fix-up."""
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    b_t = dtype == FP32
    for _ in range(3):
        _check(512, 1024, 2048, dtype, cfg, b_t=b_t)
    _check(200, 264, 72, dtype, cfg, b_t=b_t)
    _check(333, 264, 1000, dtype, cfg, b_t=b_t, alpha=0.5, beta=2.0)


def _batch(B, M, N, K, dtype, a_t=False, b_t=False, a_shared=False, b_shared=False, device="cpu"):
    """A batch's operands: each 3-D (B products) in the layout asked for, or 2-D (``*_shared``: one matrix
    for every product); c (B, M, N)."""
    def one(rows, cols, t, shared):
        shape = (cols, rows) if t else (rows, cols)
        x = torch.randn(*(shape if shared else (B, *shape)), device=device).to(dtype)
        return x.transpose(-1, -2) if t else x
    return one(M, K, a_t, a_shared), one(K, N, b_t, b_shared), torch.empty(B, M, N, device=device, dtype=dtype)


@pytest.mark.parametrize("a_t, b_t", [(False, False), (True, True), (False, True)])
@pytest.mark.parametrize("a_shared, b_shared", [(False, False), (True, False), (False, True)])
def test_descriptor_plan_of_a_batch_stacks_each_operand(a_t, b_t, a_shared, b_shared):
    """A batch of 3 products 128x64 @ 64x192: each 3-D operand as one 2-D view of its memory with the
    products one under another (a transposed one: their transposes), the row step between them; a 2-D
    operand is every product's (step 0); the tiles and units count every product's."""
    B, M, N, K = 3, 128, 192, 64
    a, b, c = _batch(B, M, N, K, BF16, a_t, b_t, a_shared, b_shared)
    cfg = G._c(64, 64, 64, 4, 8)
    plan = G.descriptor_plan(a, b, c, cfg)
    assert plan["batch"] == B and plan["MNK"] == (M, N, K) and plan["tiles"] == B * 2 * 3
    assert plan["grid"] == B * 6
    ta, tb, tc = plan["a"][0], plan["b"][0], plan["c"][0]
    assert plan["steps"] == (0 if a_shared else (K if a_t else M), 0 if b_shared else (N if b_t else K), M)
    assert tc.shape == (B * M, N) and tc.data_ptr() == c.data_ptr()
    for t, x, step, shared, tr in ((ta, a, plan["steps"][0], a_shared, a_t), (tb, b, plan["steps"][1], b_shared, b_t)):
        assert t.stride(1) == 1 and t.data_ptr() == x.data_ptr()
        for p in range(1 if shared else B):       # product p's matrix (or its transpose) at rows p * step
            want = (x if shared else x[p])
            want = want.t() if tr else want
            assert torch.equal(t[p * step:p * step + want.shape[0]], want)


def test_heuristic_of_a_batch_keeps_tiles_inside_each_product():
    """M = 192: no 128-row tile fits a product of the batch; the model counts every product's tiles."""
    cfg = G.heuristic(192, 512, 512, "16bit", batch=64)
    assert cfg["BLOCK_M"] == 64 and G.batch_fits(cfg, 192, 512)
    assert G.heuristic(512, 512, 512, "tf32", batch=64, reg=True)["SPLIT_K"] == 1
    one = G.heuristic(512, 512, 512, "16bit")
    assert one["BLOCK_M"] * one["BLOCK_N"] < 128 * 256      # 1 product: 16 tiles of 128x128 or smaller
    assert G.heuristic(512, 512, 512, "16bit", batch=64)["BLOCK_M"] == 128    # 64 of them: whole waves


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, a_t, b_t", [(BF16, False, False), (BF16, True, True), (FP16, False, True),
                                             (FP32, False, False), (FP32, False, True), (FP32, True, True)])
@pytest.mark.parametrize("a_shared, b_shared", [(False, False), (True, False), (False, True)])
def test_gpu_batch_in_one_launch(dtype, a_t, b_t, a_shared, b_shared):
    """Every product of a batch against float64 (NaN-poisoned output, inputs untouched), the model's config
    and a 64-row one; alpha and beta; a batch where M is not a tile multiple is refused in one line."""
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    prec = "tf32" if dtype == FP32 else "none"
    for B, M, N, K, cfg, alpha, beta in ((5, 256, 200, 320, None, 1.0, 0.0), (3, 128, 520, 192,
                                         G._c(64, 128, 64 if dtype != FP32 else 32, 4, 6), 0.5, 2.0)):
        a, b, c = _batch(B, M, N, K, dtype, a_t, b_t, a_shared, b_shared, device="cuda")
        if beta:
            c.copy_(torch.randn(B, M, N, device="cuda"))
        else:
            c.fill_(float("nan"))
        c0, a0, b0 = c.clone(), a.clone(), b.clone()
        assert G.applicable(a, b, c, prec, alpha, beta), G.why_not(a, b, c, prec, alpha, beta)
        outs = [c, c0.clone()]
        for o in outs:          # the first launch binds, the second takes the bound C launch
            G.launch(a, b, o, precision=prec, alpha=alpha, beta=beta, config=cfg)
        torch.cuda.synchronize()
        assert torch.equal(a, a0) and torch.equal(b, b0)
        ref = alpha * (a.double() @ b.double()) + (beta * c0.double() if beta else 0)
        for o in outs:
            assert not torch.isnan(o).any()
            for p in range(B):
                err = ((o[p].double() - ref[p]).norm() / ref[p].norm()).item()
                assert err < {BF16: 1e-2, FP16: 2e-3, FP32: 2e-3}[dtype], (p, err)
    a, b, c = _batch(2, 96, 64, 64, dtype, a_t, b_t, device="cuda")
    with pytest.raises(TiledmmError, match="M a multiple of BLOCK_M"):
        G.launch(a, b, c, precision=prec, config=G._c(128, 64, 64 if dtype != FP32 else 32, 4, 4))


@pytest.mark.gpu
@pytest.mark.parametrize("bias_mode, act", [(1, "gelu"), (2, "silu"), (2, "none")])
@pytest.mark.parametrize("cfg", [None, G._c(128, 128, 64, 8, 4, split=2), G._c(128, 256, 64, 8, 4, group=16, epi=2,
                                                                               tail=1)])
def test_gpu_batch_with_the_fused_epilogue(bias_mode, act, cfg):
    """A bias per column or per row is every product's (a row's bias by its row within the product), through
    the plain epilogue, split-K's fix-up and the tail split; alpha and beta too."""
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    B, M, N, K = 6, 256, 520, 256
    a, b, c = _batch(B, M, N, K, BF16, device="cuda")
    c.copy_(torch.randn(B, M, N, device="cuda"))
    c0 = c.clone()
    bias = torch.randn(N if bias_mode == 1 else M, device="cuda")
    G.launch(a, b, c, precision="none", alpha=0.5, beta=2.0, config=cfg, bias=bias, bias_mode=bias_mode, act=act)
    torch.cuda.synchronize()
    ref = 0.5 * (a.double() @ b.double()) + 2.0 * c0.double()
    ref = ref + (bias.double()[None, None, :] if bias_mode == 1 else bias.double()[None, :, None])
    ref = activation64(ref, act)
    for p in range(B):
        err = ((c[p].double() - ref[p]).norm() / ref[p].norm()).item()
        assert err < 1e-2, (p, err)


@pytest.mark.gpu
def test_gpu_offset_submatrix_and_edges():
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    big = torch.randn(129, 88, device="cuda").to(BF16)
    a = big[:, 8:80]                       # 16-byte aligned offset, row stride 88
    b = torch.randn(72, 136, device="cuda").to(BF16)
    c = torch.full((129, 136), float("nan"), device="cuda", dtype=BF16)
    G.launch(a, b, c, precision="none")
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-2
    _check(1, 4096, 4096, BF16)
    _check(100, 104, 8, FP16)


def _check_epilogue(M, N, K, cfg, bias_mode, act, bias_dtype=FP32, alpha=1.0, beta=0.0, a_t=False, b_t=False,
                    dtype=BF16):
    a, b, c = _mats(M, N, K, dtype, a_t, b_t, device="cuda")
    if beta:
        c.copy_(torch.randn(M, N, device="cuda"))
    else:
        c.fill_(float("nan"))
    bias = torch.randn(N if bias_mode == 1 else M, device="cuda").to(bias_dtype) if bias_mode else None
    c0, a0, b0 = c.clone(), a.clone(), b.clone()
    G.launch(a, b, c, precision="none", alpha=alpha, beta=beta, config=cfg, bias=bias, bias_mode=bias_mode, act=act)
    torch.cuda.synchronize()
    assert not torch.isnan(c).any() and torch.equal(a, a0) and torch.equal(b, b0)
    ref = alpha * (a.double() @ b.double()) + (beta * c0.double() if beta else 0)
    if bias_mode == 1:
        ref = ref + bias.double()[None, :]
    elif bias_mode == 2:
        ref = ref + bias.double()[:, None]
    ref = activation64(ref, act)
    err = ((c.double() - ref).norm() / ref.norm()).item()
    assert err < {BF16: 1e-2, FP16: 2e-3}[dtype], (bias_mode, act, err)


@pytest.mark.gpu
@pytest.mark.parametrize("bias_mode", [0, 1, 2])
@pytest.mark.parametrize("act", G.ACTS)
def test_gpu_fused_epilogue_every_bias_and_activation(bias_mode, act):
    """act(alpha * a @ b + beta * C + bias) against float64, ragged edges, bias fp32 or C's dtype."""
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    ab = dict(alpha=0.5, beta=2.0) if act in ("none", "gelu") else {}
    _check_epilogue(333, 264, 200, G.CONFIGS["16bit"][5], bias_mode, act, FP32 if bias_mode != 2 else BF16, **ab)


@pytest.mark.gpu
def test_gpu_fused_linear_tile_and_split_k():
    """nn.Linear's case: B column-major (the weight), bias per column, gelu, on the 128x256 tile with
    EPI_SPLIT=2; and the epilogue after split-K's fix-up."""
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    _check_epilogue(1000, 1000, 1000, G.CONFIGS["16bit"][0], 1, "gelu", BF16, b_t=True)
    _check_epilogue(300, 264, 1000, G._c(64, 128, 64, 4, 6, split=4), 2, "silu", FP32, alpha=0.5, beta=2.0,
                    dtype=FP16)


@pytest.mark.gpu
def test_gpu_repeated_calls_take_the_bound_launch_and_stay_right():
    """New tensors (pointers), shapes and biases every call: the cached path (C launch, kept tensor
    maps) gives the right result each time."""
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    cfg = G.CONFIGS["16bit"][4]
    for M, N, K in ((256, 520, 264), (304, 520, 264), (72, 1000, 136), (1024, 256, 512), (304, 520, 264)):
        for a_t in (False, True):        # (A^T's row stride is M: a multiple of 8 elements)
            _check(M, N, K, BF16, cfg, a_t=a_t)
            _check_epilogue(M, N, K, cfg, 1, "relu", a_t=a_t)
    _check(77, 1000, 136, BF16, cfg)
    _check_epilogue(77, 1000, 136, cfg, 2, "relu")
    bound = [v for v in G._bound.values() if isinstance(v, G._Bound)]
    assert bound, f"no specialisation took the C launch (adapter: {G._adapter.why_not_direct()!r})"


@pytest.mark.gpu
def test_gpu_threads():
    """Threads launching one specialisation at once (the first compiles under the lock), each on
    its own operands: every result right."""
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    cfg = G._c(64, 64, 64, 4, 8, group=4)       # a config no other test compiles: the first launch races
    jobs = [_mats(200 + 16 * i, 264, 136, BF16, device="cuda") for i in range(6)]
    errors = []

    def work(a, b, c):
        try:
            for _ in range(10):
                G.launch(a, b, c, precision="none", config=cfg)
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    assert not errors, errors
    for a, b, c in jobs:
        ref = a.double() @ b.double()
        assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.gpu
def test_gpu_cuda_graph_captures_the_bound_launch():
    """A bound launch (C launch, kept tensor maps) captured in a CUDA graph on another stream and
    replayed on new contents of the same tensors."""
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    cfg = G.CONFIGS["16bit"][4]
    a, b, c = _mats(304, 520, 264, BF16, device="cuda")
    bias = torch.randn(520, device="cuda")
    run = lambda: G.launch(a, b, c, precision="none", config=cfg, bias=bias, bias_mode=1, act="silu")  # noqa: E731
    run()                                             # compiles and binds
    run()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        run()
    a.copy_(torch.randn_like(a, dtype=FP32).to(BF16))
    c.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref = activation64(a.double() @ b.double() + bias.double()[None, :], "silu")
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.gpu
def test_gpu_split_launches_keep_a_workspace_per_stream_and_a_graph_its_own():
    """Split launches (the tail split of 128x128) reuse their stream's kept workspace: two streams at once,
    a launch that outgrows it, and a CUDA graph captured on another stream (its workspace made in the
    graph's memory) replayed between eager ones -- each result against float64."""
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    cfg = G.CONFIGS["16bit"][2]
    assert cfg["TAIL"] and (cfg["BLOCK_M"], cfg["BLOCK_N"]) == (128, 128)
    jobs = [_mats(M, 2048, 1024, BF16, device="cuda") for M in (1100, 1100, 1500)]   # 144 / 192 tiles: split
    for M, (a, b, c) in zip((1100, 1100, 1500), jobs):
        assert G._tail_splits(M, 2048, 1024, 128, 128, 64, G._num_sms())
    run = lambda a, b, c: G.launch(a, b, c, precision="none", config=cfg)  # noqa: E731

    def check(a, b, c):
        ref = a.double() @ b.double()
        return ((c.double() - ref).norm() / ref.norm()).item()
    run(*jobs[0])
    run(*jobs[0])                                      # bound: the stream's kept workspace
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    for s in (s1, s2):
        s.wait_stream(torch.cuda.current_stream())
    for _ in range(3):
        for s, job in ((s1, jobs[0]), (s2, jobs[1])):
            with torch.cuda.stream(s):      # the poison on the launch's own stream: after the last launch there,
                job[2].fill_(float("nan"))  # before this one (on the default stream it raced both)
                run(*job)
    torch.cuda.synchronize()
    assert check(*jobs[0]) < 1e-2 and check(*jobs[1]) < 1e-2
    keys = {k for k in G._WS if k[1] in (s1.cuda_stream, s2.cuda_stream)}
    assert len(keys) == 2 and G._WS[keys.pop()].data_ptr() != G._WS[keys.pop()].data_ptr()
    sg = torch.cuda.Stream()
    sg.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=sg):
        run(*jobs[1])
    a, b, c = jobs[1]
    a.copy_(torch.randn_like(a, dtype=FP32).to(BF16))
    for _ in range(2):
        c.fill_(float("nan"))
        jobs[2][2].fill_(float("nan"))
        run(*jobs[2])                                  # more tiles to split than before: the workspace grows
        graph.replay()
        torch.cuda.synchronize()
        assert check(*jobs[1]) < 1e-2 and check(*jobs[2]) < 1e-2


# -- the variant in the dispatcher (variants.GLUON; the model's side is in tests/test_heuristics.py) --

def test_registered_as_a_gpu_only_variant_bound_by_its_own_class_launch():
    from tiledmm.kernels.block import dispatch as bm
    from tiledmm.kernels.block import variants as V
    v = V.BY_NAME[G.NAME]
    assert v is V.GLUON and v in V.ALL
    assert v.replayable is False and v.emulation == () and v.own_config is G.heuristic
    # not fastlaunch's replay, but its own class launch: the model and the tuner count repeat calls as
    # one bound launch (GPU time only, no host floor), as for the replayable variants
    assert v.class_launch is G.class_launch
    a, b, c = _mats(64, 64, 64)
    assert bm._repeats_bound(v, a, b, c) and not bm._repeats_bound(V.SIMT_ASYNC, a, b, c)
    assert v.traits.capability == (9, 0) and v.traits.persistent and v.traits.host_us >= 20
    assert v.configs("16bit") == G.CONFIGS["16bit"] and v.configs("ieee") == []


@pytest.mark.skipif(torch.cuda.is_available() and G._is_hopper(), reason="the CPU's refusal")
def test_forced_off_hopper_is_a_one_line_error():
    import tiledmm
    a, b, _ = _mats(64, 64, 64, BF16)
    with pytest.raises(tiledmm.TiledmmError, match="gluon-ws") as e:
        tiledmm.matmul(a, b, kernel="triton", variant=G.NAME)
    assert "\n" not in str(e.value)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [BF16, FP16])
def test_gpu_through_matmul_forced_and_partial_config(dtype):
    """tiledmm.matmul with variant='gluon-ws': its own config, and a partial one completed."""
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    import tiledmm
    a, b, _ = _mats(777, 1000, 1000, dtype, b_t=True, device="cuda")
    ref = a.double() @ b.double()
    for cfg in (None, {"BLOCK_M": 64, "BLOCK_N": 128}):
        out = tiledmm.matmul(a, b, kernel="triton", variant=G.NAME, **({"config": cfg} if cfg else {}))
        assert ((out.double() - ref).norm() / ref.norm()).item() < {BF16: 1e-2, FP16: 2e-3}[dtype]


@pytest.mark.gpu
def test_gpu_default_pick_is_gluon_for_4096_cubed_bf16_only():
    """On the H100 (no tuning store entry, TILEDMM_TUNE unset) the model's pick for 4096^3 bf16 is
    this kernel, and the result is right; 1000^3 stays on a bound Triton launch."""
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    import tiledmm
    from tiledmm.kernels.block import dispatch as bm
    for n, want in ((4096, True), (1000, False)):
        a, b, _ = _mats(n, n, n, BF16, device="cuda")
        out = tiledmm.matmul(a, b, kernel="triton")
        c = torch.empty(n, n, device="cuda", dtype=BF16)
        plan = bm._plans[bm.plan_key(a, b, c, "none", 1.0, 0.0)]
        assert (plan.func is G.launch) == want, plan
        ref = a.double() @ b.double()
        assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.gpu
def test_gpu_short_path_class_launch_serves_new_sizes_of_a_class():
    """Through tiledmm.matmul's short path: a class bound to this kernel keeps one class launch
    (gluon_gemm._ClassLaunch) that serves a new M, N or K of the class without a new specialisation;
    each result right against float64 (output of a fresh allocation each call)."""
    if not G._is_hopper():
        pytest.skip("needs a Hopper GPU")
    import tiledmm
    from tiledmm import api
    from tiledmm.kernels.block import dispatch as bm
    a, b, _ = _mats(4096, 4096, 4096, BF16, device="cuda")
    tiledmm.matmul(a, b, kernel="triton")
    c = torch.empty(4096, 4096, device="cuda", dtype=BF16)
    # the default's pick for 4096^3 bf16 on a Hopper GPU is this kernel (the dispatcher's Gluon ownership
    # rule); a pick that moves away is the regression this test is here to catch, not a reason to skip
    assert bm._plans[bm.plan_key(a, b, c, "none", 1.0, 0.0)].func is G.launch, \
        "the default no longer takes the Gluon kernel for 4096^3 bf16"
    bound = len(G._bound)
    for _ in range(2):
        for M, N, K in ((4100, 4096, 4096), (5000, 4224, 4096), (4096, 4096, 4352)):   # rows of 128-byte multiples
            a2, b2, _ = _mats(M, N, K, BF16, device="cuda")
            out = tiledmm.matmul(a2, b2, kernel="triton")
            ref = a2.double() @ b2.double()
            assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2, (M, N, K)
        # at most one more specialisation: a TAIL config's split build, for the sizes whose last wave splits
        assert len(G._bound) <= bound + 1
        bound = len(G._bound)
    classes = [hit[0] for plan in api._fast_plans.values() for hit in getattr(plan, "bound", {}).values()]
    assert any(isinstance(cls, G._ClassLaunch) for cls in classes), classes
