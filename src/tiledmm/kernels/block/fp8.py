"""The FP8 kernel family: the scaled product ``triton-fp8`` and the quantisation kernels.

Importing this module registers the kernel with what a call is checked against and imports
nothing of Triton; the kernels (``fp8_kernels.py``) load on the first launch. ``tiledmm.fp8``
(``tiledmm.scaled_matmul``, ``tiledmm.quantize_fp8``) validates a call and reduces it to this
family's one problem:

    launch(a, b, c, tile=None, opts={scale_a, scale_b, bias, act, fast_accum, blockwise, config})
        c = act((a * scale_a) @ (b * scale_b) + bias), a (B, M, K) and b (B, K, N) float8, c (B, M, N)
        bf16/fp16/fp32, the scales 3-D views whose strides index them (see fp8_kernels.launch)

In emulation the kernels run in Triton's interpreter, which computes fp8 products exactly and
accumulates in fp32 (no tensor-core accumulator to promote from: promotion changes nothing there).
"""
from __future__ import annotations

from ... import registry
from ...registry import KernelSpec, register

FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
OPTIONS = ("scale_a", "scale_b", "bias", "act", "fast_accum", "blockwise", "config", "record")


def _kernels():
    from . import fp8_kernels
    return fp8_kernels


def _quiet(fn, *args, **kw):
    """Run a launch; in emulation with distinct operand addresses (the interpreter keys its copies
    by address) and IEEE arithmetic without numpy's warnings (NaN and Inf are legal inputs)."""
    from ..._backend import emulating
    if not emulating():
        return fn(*args, **kw)
    import numpy as np
    seen, fixed = set(), []
    for t in args:
        if hasattr(t, "data_ptr") and t.numel():
            if t.data_ptr() in seen:
                t = t.clone()
            seen.add(t.data_ptr())
        fixed.append(t)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return fn(*fixed, **kw)


def _launch(a, b, c, *, tile=None, opts: dict) -> dict:
    """The spec's launch (``tile`` is not taken); returns the config it ran. ``opts["record"]``: a
    list for ``bind`` (see fp8_kernels.launch)."""
    K = _kernels()
    return _quiet(K.launch, a, b, c, opts["scale_a"], opts["scale_b"], opts.get("bias"),
                  blockwise=bool(opts.get("blockwise")), fast_accum=bool(opts.get("fast_accum")),
                  act=opts.get("act", "none"), config=opts.get("config"), record=opts.get("record"))


def bind(record: list):
    """A bound repeat launch of a recorded one (``fp8_kernels.bind``), or None."""
    from ..._backend import emulating
    return None if emulating() else _kernels().bind(record)


def quantize(x, q, s, kind: str, fp8_name: str) -> None:
    """q, s = x's fp8 values and scales (``fp8_kernels.quantize``; x, q, s 3-D)."""
    _quiet(_kernels().quantize, x, q, s, kind=kind, fp8_name=fp8_name)


SPEC: KernelSpec = register(KernelSpec(
    name="triton-fp8", family="block",
    summary="Triton FP8 scaled GEMM (e4m3/e5m2; per tensor, rowwise, 1x128 x 128x128 blockwise scales; fp32 "
            "accumulation promoted every 128 K); through tiledmm.scaled_matmul",
    dtypes=FP8_DTYPES, launch=_launch, batched=True, casts_out=True, options=OPTIONS, emulation_limit=2 ** 24,
    order=55, block_tile=lambda tile: (128, 128)))

__all__ = ["SPEC", "FP8_DTYPES", "quantize", "bind", "registry"]
