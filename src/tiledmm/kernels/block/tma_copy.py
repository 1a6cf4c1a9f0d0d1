"""Variant 'tma-copy': the persistent TMA kernel under the COPY policy (policies.py), for operands the
copy engine cannot take as given.

The TMA needs unit inner strides and 16-byte aligned row strides and bases; wgmma needs
32-bit operands K-major. Where an operand breaks a rule (odd K or N in 16-bit, a row-major B
in tf32, a transposed view), this variant copies just that operand, inside the call (its cost
is in every timing), into a buffer whose row stride is rounded up to 16 bytes -- the padding
is never read: the descriptor keeps the true shape, and the engine zero-fills past it -- and
then runs the persistent TMA kernel (``tma_persistent.launch``, variant 'tma'). A C that breaks
the rules is computed into an aligned buffer and copied back (read first when beta != 0).
Compare with kmajor_cache.py, which pays B's copy once per reused weight.
"""
from __future__ import annotations

from . import _vcommon as V
from . import configs as C
from . import tma_persistent as T
from ._vcommon import hopper, kind_of
from .heuristics import Traits
from .policies import COPY, variant_name
from .transpose import transpose_into

KERNEL, POLICY = "tma", COPY
NAME = variant_name(KERNEL, POLICY)       # "tma-copy"
CONFIGS = C.TMA


def heuristic(M: int, N: int, K: int, kind: str, sms: int | None = None) -> dict:
    return T.heuristic(M, N, K, kind, sms)


def _aligned_empty(rows: int, cols: int, like):
    """(rows, cols) view of a buffer whose row stride is cols rounded up to 16 bytes."""
    import torch
    per = 16 // like.element_size()
    ld = -(-cols // per) * per
    return torch.empty((rows, ld), device=like.device, dtype=like.dtype)[:, :cols]


def applicable(a, b, c, precision, alpha=1.0, beta=0.0) -> bool:
    if not hopper(a) or kind_of(precision) == "ieee":
        return False
    if a.dim() != 2 or b.dim() != 2 or c.dim() != 2 or not (a.dtype == b.dtype == c.dtype):
        return False
    return a.is_cuda and 0 not in a.shape and 0 not in b.shape


def prepare(a, b, c, precision):
    """(a, b, c_work): operands the TMA kernel takes; c_work is c itself when c is fine."""
    if not V.tma_ok(a):
        a2 = _aligned_empty(a.shape[0], a.shape[1], a)
        a2.copy_(a)
        a = a2
    kmajor_ok = b.stride(0) == 1 and V.tma_ok(b.T)
    if kind_of(precision) == "tf32" or (not V.tma_ok(b) and not kmajor_ok):
        if not kmajor_ok:
            bt = _aligned_empty(b.shape[1], b.shape[0], b)   # (N, K): B^T row-major = B K-major
            transpose_into(b, bt)
            b = bt.T
    cw = c if V.tma_ok(c) else _aligned_empty(c.shape[0], c.shape[1], c)
    return a, b, cw


def copies(a, b, c, precision) -> int:
    """Bytes ``prepare`` copies for this call (the model's extra traffic)."""
    n = 0 if V.tma_ok(a) else a.numel() * a.element_size()
    kmajor_ok = b.stride(0) == 1 and V.tma_ok(b.T)
    if (kind_of(precision) == "tf32" or not V.tma_ok(b)) and not kmajor_ok:
        n += b.numel() * b.element_size()
    return n + (0 if V.tma_ok(c) else 2 * c.numel() * c.element_size())


TRAITS = Traits(persistent=True, tma_store=True, copies=copies, capability=(9, 0), host_us=200.0)   # H100 probe


def launch(a, b, c, *, precision, alpha=1.0, beta=0.0, config=None) -> None:
    a2, b2, cw = prepare(a, b, c, precision)
    if cw is not c and beta != 0.0:
        cw.copy_(c)
    T.launch(a2, b2, cw, precision=precision, alpha=alpha, beta=beta, config=config)
    if cw is not c:
        c.copy_(cw)      # (a torch op: it moves c's version counter itself)
