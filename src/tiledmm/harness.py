"""The one harness every kernel goes through: fresh random inputs, a float64
reference, a poisoned output, the relative error against a bound per precision,
and timing through ``tiledmm.timing`` (the one timing method).

This is the lectures' host program -- allocate, copy in, configure, launch, copy
out, compare with the golden host result -- made strict: the output is filled
with NaN before every checked run, so an element no thread wrote fails the check.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _backend, registry
from ._arrays import kind_of
from .api import matmul
from .timing import device_and_host, rotation_for, time_calls  # noqa: F401  (rotation_for: here too)

# ||C - ref|| / ||ref|| bounds. fp32 lands near 1e-7; tf32 near 3e-4; bf16 near 3e-3.
TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "tf32": 5e-3, "float16": 5e-3, "bfloat16": 2e-2}


def tolerance(dtype: str, precision: str | None = None) -> float:
    return TOLERANCE["tf32" if precision == "tf32" else dtype]


def to_float64(x: Any) -> np.ndarray:
    """Any supported array kind, copied to a host float64 numpy array."""
    kind = kind_of(x)
    if kind == "torch":
        return x.detach().to("cpu", dtype=__import__("torch").float64).numpy()
    if kind == "numpy":
        return x.astype(np.float64)
    if kind == "cupy":
        return x.get().astype(np.float64)
    return x.copy_to_host().astype(np.float64)


def reference(a: Any, b: Any) -> np.ndarray:
    """The golden result: the product of the (already rounded) inputs in float64 on the host."""
    return np.matmul(to_float64(a), to_float64(b))


def rel_error(c: Any, ref: Any) -> float:
    """||c - ref||_F / ||ref||_F; NaN when c holds a NaN (an unwritten, poisoned element). ``ref``: the
    host reference, or a copy of it on c's GPU (``on_device``): then the norms are taken there, in float64,
    and c never crosses to the host (the main job's five checks of a 3000x4000 result spent 0.4 s copying
    and subtracting on the host)."""
    if not isinstance(ref, np.ndarray) and kind_of(c) == "torch" and c.device == ref.device:
        import torch
        c64, norm = c.detach().double(), torch.linalg.vector_norm
    else:
        ref = ref if isinstance(ref, np.ndarray) else ref.cpu().numpy()
        c64, norm = to_float64(c), np.linalg.norm
    if tuple(c64.shape) != tuple(ref.shape):
        raise ValueError(f"result shape {tuple(c64.shape)} != reference shape {tuple(ref.shape)}")
    denom = float(norm(ref))
    diff = float(norm(c64 - ref))
    return diff / denom if denom else diff


def on_device(ref: np.ndarray, like: Any) -> Any:
    """The host reference copied to ``like``'s GPU (a torch CUDA tensor; anything else: ``ref`` itself)."""
    if kind_of(like) != "torch" or like.device.type != "cuda":
        return ref
    import torch
    return torch.from_numpy(ref).to(like.device)


def random_inputs(shape_a: tuple, shape_b: tuple, dtype: str, *, seed: int, device: str | None = None):
    """Fresh standard-normal torch tensors (never zeros), on the kernels' device."""
    import torch
    device = device or _backend.torch_device()
    g = torch.Generator(device="cpu").manual_seed(seed)
    a = torch.randn(shape_a, generator=g, dtype=torch.float32)
    b = torch.randn(shape_b, generator=g, dtype=torch.float32)
    t = getattr(torch, dtype)
    return a.to(device=device, dtype=t), b.to(device=device, dtype=t)


_kept: dict = {}          # (shapes, dtype, seed, device) -> [a, b, float64 reference or None]
KEEP_BYTES = 1 << 30     # inputs kept for the next point of the same product (then the memo starts again)


def _nbytes(x) -> int:
    """Bytes of a kept tensor or array (0 for a reference not made yet)."""
    return 0 if x is None else x.nbytes


def _point_inputs(sa: tuple, sb: tuple, dtype: str, seed: int) -> list:
    """``random_inputs`` of one product, shared by the kernels of a run that check and time the same product
    (the main job runs five on one pair): [a, b, reference] with the reference filled on first use (on the
    inputs' GPU where they are on one: ``on_device``, and counted with them against ``KEEP_BYTES``). Safe to
    share: no kernel writes its inputs (the contract's tests check it)."""
    key = (sa, sb, dtype, seed, _backend.torch_device())
    hit = _kept.get(key)
    if hit is None:
        a, b = random_inputs(sa, sb, dtype, seed=seed)
        if sum(_nbytes(x) for kept in _kept.values() for x in kept) + _nbytes(a) + _nbytes(b) > KEEP_BYTES:
            _kept.clear()
        hit = _kept[key] = [a, b, None]
    return hit


def poisoned_like(a: Any, shape: tuple, dtype: str | None = None):
    """A NaN-filled output of a's kind and device."""
    import torch
    if isinstance(a, torch.Tensor):
        return torch.full(shape, float("nan"), dtype=getattr(torch, dtype) if dtype else a.dtype, device=a.device)
    return np.full(shape, np.nan, dtype=dtype or a.dtype)


def sync() -> None:
    if not _backend.emulating():
        import torch
        torch.cuda.synchronize()


def cuda_alive() -> bool:
    """Whether the CUDA context still works (a kernel fault poisons it for the whole process):
    after a crashed case, the fuzzer and the sanitizer script stop rather than report noise."""
    try:
        import torch
        torch.cuda.synchronize()
        return True
    except Exception:   # noqa: BLE001
        return False


@dataclass
class Result:
    kernel: str
    tile: int | None
    shape: tuple            # (batch, m, k, n) or (m, k, n)
    dtype: str
    precision: str | None
    rel_err: float
    bound: float
    ms: float | None = None
    tflops: float | None = None
    emulated: bool = False
    gpu_ms: float | None = None     # with gpu_time: the GPU's time a call, the host's launch path apart
    host_ms: float | None = None    # ... and the host's time to enqueue a call (timing.device_and_host)

    @property
    def ok(self) -> bool:
        return bool(self.rel_err <= self.bound)  # NaN compares False: an unwritten element fails


def flops(shape: tuple) -> float:
    *batch, m, k, n = shape
    return 2.0 * (batch[0] if batch else 1) * m * k * n


def check_and_time(kernel: str, shape: tuple, dtype: str = "float32", *, tile: int | None = None,
                   precision: str | None = None, seed: int = 0, warmup: int = 3, repeats: int = 5,
                   rotate: int = 1, time_it: bool = True, options: dict | None = None,
                   gpu_time: bool = False) -> Result:
    """Check one kernel on fresh random inputs against float64, then time it -- both through
    ``tiledmm.matmul``, as a user calls it (per-call host work counts), with ``timing.time_calls``:
    batches of queued calls rotating over ``rotate`` input sets, median of ``repeats`` batches.
    gpu_time: also the same calls with the GPU's and the host's shares apart
    (``timing.device_and_host``: each batch queued behind a GPU sleep), into ``gpu_ms``/``host_ms``:
    for calls shorter than their launch path, where ``ms`` follows the host."""
    spec = registry.get(kernel)
    tile = spec.check_tile(tile)
    opts = dict(options or {})
    if precision is not None:
        opts["precision"] = precision
    *batch, m, k, n = shape
    sa, sb = (*batch, m, k), (*batch, k, n)
    kept = _point_inputs(sa, sb, dtype, seed)
    a, b = kept[0], kept[1]
    out = poisoned_like(a, (*batch, m, n))
    matmul(a, b, kernel=kernel, tile=tile, out=out, **opts)
    sync()
    if kept[2] is None:
        kept[2] = on_device(reference(a, b), out)      # computed on the host, compared where the result is
    res = Result(kernel, tile, tuple(shape), dtype, precision, rel_error(out, kept[2]),
                 tolerance(dtype, precision), emulated=_backend.emulating())
    if time_it and res.ok:
        # the baseline is timed as its users call it -- torch.matmul itself, not through tiledmm's
        # dispatcher (whose full path would add its own host cost to cuBLAS's)
        direct = spec.family == "library" and not _backend.emulating()
        if direct:
            import torch
        calls = []
        for r in range(max(rotate, 1)):
            ar, br = (a, b) if r == 0 else _point_inputs(sa, sb, dtype, seed + 1000 + r)[:2]
            o = poisoned_like(ar, (*batch, m, n))
            calls.append(functools.partial(torch.matmul, ar, br, out=o) if direct else
                         functools.partial(matmul, ar, br, kernel=kernel, tile=tile, out=o, **opts))
        with _cublas_mode(opts.get("precision") if direct else None):
            res.ms = time_calls(calls, batches=max(repeats, 1), warmup=warmup)
            if gpu_time and not _backend.emulating():
                res.gpu_ms, res.host_ms = device_and_host(calls, batches=max(3, min(repeats, 5)), warmup=1,
                                                          batch_ms=20.0)
        res.tflops = flops(shape) / (res.ms * 1e-3) / 1e12
    return res


def _cublas_mode(precision: str | None):
    """cuBLAS's float32 mode for a direct torch.matmul baseline (nothing to set otherwise)."""
    if precision is None:
        return contextlib.nullcontext()
    from .kernels.library import fp32_matmul_precision
    return fp32_matmul_precision(precision)
