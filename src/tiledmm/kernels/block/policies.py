"""Operand policies: how a kernel is given its operands.

A variant (``variants.py``) is a kernel under one policy. Its public name -- what ``variant=`` takes,
what the tuning store and the shipped tables record -- is the kernel's, with the policy's name after
a hyphen where the policy is not AS_IS: the TMA kernel is "tma", "tma-kmajor", "tma-copy" and
"tma-kcache".

    AS_IS   the operands as the caller gave them (the kernel's own rules of what it takes)
    KMAJOR  K-major copies of A and B made inside the call (``variants.with_kmajor``): wgmma reads
            32-bit operands K-major only; the copies' cost is in every call
    COPY    only the operands the kernel cannot take as given, copied inside the call into 16-byte
            aligned buffers, C computed into one and copied back where it must be (``tma_copy.py``)
    KCACHE  B's K-major copy kept across calls (``kmajor_cache.py``), keyed by torch's version
            counter: opt-in only (a forced ``variant=``), since writes from outside torch (CuPy,
            numba, a raw pointer) do not move that counter

Where a policy copies nothing for a call, the call is its kernel's as given: the dispatcher then runs
the kernel's AS_IS variant, whose repeat calls are one bound launch (``dispatch._as_given``).
"""
from __future__ import annotations

AS_IS, KMAJOR, COPY, KCACHE = "as-is", "kmajor", "copy", "kcache"
POLICIES = (AS_IS, KMAJOR, COPY, KCACHE)
OPT_IN = frozenset({KCACHE})      # policies whose variants run only when forced (never chosen)


def variant_name(kernel: str, policy: str) -> str:
    """The public name of ``kernel`` under ``policy``: "tma" (AS_IS), "tma-copy", ..."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {list(POLICIES)}, got {policy!r}")
    return kernel if policy == AS_IS else f"{kernel}-{policy}"
