"""A peer's test suite: PyTorch's own OpInfo sample inputs for mm, bmm, matmul, addmm and
baddbmm, each contiguous and non-contiguous, through ``tiledmm.matmul``, against the op
evaluated in float64. On the GPU (marked) and in emulation (CPU tensors, toy sizes)."""
import pytest
import torch

import tiledmm

from .conftest import GPU

pytest.importorskip("expecttest")   # torch's internal test utilities need it
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.common_utils import noncontiguous_like  # noqa: E402

OPS = {op.name: op for op in op_db if op.name in ("mm", "bmm", "matmul", "addmm", "baddbmm") and not op.variant_test_name}
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 5e-3, torch.bfloat16: 2e-2}


def through_tiledmm(name, sample):
    x, args, kw = sample.input, sample.args, sample.kwargs
    if name in ("mm", "bmm", "matmul"):
        return tiledmm.matmul(x, args[0])
    a, b = args[0], args[1]
    shape = (*a.shape[:-1], b.shape[-1])
    out = x.expand(shape).clone()                 # addmm's input broadcasts to the result
    return tiledmm.matmul(a, b, out=out, alpha=kw.get("alpha", 1), beta=kw.get("beta", 1))


def reference(op, sample):
    def up(t):
        return t.double() if isinstance(t, torch.Tensor) else t
    return op.op(up(sample.input), *(up(a) for a in sample.args), **sample.kwargs)


def check(name, sample, dtype):
    op = OPS[name]
    got = through_tiledmm(name, sample)
    want = reference(op, sample)
    assert got.shape == want.shape and got.dtype == dtype, (name, got.shape, want.shape, got.dtype)
    got64 = got.double()
    finite = torch.isfinite(want)
    assert torch.equal(torch.isnan(got64), torch.isnan(want)), name
    denom = want[finite].norm().item() or 1.0
    err = (got64[finite] - want[finite]).norm().item() / denom
    assert err <= TOL[dtype], (name, [tuple(t.shape) for t in (sample.input, *sample.args)], err)


def samples(name, device, dtype):
    op = OPS[name]
    for s in op.sample_inputs(device, dtype, requires_grad=False):
        yield s
        yield s.transform(noncontiguous_like)


def path(sample) -> tuple:
    """What tiledmm's route through a product depends on besides sizes: per operand its rank (more than one
    batch dimension counted as one: tiledmm merges the batch dimensions before a kernel sees them), whether it
    is contiguous, empty or broadcasts a batch dimension of 1; the scalars."""
    def one(t):
        if not isinstance(t, torch.Tensor):
            return t
        return (min(t.dim(), 3), t.is_contiguous(), t.numel() == 0, 1 in t.shape[:-2])
    return tuple(one(t) for t in (sample.input, *sample.args)) + tuple(sorted(sample.kwargs.items()))


@pytest.mark.parametrize("dtype", [pytest.param(d, marks=pytest.mark.slow) if d == torch.float64 else d
                                   for d in DTYPES], ids=str)
@pytest.mark.parametrize("name", sorted(OPS))
def test_opinfo_samples(name, dtype):
    device = "cuda" if GPU else "cpu"
    n, seen = 0, set()
    for s in samples(name, device, dtype):
        if not GPU and sum(t.numel() for t in (s.input, *s.args) if isinstance(t, torch.Tensor)) > 4000:
            continue   # emulation: the simulator takes toy sizes only
        if not GPU and dtype == torch.float64:
            # emulation's float64 kernel is SIMT, one simulator launch per 2-D product: a sample with two batch
            # dimensions (25 launches) runs only where no earlier sample took its route (with one batch
            # dimension, 5 launches); the other dtypes run every sample
            if path(s) in seen and any(isinstance(t, torch.Tensor) and t.dim() > 3 for t in (s.input, *s.args)):
                continue
            seen.add(path(s))
        check(name, s, dtype)
        n += 1
    assert n > 0
