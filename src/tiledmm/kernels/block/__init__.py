"""Block kernels in Triton (and Gluon): the fast path.

Importing the family registers the ``triton`` kernel (and ``triton-grouped``, ``grouped.py``'s) with what a call is checked against -- its
dtypes, options and the precision check -- and imports nothing of Triton. The dispatcher
(``dispatch.py``), the short path (``shortpath.py``) and Triton itself (about 0.2 s to import) load
on the spec's first launch or short-path plan, or earlier in a thread: ``load`` is the spec's
``preload``, which ``tiledmm.matmul`` starts for host operands, so the import runs while they are
copied to the GPU, or planned and staged out of core. Loading amends the spec with the
dispatcher's launch, the short path and, in emulation, operands at distinct addresses (Triton's
interpreter keys its copies by address: two storages at one address clash) and IEEE arithmetic
without numpy's warnings (NaN and Inf inputs are legal: they propagate).
"""
from __future__ import annotations

import threading

from ... import registry
from ..._arrays import TiledmmError
from ...registry import KernelSpec, register

BLOCK_DTYPES = ("float32", "float16", "bfloat16")
PRECISIONS = {"float32": ("ieee", "tf32"), "float16": (None,), "bfloat16": (None,)}


def check_precision(dtype: str, precision: str | None) -> str:
    """The precision a call runs at ("ieee", "tf32", or "none" for 16-bit), or a TiledmmError."""
    allowed = PRECISIONS.get(dtype, (None,))
    if precision is None:
        return allowed[0] or "none"
    if precision not in allowed or allowed == (None,):
        raise TiledmmError(f"precision {precision!r} is not available for {dtype} inputs "
                           f"(float32 takes 'ieee' or 'tf32'; bfloat16/float16 take none)")
    return precision


_loaded: list[KernelSpec] = []      # the spec with the dispatcher's hooks, once loaded
# Two callers can both find _loaded empty (the preload thread and the launch it races): both import (the
# second waits in the import for the first), but only one may amend, or the registry ends up holding the
# second caller's spec while load() returns the first's. Held only around the amend, never over an import,
# so no import in another thread can wait on it while it waits on that import.
_amend_lock = threading.Lock()


def load() -> KernelSpec:
    """Import the dispatcher, the short path and Triton, and put their hooks on the spec (once;
    from any thread: a second caller waits for the first and gets the same spec). Returns that spec."""
    if _loaded:
        return _loaded[0]
    from ..._backend import emulating
    emulation = emulating()                 # decided before Triton is imported (its interpreter)
    from . import dispatch, shortpath
    launch = dispatch.launch_spec
    if emulation:
        launch = _distinct_operands(launch)
    with _amend_lock:
        if not _loaded:
            _loaded.append(registry.amend("triton", launch=launch, fast_plan=shortpath.fast_plan, preload=None))
    return _loaded[0]


def _launch(a, b, c, **kw) -> None:
    load().launch(a, b, c, **kw)


def _fast_plan(kind: str, a, precision):
    return load().fast_plan(kind, a, precision)


def _distinct_operands(launch):
    import numpy as np

    def run(a, b, c, **kw):
        if a.data_ptr() == b.data_ptr() and a.numel():
            b = b.clone()
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):   # the interpreter runs numpy here
            launch(a, b, c, **kw)
    return run


SPEC: KernelSpec = register(KernelSpec(
    name="triton", family="block",
    summary="Triton block-tiled GEMM: masked (zero-fill) tiles, tensor cores, TMA-persistent and split-K "
            "variants, chosen per shape class",
    dtypes=BLOCK_DTYPES, launch=_launch, batched=True, epilogue=True, casts_out=True,
    options=("precision", "variant", "config"), emulation_limit=2 ** 24, order=50,
    check_options=lambda dtype, opts: check_precision(dtype, opts.get("precision")),
    fast_plan=_fast_plan, preload=load,
    block_tile=lambda tile: (tile or 128, tile or 128)))


def _grouped_launch(a, b, c, **kw) -> None:
    from . import grouped
    grouped.launch_spec(a, b, c, **kw)


# The grouped kernel (grouped.py; tiledmm.grouped_matmul's, for Mixture-of-Experts layers) in the matmul
# contract: a plain or batched product as equal groups, so the harness, the fuzzer and the benchmark reach it.
GROUPED_SPEC: KernelSpec = register(KernelSpec(
    name="triton-grouped", family="block",
    summary="Triton grouped GEMM (Mixture-of-Experts, tiledmm.grouped_matmul): one persistent launch walks every "
            "group's tiles, offsets read on the device; here a plain or batched product as equal groups",
    dtypes=BLOCK_DTYPES + ("float64",), launch=_grouped_launch, batched=True, casts_out=True,
    options=("precision", "config"), emulation_limit=2 ** 18, order=55,
    check_options=lambda dtype, opts: check_precision(dtype, opts.get("precision")),
    block_tile=lambda tile: (tile or 128, tile or 128)))


from . import fp8  # noqa: E402,F401  (registers the FP8 family's kernel, 'triton-fp8'; imports no Triton)
