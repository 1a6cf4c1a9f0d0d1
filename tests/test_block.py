"""The Triton kernel: Triton's interpreter on CPU, the same checks on the GPU (marked)."""
import numpy as np
import pytest
import torch

import tiledmm
from tiledmm import TiledmmError
from tiledmm.harness import check_and_time, random_inputs, reference, rel_error, tolerance

from .conftest import GPU

PRECISIONS = [("float32", "ieee"), ("float32", "tf32"), ("bfloat16", None), ("float16", None)]
DEV = "cuda" if GPU else "cpu"


@pytest.mark.parametrize("dtype,precision", PRECISIONS)
@pytest.mark.parametrize("shape", [(257, 129, 300), (1, 1, 1), (33, 1, 65), (31, 64, 17), (3, 33, 17, 45)])
def test_rectangular_and_batched(dtype, precision, shape):
    r = check_and_time("triton", shape, dtype, precision=precision, time_it=False)
    assert r.ok, r


@pytest.mark.parametrize("dtype,precision", PRECISIONS)
def test_transposed_views_and_alpha_beta(dtype, precision):
    a, b = random_inputs((40, 70), (50, 40), dtype, seed=3)      # use a.T (70x40) @ b.T (40x50)
    at, bt = a.T, b.T
    assert not at.is_contiguous() and not bt.is_contiguous()
    c0 = random_inputs((70, 50), (1, 1), dtype, seed=4)[0]
    out = c0.clone()
    r = tiledmm.matmul(at, bt, kernel="triton", precision=precision, alpha=0.5, beta=-2.0, out=out)
    assert r is out
    ref = 0.5 * reference(at, bt) - 2.0 * reference(c0, np.eye(50))
    assert rel_error(out, ref) <= tolerance(dtype, precision)


def test_bf16_inputs_into_float32_out():
    a, b = random_inputs((30, 20), (20, 10), "bfloat16", seed=5)
    out = torch.full((30, 10), float("nan"), device=a.device)
    tiledmm.matmul(a, b, kernel="triton", out=out)
    assert rel_error(out, reference(a, b)) < 1e-5  # fp32 accumulation, no output rounding


def test_numpy_inputs_through_triton():
    a = np.random.default_rng(0).standard_normal((20, 30)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((30, 7)).astype(np.float32)
    p = tiledmm.matmul(a, b, kernel="triton")
    assert isinstance(p, np.ndarray) and rel_error(p, reference(a, b)) < 1e-6


def test_float64_is_not_a_triton_dtype_but_the_default_takes_it():
    a, b = random_inputs((9, 5), (5, 7), "float64", seed=1)
    with pytest.raises(TiledmmError, match=r"'triton' supports dtypes .* not float64 \(the default kernel for "
                                           r"float64 is '(tiled|autotuned)'\)"):
        tiledmm.matmul(a, b, kernel="triton")
    assert rel_error(tiledmm.matmul(a, b), reference(a, b)) < 1e-13


def test_default_kernel():
    from tiledmm.api import default_kernel
    assert default_kernel("float32") == "triton"
    assert default_kernel("bfloat16") == "triton"
    assert default_kernel("float64") == ("autotuned" if GPU else "tiled")


def _err(match, *args, **kw):
    with pytest.raises(TiledmmError, match=match):
        tiledmm.matmul(*args, kernel="triton", **kw)


def test_bad_precision_combinations():
    a = torch.ones(2, 2, device=DEV)
    _err(r"precision 'tf32' is not available for bfloat16", a.bfloat16(), a.bfloat16(), precision="tf32")
    _err(r"precision 'fast' is not available for float32", a, a, precision="fast")


def test_batch_mismatch():
    _err(r"batch dimensions do not broadcast", torch.ones(2, 3, 4, device=DEV), torch.ones(3, 4, 5, device=DEV))


def test_out_wrong_shape_dtype_device():
    a, b = torch.ones(2, 3, device=DEV), torch.ones(3, 4, device=DEV)
    _err(r"out must be a torch 2x4", a, b, out=torch.empty(4, 2, device=DEV))
    _err(r"got out: torch 2x4 int32", a, b, out=torch.empty(2, 4, dtype=torch.int32, device=DEV))
    other = "cpu" if GPU else None
    if other:
        _err(r"got out: torch 2x4 float32 on cpu", a, b, out=torch.empty(2, 4, device=other))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,precision", PRECISIONS)
@pytest.mark.parametrize("shape", [(4097, 4093, 4095), (127, 8191, 127), (8, 512, 512, 512), (1000, 1, 999),
                                   (1, 4096, 4096), (16, 4096, 4096)])
def test_gpu_shapes(dtype, precision, shape):
    r = check_and_time("triton", shape, dtype, precision=precision, time_it=False)
    assert r.ok, r


@pytest.mark.gpu
def test_gpu_tuned_choice_is_reused_within_a_shape_class():
    from tiledmm import tuning
    tuning.set_mode("on")
    a, b = random_inputs((1536, 1152), (1152, 1280), "bfloat16", seed=9)   # rows 16-byte aligned throughout
    tiledmm.matmul(a, b)
    n = len(tuning.remembered())
    a, b = random_inputs((1600, 1216), (1216, 1344), "bfloat16", seed=10)  # same shape class and layout
    tiledmm.matmul(a, b)
    assert len(tuning.remembered()) == n
    a, b = random_inputs((3104, 1216), (1216, 1344), "bfloat16", seed=10)  # a new class: one more choice
    tiledmm.matmul(a, b)
    assert len(tuning.remembered()) == n + 1
    tuning.set_mode("off")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,precision", PRECISIONS)
@pytest.mark.parametrize("shape", [(1000, 520, 776), (4096, 4096, 4096), (130, 64, 72)])
def test_gpu_tma_persistent_variant(dtype, precision, shape):
    """Hopper's TMA path: the copy engine's zero-fill and clipping handle the edges."""
    variant = "tma-kmajor" if precision == "tf32" else "tma"     # tf32's wgmma needs a K-major B
    r = check_and_time("triton", shape, dtype, precision=precision, time_it=False, options={"variant": variant})
    assert r.ok, r


@pytest.mark.skipif(GPU, reason="emulation refuses the TMA variant")
def test_tma_variant_needs_hopper():
    a = torch.ones(32, 32)
    _err(r"variant 'tma' cannot run this call.*'tma' needs a Hopper GPU", a, a, variant="tma")


@pytest.mark.parametrize("dtype,precision", PRECISIONS)
@pytest.mark.parametrize("shape", [(17, 1000, 13), (2, 9, 700, 33), (40, 513, 20)])
def test_split_k_variant(dtype, precision, shape):
    """Few output tiles, long K: K cut into slices whose fp32 partials are summed after."""
    r = check_and_time("triton", shape, dtype, precision=precision, time_it=False, options={"variant": "splitk"})
    assert r.ok, r


def test_split_k_alpha_beta():
    a, b = random_inputs((20, 900), (900, 30), "float32", seed=8)
    c0 = random_inputs((20, 30), (1, 1), "float32", seed=9)[0]
    out = c0.clone()
    tiledmm.matmul(a, b, kernel="triton", variant="splitk", alpha=-0.5, beta=3.0, out=out)
    assert rel_error(out, -0.5 * reference(a, b) + 3.0 * reference(c0, np.eye(30))) < 1e-5


def _triton_key(kernel, **ints):
    """What Triton's JIT specialises each named integer argument of ``kernel`` on (its own
    rule: type, == 1, divisible by 16), honouring the kernel's do_not_specialize."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import JITFunction
    opts = getattr(kernel, "kwargs", None)      # the interpreter's wrapper keeps the jit options here
    jf = JITFunction(kernel.fn, do_not_specialize=(opts or {}).get("do_not_specialize")) if opts is not None \
        else kernel
    params = {p.name: p for p in jf.params}
    return {n: native_specialize_impl(BaseBackend, v, False, not params[n].do_not_specialize,
                                      not params[n].do_not_specialize_on_alignment) for n, v in ints.items()}


@pytest.mark.parametrize("kernel", ["matmul_kernel", "splitk_kernel", "matmul_tma_persistent_kernel"])
def test_one_compiled_kernel_serves_every_M(kernel):
    """M = 1, 128 and 129 give Triton the same specialisation (one compile for a shape class);
    N still tells 1, divisible by 16 and neither apart (its vector loads), as Triton's rule says."""
    from tiledmm.kernels.block import kernels as KS, splitk
    fn = {"matmul_kernel": KS.matmul_kernel, "splitk_kernel": splitk.splitk_kernel,
          "matmul_tma_persistent_kernel": KS.matmul_tma_persistent_kernel}[kernel]
    keys = [_triton_key(fn, M=m) for m in (1, 128, 129)]
    assert keys[0] == keys[1] == keys[2]
    if kernel in ("matmul_kernel", "splitk_kernel"):
        ns = [_triton_key(fn, N=n)["N"] for n in (1, 128, 129)]
        assert len(set(ns)) == 3, ns


def _fast_kernels() -> list:
    """Every FastKernel made so far (``_vcommon.fast``'s memo)."""
    import gc

    from tiledmm.kernels.block.fastlaunch import FastKernel
    return [o for o in gc.get_objects() if isinstance(o, FastKernel)]


@pytest.mark.gpu
def test_new_M_compiles_no_new_kernel():
    """On the GPU: the blocked kernel with one config, M = 97 .. 127 (odd, even, divisible by
    16 and not): the compiled matmul_kernel specialisations -- Triton's JIT cache and those loaded from
    tiledmm's index or the package's store into its FastKernels -- do not grow."""
    import torch
    from tiledmm.kernels.block import dispatch as bm
    from tiledmm.kernels.block import kernels as KS

    def compiled() -> int:        # distinct binaries (a FastKernel keys one binary under each M it saw)
        jit = {ck.hash for entry in KS.matmul_kernel.device_caches.values() for ck in entry[0].values()}
        return len(jit | {ck.hash for fk in _fast_kernels() if fk.fn is KS.matmul_kernel for ck in fk.cache.values()})
    b = torch.randn(512, 384, device="cuda", dtype=torch.bfloat16)
    cfg = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
    counts = []
    for M in (97, 112, 113, 127, 128):
        a = torch.randn(M, 512, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(M, 384, device="cuda", dtype=torch.bfloat16)
        bm.launch(a, b, c, precision="none", variant="blocked", config=cfg)
        torch.cuda.synchronize()
        assert ((c.double() - a.double() @ b.double()).norm() / (a.double() @ b.double()).norm()) < 2e-2
        counts.append(compiled())
    assert counts[0] >= 1 and len(set(counts)) == 1, counts
