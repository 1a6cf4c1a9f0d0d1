"""Batch-invariant mode: each output row independent of how many rows are computed with it.

``with tiledmm.batch_invariant(): y = tiledmm.matmul(x, w)`` (or ``TILEDMM_BATCH_INVARIANT=1`` in
the environment, read once when tiledmm is imported) makes every row of ``y`` bitwise the same
whatever the number of rows M of ``x`` and whatever the other rows hold, and the same from run to run
on one GPU with one tiledmm, Triton and driver. A serving or reinforcement-learning job then gets the
same logits for a sequence whether it ran alone or batched with others (the "batch-invariant kernels"
of the defeating-nondeterminism work, vLLM's batch-invariant mode).

What it takes: one reduction order per (N, K, dtype, precision, operand layout) -- one kernel and one
config whose tile, K step and loop order do not depend on M -- no split of K that follows M, no
stream-K and no atomics. In this mode the Triton family's dispatcher (``kernels/block/invariant.py``)
picks that config from the call's N, K and layout only, ignoring the tuning store, ``TILEDMM_TUNE``,
the shipped tables and the size-dependent rules that normally choose among split-K, few-row and Gluon
kernels. Split-K stays on offer with its number of K slices fixed by the config (so by N and K), its
partial sums added in split order by a second kernel. The price is speed where one config cannot
serve few rows and many alike; see ``scripts/bench_batch_invariant.py`` (measured) and
``scripts/model_batch_invariant.py`` (the model's picks and predicted cost, on the CPU). The SIMT
ladder's kernels (float64's default) sum each output element over k in one order whatever their
tile, so they are invariant as they are; in this mode their autotuned rungs take their first
configuration, as with tuning off.

The mode is a context variable: it nests, each thread starts with the environment's default, and
``with batch_invariant(False):`` turns it off inside an outer ``with batch_invariant():``. A call with
an explicit ``variant=`` or ``config=`` runs what it names.
"""
from __future__ import annotations

import contextlib
import contextvars
import os

_TRUE = ("1", "true", "yes", "on")


def _from_env() -> bool:
    return os.environ.get("TILEDMM_BATCH_INVARIANT", "").strip().lower() in _TRUE


_state: contextvars.ContextVar[bool] = contextvars.ContextVar("tiledmm_batch_invariant", default=_from_env())
get = _state.get     # the one read of the mode (api.matmul's guard reads it on every call)


def active() -> bool:
    """Whether calls in this context are batch-invariant."""
    return _state.get()


@contextlib.contextmanager
def batch_invariant(enabled: bool = True):
    """Within the ``with`` block (this thread or task only), tiledmm's products are batch-invariant
    (``enabled=False``: not, inside an outer block or under ``TILEDMM_BATCH_INVARIANT=1``)."""
    token = _state.set(bool(enabled))
    try:
        yield
    finally:
        _state.reset(token)
