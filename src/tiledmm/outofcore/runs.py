"""Helpers for runs of out-of-core products on random operands (the CLI's ``tiledmm outofcore``,
benchmarks/outofcore.py): fast random fills of big host matrices, and a check of sampled
rows and columns of the result against float64."""
from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

FILL_CHUNK = 32 << 20


def row_chunks(t) -> list:
    """(index, first row, end row) of row chunks of about FILL_CHUNK bytes of a 2-D tensor."""
    per = max(1, FILL_CHUNK // max(1, t.shape[1] * t.element_size()))
    return [(i, r, min(r + per, t.shape[0])) for i, r in enumerate(range(0, t.shape[0], per))]


def fill_random(t, seed: int, *, nan: bool = False, advance=None) -> None:
    """Standard-normal values (or NaN) into a 2-D CPU torch tensor (numpy arrays through torch.from_numpy),
    chunk by chunk on a pool of threads (torch's kernels release the GIL): a 32 GB operand in seconds,
    not minutes. Each chunk's values depend on (seed, chunk index) alone, not on the thread count."""
    def work(chunk):
        i, r0, r1 = chunk
        if nan:
            t[r0:r1].fill_(float("nan"))
        else:
            t[r0:r1].normal_(generator=torch.Generator().manual_seed(seed * 1_000_003 + i))
        if advance:
            advance()
    with ThreadPoolExecutor(min(16, os.cpu_count() or 2)) as ex:
        list(ex.map(work, row_chunks(t)))


def sample_index(n: int, block: int, count: int, rng):
    """About ``count`` sorted indices below n: both ends and the block edges (spread out), the rest at random."""
    edges = sorted({0, n - 1} | {e + d for e in range(block, n, block) for d in (-1, 0)})
    if len(edges) > count // 2:
        edges = [edges[i] for i in np.linspace(0, len(edges) - 1, max(count // 2, 2)).astype(int)]
    rest = rng.choice(n, size=min(n, max(0, count - len(edges))), replace=False)
    return np.unique(np.concatenate([np.array(edges, dtype=np.int64), rest.astype(np.int64)]))


def check_sampled(a, b, c, plan, rows: int, cols: int, seed: int = 0) -> tuple:
    """(relative Frobenius error, rows, columns) of sampled rows x columns of c = a @ b against float64,
    the plan's block edges among them; NaN anywhere in the sample (C unwritten) counts as infinite."""
    from .. import _backend
    rng = np.random.default_rng(seed)
    (m, k), n = a.shape, b.shape[1]
    get = plan.get if isinstance(plan, dict) else functools.partial(getattr, plan)   # a Plan or stats["plan"]
    bm, bn = (get("bn"), get("bm")) if get("transposed") else (get("bm"), get("bn"))
    ri, ci = (torch.from_numpy(sample_index(d, blk, cnt, rng)) for d, blk, cnt in ((m, bm, rows), (n, bn, cols)))
    dev = "cpu" if _backend.emulating() else "cuda"
    ar = a.index_select(0, ri).to(dev, torch.float64)
    ref = torch.zeros(len(ri), len(ci), dtype=torch.float64, device=dev)
    for k0 in range(0, k, 8192):                       # B's sampled columns, a K-slab at a time
        ref += ar[:, k0:k0 + 8192] @ b[k0:k0 + 8192].index_select(1, ci).to(dev, torch.float64)
    got = c.index_select(0, ri).index_select(1, ci).to(dev, torch.float64)
    if bool(torch.isnan(got).any()):
        return float("inf"), len(ri), len(ci)
    return float((got - ref).norm() / ref.norm().clamp_min(1e-300)), len(ri), len(ci)


