"""Variant 'tma-kcache': the persistent TMA kernel under the KCACHE policy (policies.py): tf32 with a
row-major B, through a cached K-major copy of B.

wgmma reads 32-bit operands K-major only, so a tf32 product with a row-major (N-major) B
either re-lays B through registers in every K step (the blocked kernel's SWAP = 2: about half
the speed) or copies B to K-major first (64 MB at 4096^2: ~40 us per call). A weight that is
reused across calls need pay that copy once: this module keeps the K-major copy, keyed by

    (data_ptr, torch's version counter, shape, strides, dtype, device)

with a weak reference to the source's storage. The version counter moves on every in-place
torch op on the tensor or any view of it (and tiledmm's variant launches bump it on the
outputs they write while this cache holds a copy: ``_vcommon.mark_written``, ``holds_copies``),
so a modified tensor is copied again; the storage weakref drops the entry
when the memory is freed (so a new tensor at the same address cannot hit a stale copy).
Limits: writes that bypass torch (another library writing through a raw pointer / DLPack)
do not move the version counter; such callers must not rely on the cache (clear() empties it).
Capacity: MAX_ENTRIES copies and MAX_BYTES in all, least recently used dropped first.
Thread-safe: the cache is read and changed under one lock (the copy itself is made outside it).
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from ... import _adapter
from . import _vcommon as V
from . import configs as C
from . import tma_persistent as T
from ._vcommon import kind_of
from .policies import KCACHE, variant_name
from .transpose import k_major

KERNEL, POLICY = "tma", KCACHE
NAME = variant_name(KERNEL, POLICY)       # "tma-kcache"
MAX_ENTRIES = 16
MAX_BYTES = 4 << 30

_cache: "OrderedDict[tuple, tuple]" = OrderedDict()
_lock = threading.Lock()
stats = {"hits": 0, "misses": 0}


def _key(t) -> tuple:
    return (t.data_ptr(), _adapter.version_counter(t), tuple(t.shape), tuple(t.stride()), str(t.dtype),
            str(t.device))


def kmajor(b):
    """A K-major (column-major) copy of the 2-D (K, N) tensor b, reused while b is unchanged."""
    key = _key(b)
    with _lock:
        for k in [k for k, (ref, _) in _cache.items() if ref.expired()]:
            del _cache[k]
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            stats["hits"] += 1
            return hit[1]
        stats["misses"] += 1
    copy = k_major(b, -2)   # (K, N) with strides (1, K)
    with _lock:
        _cache[key] = (_adapter.storage_weakref(b), copy)
        total = sum(c.numel() * c.element_size() for _, c in _cache.values())
        while len(_cache) > MAX_ENTRIES or (total > MAX_BYTES and len(_cache) > 1):
            _, (_, old) = _cache.popitem(last=False)
            total -= old.numel() * old.element_size()
    return copy


def clear() -> None:
    with _lock:
        _cache.clear()


def holds_copies() -> bool:
    """Whether the cache holds a copy: only then need a launch move its output's version counter (a
    write our kernels make is seen by torch no other way), and only then does ``_vcommon.mark_written``."""
    return bool(_cache)


V.watch_versions(holds_copies)


CONFIGS = {"16bit": [], "tf32": C.TMA["tf32"], "ieee": []}


def heuristic(M: int, N: int, K: int, kind: str) -> dict:
    return T.heuristic(M, N, K, kind)


def applicable(a, b, c, precision, alpha=1.0, beta=0.0) -> bool:
    """tf32 on Hopper, 2-D, A and C row-major, B row-major (a K-major B goes to variant 'tma'
    directly) with K a multiple of 4 (the copy's rows, K * 4 bytes, 16-byte aligned)."""
    if kind_of(precision) != "tf32" or not V.hopper(a):
        return False
    if a.dim() != 2 or b.dim() != 2 or c.dim() != 2 or not (a.dtype == b.dtype == c.dtype):
        return False
    if b.stride(1) != 1 or (b.stride(0) == 1 and b.shape[1] > 1) or b.shape[0] % 4 or 0 in b.shape:
        return False
    return V.tma_ok(a, c) and a.is_cuda and b.is_cuda


def launch(a, b, c, *, precision, alpha=1.0, beta=0.0, config=None) -> None:
    T.launch(a, kmajor(b), c, precision=precision, alpha=alpha, beta=beta, config=config)
