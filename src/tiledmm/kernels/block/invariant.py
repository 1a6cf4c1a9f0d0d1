"""The Triton family's plans in batch-invariant mode (``tiledmm.invariance``).

A row of C is bitwise independent of M when the kernel that computes it, its config (tile, K
step, stages, warps) and so its reduction order over K are the same for every M. The normal
dispatcher (``matmul.py``) does not promise that: it keys plans by log2 classes of M and picks
split-K for few rows, swapped few-row tiles, the Gluon kernel's tail split, the shipped table's
and the tuning store's per-class choices. In this mode a plan is keyed by the call's exact N and
K, its dtypes, precision and operand layout -- never M, nor the batch size -- and resolves, once,
to one variant and config:

* the variants offered are those with ``Variant.invariant`` (the blocked, persistent TMA and
  Gluon kernels and their K-major-copy forms), each with its configs that split nothing; a batch
  (3-D operands) only those that take any batch in one plan (``Variant.splits_batch``: the
  others' applicability depends on M or the batch);
* the config is the one whose modelled time (``heuristics.estimate_us``), relative to the best
  candidate's at each M of ``LADDER``, has the least geometric mean over the ladder: one choice
  that serves few rows and many (the model sees each tile's waste on few rows and its waves on
  many). The tuning store, ``TILEDMM_TUNE``, the shipped tables and the Gluon kernel's ownership
  rules are not consulted.

The short path (``shortpath.TorchPlan``) keeps the mode's bound launches apart from the normal
ones and keys them by exact N and K too, so a repeat call launches what this module chose.
"""
from __future__ import annotations

import math
import threading
from typing import Callable

from ..._backend import emulating
from . import heuristics as H
from . import dispatch as D
from . import variants as V
from ._vcommon import device, index_of, kind_of

# the row counts the choice is judged at, each alike: the llm bench suite's (bench.SUITES), a decode step's
# few rows to a long prompt's many
LADDER = (1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192)

_plans: dict[tuple, Callable] = {}     # written under _lock; read without
_choices: dict[tuple, dict] = {}       # key -> {"variant", "config", "score", "N", "K"} (reports, tests)
_lock = threading.Lock()


def key_of(a, b, c, precision: str, alpha: float, beta: float, passes: int = 0) -> tuple:
    """The mode's plan key: everything of the call but M and the batch size (``matmul.plan_key``'s
    layout fields, then N and K themselves)."""
    return (a.dtype, c.dtype, precision, a.dim(), b.dim(), a.stride(-1) == 1, a.stride(-2) == 1,
            b.stride(-1) == 1, b.stride(-2) == 1, c.stride(-1) == 1, D._aligned(a, b, c), D._rows128(a, b, c),
            alpha == 1.0, beta == 0.0, passes, a.shape[-1], b.shape[-1], index_of(c))


def resolved(a, b, c, precision: str, alpha: float, beta: float, passes: int = 0) -> Callable:
    """The mode's launch for this call, ``f(a, b, c, alpha=, beta=)`` (chosen on the key's first use)."""
    key = key_of(a, b, c, precision, alpha, beta, passes)
    fn = _plans.get(key)
    if fn is None:
        with _lock:
            fn = _plans.get(key) or _resolve(key, a, b, c, precision, alpha, beta, passes)
    return fn


class _Rows:
    """An operand's stand-in with ``rows`` rows (what ``Traits.copies`` reads of it: sizes and strides),
    so the copies a variant would make are counted at each M of the ladder, not at the call's."""

    def __init__(self, t, rows: int):
        self._t, self._n = t, rows * t.shape[-1]

    def numel(self) -> int:
        return self._n

    def __getattr__(self, name):
        return getattr(self._t, name)


def offered(a, b, c, precision: str, alpha: float, beta: float) -> list:
    """The variants the mode may take for this call (``Variant.invariant``, applicable, a batch only
    where ``splits_batch``)."""
    batched = a.dim() == 3 or b.dim() == 3
    return [v for v in V.ALL if v.invariant is not None and (v.splits_batch or not batched)
            and v.applicable(a, b, c, precision, alpha, beta)]


def candidates(vs: list, a, b, c, precision: str, passes: int, dev: H.Device) -> list[tuple]:
    """(variant, candidate, copies(rows)) for every invariant config of ``vs`` that fits ``dev``."""
    out = []
    kind = kind_of(precision)
    for v in vs:
        for cfg in v.invariant(D._configs(v, kind, a.element_size(), c.element_size(), dev)):
            if cfg.get("SWAP") or cfg.get("ODD_ROWS"):
                continue
            cd = H.Candidate(D.candidate_name(v.name, cfg), dict(cfg), v.traits, 0, v,
                             D._repeats_bound(v, a, b, c))

            def copies(rows: int, v=v) -> int:
                n = v.traits.copies(_Rows(a, rows), b, c, precision) if v.traits.copies else 0
                if passes and not v.epilogue:
                    n += passes * rows * b.shape[-1] * c.element_size()
                return n
            out.append((v, cd, copies))
    return out


def choose(cands: list[tuple], problem: Callable[[int], H.Problem], dev: H.Device,
           ladder: tuple = LADDER) -> tuple:
    """(variant, candidate, score): the candidate with the least geometric mean over ``ladder`` of its
    modelled time relative to the best candidate's at that M (``problem(M)``: the call at M rows).
    Ties: the earlier candidate (variants in ``V.ALL``'s order, each one's configs in its table's)."""
    times = []
    for rows in ladder:
        p = problem(rows)
        t = [H._floored(H.estimate_us(cd.config, p, cd.traits, dev, cp(rows)), cd)[0]
             if cd.traits.modelled and dev.capability >= cd.traits.capability else math.inf
             for _, cd, cp in cands]
        best = min(t)
        times.append([x / best for x in t])
    scores = [math.exp(sum(math.log(col[i]) for col in times) / len(ladder)) for i in range(len(cands))]
    i = min(range(len(cands)), key=lambda j: (round(scores[j], 4), j))
    return (*cands[i][:2], scores[i])


def _resolve(key: tuple, a, b, c, precision: str, alpha: float, beta: float, passes: int) -> Callable:
    dev = device(index_of(c))
    vs = offered(a, b, c, precision, alpha, beta)
    cands = candidates(vs, a, b, c, precision, passes, dev)
    if not cands:      # (none fits: the blocked kernel's first config, which every device runs)
        cands = [(V.BLOCKED, H.Candidate("blocked", dict(V.BLOCKED.configs(kind_of(precision))[0]), V.BLOCKED.traits),
                  lambda rows: 0)]
    base = D._problem(a, b, c, precision)

    def problem(rows: int) -> H.Problem:
        return H.Problem(rows, base.N, base.K, 1, base.kind, base.esize, base.out_esize, base.b_kmajor,
                         base.aligned, base.rows128)
    v, cd, score = choose(cands, problem, dev, LADDER if not emulating() else (1, 16, 64))
    fn = D._bind(v, precision, dict(cd.config))
    _plans[key] = fn
    _choices[key] = {"variant": v.name, "config": dict(cd.config), "score": score, "N": base.N, "K": base.K}
    return fn


def choices() -> dict:
    """The mode's resolved keys -> {"variant", "config", "score", "N", "K"} (for reports and tests)."""
    with _lock:
        return dict(_choices)


def forget() -> None:
    """Drop the mode's plans (tests; a device's tables changed)."""
    with _lock:
        _plans.clear()
        _choices.clear()
