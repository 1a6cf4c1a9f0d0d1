"""The public API: ``tiledmm.matmul``.

``matmul(a, b)`` means what ``a @ b`` means in numpy and torch -- 1-D operands,
batch dimensions that broadcast -- and takes the BLAS GEMM form on top:
``out = alpha * a @ b + beta * out``. Every call is reduced to the kernels' one
problem: P = A @ B on 2-D (or 3-D batched) torch tensors on the kernels' device,
on the caller's stream. Around the kernel this module does, once for every family:
validation with messages that name shapes and dtypes; array kinds in and out;
host <-> device copies; 1-D and batch shapes; the GEMM epilogue for kernels without
their own; a temporary when ``out`` overlaps an input; empty and K = 0 products.

Device arrays of a kind (array type, dtypes, kernel, precision) that has run once take the
kernel family's short path (``KernelSpec.fast_plan``; the Triton family's is
``kernels/block/shortpath.py``): one guard and a dict lookup here, then the family's plan,
which returns None for anything it does not handle (the full path then does).
"""
from __future__ import annotations

import math
import numbers
import threading
from contextlib import nullcontext
from typing import Any

import numpy as np

from . import _adapter, _backend, epilogue, invariance, registry, tuning
from ._arrays import (SUPPORTED_DTYPES, TiledmmError, describe, device_name, dtype_name, from_torch, kind_of,
                      on_host, overlaps, shape_str, to_torch, write_back, writable_view)
from .registry import KernelSpec


def default_kernel(dtype: str) -> str:
    """The kernel ``matmul`` uses when none is named: Triton's for float32/16-bit, the SIMT
    ladder's autotuned rung for float64 (the lectures' ``tiled`` in emulation)."""
    if dtype == "float64":
        return "tiled" if _backend.emulating() else "autotuned"
    return "triton"


def _scalar(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TiledmmError(f"{name} must be a real number, got {v!r} ({type(v).__name__})")
    return float(v)


_stream_cache: dict[tuple, Any] = {}    # (raw handle, device) -> torch's ExternalStream over it


def _stream_handle(stream: Any) -> int:
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attr in ("cuda_stream", "ptr"):            # torch, CuPy
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    handle = getattr(stream, "handle", None)       # numba
    if handle is not None:
        return int(getattr(handle, "value", handle) or 0)
    raise TiledmmError(f"stream must be a torch, CuPy or numba stream or a raw handle (int); got {type(stream).__name__}")


def _stream_context(kind: str, stream: Any, device):
    """Make the caller's stream torch's current stream for the call: ``stream=`` if given,
    else torch's current stream for torch tensors, CuPy's current stream for CuPy arrays,
    the default stream otherwise."""
    import torch
    if stream is None:
        if kind == "torch":
            return nullcontext()
        if kind == "cupy":
            import cupy
            handle = cupy.cuda.get_current_stream().ptr
        else:
            return torch.cuda.stream(torch.cuda.default_stream(device))
    else:
        handle = _stream_handle(stream)
    if handle == torch.cuda.current_stream(device).cuda_stream:
        return nullcontext()
    s = _stream_cache.get((handle, device))
    if s is None:       # (keyed by device too: handle 0, the default stream, is every device's)
        s = _stream_cache[(handle, device)] = _adapter.torch_stream(handle, device)
    return torch.cuda.stream(s)


def _result_shape(sa: tuple, sb: tuple, a, b) -> tuple[tuple, tuple, tuple]:
    """(batch shape, M, N) and the result's shape by numpy's matmul rules."""
    if len(sa) == 0 or len(sb) == 0:
        raise TiledmmError(f"matmul needs arrays of at least one dimension; got {describe(a, 'a')}; "
                           f"{describe(b, 'b')} (for scalars use *)")
    K = sa[-1]
    Kb = sb[0] if len(sb) == 1 else sb[-2]
    if K != Kb:
        raise TiledmmError(f"inner dimensions differ: a is {shape_str(sa)}, b is {shape_str(sb)} "
                           f"(a's last dimension, {K}, must equal b's {'only' if len(sb) == 1 else 'second-to-last'} "
                           f"dimension, {Kb})")
    ba, bb = sa[:-2], sb[:-2]
    try:      # numpy's, not torch's: torch.broadcast_shapes imports sympy (3 s) on its first call
        batch = tuple(int(n) for n in np.broadcast_shapes(ba, bb))
    except ValueError:
        raise TiledmmError(f"batch dimensions do not broadcast: a is {shape_str(sa)}, b is {shape_str(sb)} "
                           f"(batch {shape_str(ba)} vs {shape_str(bb)})") from None
    M = sa[-2] if len(sa) > 1 else 1
    N = sb[-1] if len(sb) > 1 else 1
    res = batch + ((M,) if len(sa) > 1 else ()) + ((N,) if len(sb) > 1 else ())
    return batch, (M, K, N), res


def matmul(a: Any, b: Any, *, kernel: str | None = None, tile: int | None = None, out: Any = None,
           alpha: float = 1.0, beta: float = 0.0, precision: str | None = None, stream: Any = None,
           max_device_bytes: int | None = None, **options: Any) -> Any:
    """``alpha * a @ b + beta * out`` with a tiledmm kernel (``a @ b`` by default).

    a, b: numpy arrays, torch tensors (CPU or CUDA), CuPy arrays or numba device arrays,
        both of one kind, device and dtype (float32, float64, float16, bfloat16), any
        strides (negative and zero too), 1-D or N-D with batch dimensions that broadcast,
        exactly as ``a @ b``.
    kernel: a name from ``tiledmm.kernel_names()``; default: by dtype (Triton for
        float32/16-bit, the SIMT ladder's tuned rung for float64).
    tile: the kernel's tile width (``TILE_WIDTH``), where it has one.
    out: array of the inputs' kind and device with the result's shape (its dtype may be
        any supported float); receives the result and is returned. May alias an input.
    alpha, beta: the GEMM form. ``beta`` needs ``out``; with ``beta == 0`` out's old
        contents are never read.
    precision: float32 only: "ieee" (exact, default) or "tf32" (tensor cores).
    stream: the CUDA stream to run on (torch, CuPy or numba stream, or a raw handle);
        default: torch's current stream for torch tensors, CuPy's for CuPy arrays, the
        default stream otherwise. Host arrays are copied on it and the call waits for it.
    max_device_bytes: for host operands, the most device memory to use: a product that
        does not fit is computed out of core, streamed through the GPU in blocks.
    Inputs are never modified.
    """
    plain = stream is None and tile is None and max_device_bytes is None and not options   # the one guard
    if plain and _planned:
        plan = (_invariant_plans if _invariant() else _fast_plans).get(
            (type(a), type(b), getattr(a, "dtype", None), getattr(b, "dtype", None), kernel, precision))
        if plan is not None:
            r = plan(a, b, out, alpha, beta)
            if r is not None:
                return r
    return _matmul(a, b, kernel, tile, out, alpha, beta, precision, stream, max_device_bytes, options, plain)


def _matmul(a, b, kernel, tile, out, alpha, beta, precision, stream, max_device_bytes, options, plain):
    if any(getattr(x, "requires_grad", False) for x in (a, b, out, alpha)):   # differentiable: tiledmm.ops
        r = registry.extension("autograd")(a, b, out, alpha, beta, kernel, tile, precision, stream,
                                           max_device_bytes, options)
        if r is not None:
            return r
    kind = kind_of(a)
    if kind_of(b) != kind:
        raise TiledmmError(f"a and b are different array kinds: {describe(a, 'a')}; {describe(b, 'b')}; "
                           "pass two of the same kind")
    alpha, beta = _scalar("alpha", alpha), _scalar("beta", beta)
    da, db = dtype_name(a, kind), dtype_name(b, kind)
    for name, x, d in (("a", a, da), ("b", b, db)):
        if d not in SUPPORTED_DTYPES:
            raise TiledmmError(f"unsupported dtype {d} ({describe(x, name, kind)}); "
                               f"tiledmm supports {list(SUPPORTED_DTYPES)}"
                               + ("; for float8 use tiledmm.scaled_matmul" if d.startswith("float8") else ""))
    if da != db:
        raise TiledmmError(f"mixed dtypes: {describe(a, 'a', kind)}; {describe(b, 'b', kind)}; "
                           "convert one so both have the same dtype")
    dev_a, dev_b = device_name(a, kind), device_name(b, kind)
    if dev_a != dev_b:
        raise TiledmmError(f"a and b are on different devices: {describe(a, 'a', kind)}; {describe(b, 'b', kind)}")
    spec = registry.get(kernel or default_kernel(da))
    asked, tile = tile, spec.check_tile(tile)
    opts = dict(options)
    if precision is not None:
        opts["precision"] = precision
    spec.check_call(da, opts, f" (the default kernel for {da} is {default_kernel(da)!r})")
    if spec.check_options is not None:
        spec.check_options(da, opts)
    batch, (M, K, N), res_shape = _result_shape(tuple(a.shape), tuple(b.shape), a, b)
    if asked is None and _backend.emulating():
        tile = spec.emulation_tile(M, N)

    out_kind = None
    if out is not None:
        out_kind = kind_of(out)
        od = dtype_name(out, out_kind)
        if out_kind != kind or tuple(out.shape) != res_shape or od not in SUPPORTED_DTYPES \
                or device_name(out, out_kind) != dev_a:
            raise TiledmmError(f"out must be a {kind} {shape_str(res_shape)} array on {dev_a} (dtype "
                               f"{da}, or another of {list(SUPPORTED_DTYPES)}); got {describe(out, 'out', out_kind)}")
    elif beta != 0.0:
        raise TiledmmError(f"beta={beta} adds beta * out to the product, so it needs out= "
                           f"(a {shape_str(res_shape)} array holding C)")
    work = math.prod(batch) * M * N * K
    if _backend.emulating() and work:
        if spec.emulation_limit is None:
            raise TiledmmError(f"kernel {spec.name!r} needs a GPU; none is in use (emulation)")
        limit = _backend.emulation_limit(spec.emulation_limit)
        if work > limit:
            raise TiledmmError(
                f"{shape_str(a.shape)} @ {shape_str(b.shape)} is {work:,} multiply-adds, "
                f"over the emulation limit of {limit:,} for kernel {spec.name!r}: with no GPU "
                "the kernel runs in a simulator (a Python thread per CUDA thread for the SIMT kernels). "
                "Use smaller matrices, a GPU, or raise TILEDMM_EMULATION_LIMIT if you will wait.")

    host = on_host(a, kind)
    if host and work and spec.preload is not None:
        _preload(spec)            # the kernel family's import runs while the operands are copied or staged
    if plain and not host:
        plan = _plan_for(spec, kind, kernel, precision, a, b)    # the family's short path, bound on first use
        r = plan(a, b, out, alpha, beta) if plan is not None else None
        if r is not None:
            return r
    import torch
    # every device step of the call -- conversion copies, the output, the kernels, the copy back into
    # an out the kernels could not write directly -- runs on the caller's stream
    device = torch.device("cpu") if _backend.emulating() else (
        torch.device("cuda", torch.cuda.current_device()) if host else torch.device(dev_a))
    on_gpu = device.type == "cuda"
    with torch.cuda.device(device) if on_gpu else nullcontext(), \
            _stream_context(kind, stream, device) if on_gpu else nullcontext():
        ta, tb = to_torch(a, kind), to_torch(b, kind)
        if out is not None:
            target, exact = writable_view(out, out_kind)
            if _adapter.internal_overlap(target):
                raise TiledmmError(f"out has overlapping elements (a zero or overlapping stride: strides "
                                   f"{tuple(target.stride())}); pass an array with one element per position")
        else:
            target, exact = torch.empty(res_shape, dtype=ta.dtype, device=ta.device), True
        if target.numel() and K == 0:
            epilogue.fill_scaled(target, beta)
        elif target.numel():
            if host and max_device_bytes is not None or (host and on_gpu and _too_big(ta, tb, target)):
                _out_of_core(spec, tile, opts, ta, tb, target, alpha, beta, max_device_bytes, batch)
            else:
                _compute(spec, tile, opts, ta.to(device), tb.to(device), target, alpha, beta, batch, (M, K, N),
                         res_shape)
        if out is not None and not exact:
            write_back(out, out_kind, target)
    return out if out is not None else from_torch(target, kind, a)


def _compute(spec: KernelSpec, tile, opts, A, B, target, alpha: float, beta: float, batch: tuple,
             mkn: tuple, res_shape: tuple) -> None:
    """target (the result, on any device) = alpha * A @ B + beta * target, A and B on the kernels' device."""
    import torch
    M, K, N = mkn
    A = A if A.dim() > 1 else A.unsqueeze(0)          # vector @ ...: a 1 x K matrix
    B = B if B.dim() > 1 else B.unsqueeze(-1)         # ... @ vector: a K x 1 matrix
    full = batch + (M, N)
    C = target.reshape(full) if target.shape != full else target
    direct = C.device == A.device and C.data_ptr() == target.data_ptr() and \
        not (overlaps(C, A) or overlaps(C, B)) and (spec.casts_out or C.dtype == A.dtype)
    if direct and tuple(C.shape) != full:
        direct = False
    if direct and len(batch) > 1:            # the kernels take one batch dimension: out's must merge
        try:
            C.view(math.prod(batch), M, N)
        except RuntimeError:
            direct = False
    if not direct:                                     # a temporary: out aliases an input, lives elsewhere, ...
        C = torch.empty(full, dtype=target.dtype if spec.casts_out else A.dtype, device=A.device)
        if beta != 0.0:
            C.copy_(target.reshape(full))
    _gemm(spec, tile, opts, A, B, C, alpha, beta, batch, M, K, N)
    if not direct:
        target.copy_(C.reshape(target.shape))


def _gemm(spec: KernelSpec, tile, opts, A, B, C, alpha: float, beta: float, batch: tuple, M: int, K: int,
          N: int) -> None:
    """C (batch..., M, N) = alpha * A @ B + beta * C on the kernels' device."""
    import torch
    nb = math.prod(batch)
    if B.dim() == 2 and A.dim() > 2:               # (batch..., M, K) @ (K, N): one tall 2-D product when it views
        try:
            A2, C2 = A.view(-1, K), C.view(-1, N)
            A, C, batch, nb, M = A2, C2, (), 1, A2.shape[0]
        except RuntimeError:
            if _invariant():       # batch-invariant mode: the rows' kernel whatever A's strides (a batch of
                A2 = A.reshape(-1, K)      # products would take another): a copy of A, one tall product
                T = torch.empty(A2.shape[0], N, dtype=C.dtype, device=C.device)
                if beta != 0.0:
                    T.copy_(C.reshape(-1, N))
                _gemm(spec, tile, opts, A2, B, T, alpha, beta, (), A2.shape[0], K, N)
                C.copy_(T.view(C.shape))
                return
    if batch:
        A3 = A.expand(batch + (M, K)).reshape(nb, M, K) if A.dim() > 2 else A
        B3 = B.expand(batch + (K, N)).reshape(nb, K, N) if B.dim() > 2 else B
        C3 = C.view(nb, M, N) if C.dim() > 2 else C
    else:
        A3, B3, C3 = A, B, C
    native = spec.epilogue or (alpha == 1.0 and beta == 0.0)
    P = C3 if native else torch.empty(C3.shape, dtype=A.dtype, device=A.device)
    kw = {"alpha": alpha, "beta": beta} if spec.epilogue else {}
    if spec.batched or C3.dim() == 2:
        spec.launch(A3, B3, P, tile=tile, opts=opts, **kw)
    else:
        for i in range(nb):
            spec.launch(A3[i] if A3.dim() == 3 else A3, B3[i] if B3.dim() == 3 else B3, P[i], tile=tile,
                        opts=opts, **kw)
    if not native:
        epilogue.apply(C3, P, alpha, beta)


def _preload(spec: KernelSpec) -> None:
    """Run ``spec.preload`` in a daemon thread; what it raises is left for the launch to raise again
    (the launch imports what preload would have)."""
    def run():
        try:
            spec.preload()
        except BaseException:        # noqa: BLE001 -- the launch reports it, in the caller's thread
            pass
    threading.Thread(target=run, name="tiledmm-preload", daemon=True).start()


def _too_big(ta, tb, target) -> bool:
    import torch
    need = sum(t.numel() * t.element_size() for t in (ta, tb, target))
    free, _ = torch.cuda.mem_get_info()
    return need > 0.9 * free


def _out_of_core(spec, tile, opts, ta, tb, target, alpha, beta, max_device_bytes, batch) -> None:
    if batch or ta.dim() != 2 or tb.dim() != 2:
        raise TiledmmError("out-of-core products take 2-D operands; loop over the batch yourself")
    from .outofcore import matmul_out_of_core

    def gemm(a, b, c, al, be):
        _gemm(spec, tile, opts, a, b, c, al, be, (), a.shape[0], a.shape[1], b.shape[1])
    import torch
    acc = torch.float32 if target.dtype in (torch.float16, torch.bfloat16) else None
    matmul_out_of_core(ta, tb, target, alpha=alpha, beta=beta, max_device_bytes=max_device_bytes, gemm=gemm,
                       acc_dtype=acc)


# -- the families' short paths ---------------------------------------------------------------------

_fast_plans: dict[tuple, Any] = {}
_fast_lock = threading.Lock()
tuning.on_mode_change(_fast_plans.clear)   # bound launches chosen under the other tuning mode
# the batch-invariant mode's plans (tiledmm.invariance: a family's plan made in the mode binds the mode's launches)
_invariant_plans: dict[tuple, Any] = {}
_invariant = invariance.get
_planned = False        # whether any plan was made yet (matmul's guard: until then no lookup at all)


def _plan_for(spec: KernelSpec, kind: str, kernel, precision, a, b):
    """The family's short-path plan for calls like this one (validated by the full path), made on
    first use and kept under the key ``matmul``'s guard looks up; None where the family has none."""
    global _planned
    key = (type(a), type(b), a.dtype, b.dtype, kernel, precision)
    plans = _invariant_plans if _invariant() else _fast_plans
    plan = plans.get(key)
    if plan is None and spec.fast_plan is not None:
        plan = spec.fast_plan(kind, a, precision)
        if plan is not None:
            with _fast_lock:
                plan = plans.setdefault(key, plan)
                _planned = True
    return plan


def kernel_names() -> list[str]:
    """Names of every registered kernel, in the order of the argument."""
    return registry.names()
