"""The dispatcher's rules: calls a variant owns, variants a call is not offered to -- as data.

``RULES`` is a table, one ``Rule`` a row: conditions on the call (one product or a batch, the
precision's kind, least M, K and multiply-adds) and what they mean for one variant -- OWNS: the
call is the variant's (the model's pick among its candidates; the shipped table is not asked),
NOT_OFFERED: the no-timing pick leaves the variant out. ``ruling`` reads the table for a call, row
by row; ``dispatch.SOURCES`` places the rules' answer after the store and timing, before the shipped
table and the model. A new kernel family with calls of its own adds its rows here.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import heuristics as H
from . import variants as V

OWNS = "owns"                  # the call is the variant's: the model's pick among its candidates, not the table's
NOT_OFFERED = "not offered"    # the no-timing pick leaves the variant out (timing and the store still may take it)


@dataclass(frozen=True)
class Rule:
    """One row of ``RULES``: a call that meets every condition -- one product or a batch (``batched``:
    batch > 1), a precision kind in ``kinds`` (none: any), at least ``min_m`` rows, ``min_k`` depth and
    ``min_macs`` multiply-adds (batch * M * N * K) -- is one ``variant`` ``does`` (OWNS, NOT_OFFERED)."""
    variant: str
    does: str
    batched: bool
    kinds: tuple = ()
    min_m: int = 0
    min_k: int = 0
    min_macs: int = 0
    why: str = ""

    def meets(self, p: H.Problem) -> bool:
        return (p.batch > 1) == self.batched and (not self.kinds or p.kind in self.kinds) and p.M >= self.min_m \
            and p.K >= self.min_k and p.batch * p.M * p.N * p.K >= self.min_macs


# 16-bit products the Gluon kernel takes, of at least GLUON_OWNS_FROM_M rows and GLUON_OWNS_FROM_MACS
# multiply-adds, are its own: the model's pick is the Gluon kernel with its own config, over the shipped
# table. The table's 16-bit entries were timed before the kernel's tail split, and where they name a
# Triton-level variant there it ran at 0.86-0.93x torch on shapes the Gluon kernel ran at 0.97-1.08x
# (8192^3, 3000x2000x4000, 2048x11008x4096; H100, docs/history.md). Below either bound the
# table stands: at 32-48 rows its few-row kernels ran the random-M loop at 0.90-0.92x torch against the
# Gluon kernel's 0.60-0.62x, and products of a few microseconds are host-bound, where the table's timings
# (which count host time) are the better guide.
GLUON_OWNS_FROM_M = 64
GLUON_OWNS_FROM_MACS = 2 ** 32
# A batch (every product's M a tile multiple: gluon_gemm.batch_fits) of at least GLUON_OWNS_FROM_MACS
# multiply-adds is the Gluon kernel's own in tf32, and in 16-bit from GLUON_BATCH_FROM_K on: one launch over
# all products' tiles. Measured (H100, docs/history.md) against the table's blocked kernel,
# x torch: tf32 64x512^3 0.53 -> 1.03, 16x1024^3 0.44 -> 1.10; 16-bit 16x1024^3 0.89 -> 0.99 (bf16),
# 0.92 -> 1.11 (fp16); products with K or N = 64 at 0.41-0.68 against the blocked kernel's 1.3: other batches
# do not offer the Gluon kernel to the no-timing pick at all (timing still may take it). K from 512, not
# 1024 (an earlier build of the kernel ran 64x512^3 bf16 at 0.70): through
# tiledmm.matmul, two alternating rounds, 64x512^3 0.82-0.85 -> 1.00-1.01, 32x512^3 0.84-1.01 -> 0.99-1.11,
# 128x512x768x512 0.83-0.85 -> 0.95-0.97, bf16 and fp16 (docs/history.md).
GLUON_BATCH_FROM_K = 512

_GLUON = V.GLUON.name
RULES: tuple[Rule, ...] = (
    Rule(_GLUON, OWNS, batched=False, kinds=("16bit",), min_m=GLUON_OWNS_FROM_M, min_macs=GLUON_OWNS_FROM_MACS,
         why="0.97-1.08x torch where the table's Triton-level picks ran 0.86-0.93x"),
    Rule(_GLUON, OWNS, batched=True, kinds=("tf32",), min_macs=GLUON_OWNS_FROM_MACS,
         why="one launch over every product's tiles: 64x512^3 0.53 -> 1.03x torch"),
    Rule(_GLUON, OWNS, batched=True, min_k=GLUON_BATCH_FROM_K, min_macs=GLUON_OWNS_FROM_MACS,
         why="16-bit 16x1024^3 0.89 -> 0.99x torch (bf16), 64x512^3 0.82 -> 1.00x"),
    Rule(_GLUON, NOT_OFFERED, batched=True,
         why="its other batches ran at 0.41-0.70x torch (few K steps; K or N = 64)"),
)


def ruling(p: H.Problem, options: dict, dev) -> tuple:
    """What ``RULES`` say of a call, row by row: (the first owning row's pick -- the model's among its
    variant's candidates in ``options``; a row whose variant has none there says nothing -- or None,
    the names of the variants the rows met before it leave out of the no-timing pick)."""
    left_out = set()
    for rule in RULES:
        if not rule.meets(p):
            continue
        if rule.does == OWNS:
            own = own_pick(options, rule.variant, p, dev)
            if own is not None:
                return own, frozenset(left_out)
        else:
            left_out.add(rule.variant)
    return None, frozenset(left_out)


def own_pick(options: dict, variant: str, p: H.Problem, dev) -> str | None:
    """The model's pick among ``variant``'s candidates in ``options``, or None where it has none."""
    own = [cd for cd in options.values() if cd.variant is not None and cd.variant.name == variant]
    return H.pick(own, p, dev).name if own else None
