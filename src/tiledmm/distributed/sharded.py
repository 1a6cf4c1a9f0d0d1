"""Row- and K-sharded distributed GEMMs: all-gather overlapped with the GEMM
(``allgather_matmul``), the GEMM overlapped with a reduce-scatter (``matmul_reducescatter``),
and their unfused baselines."""
from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from .._arrays import TiledmmError
from ..outofcore.gemms import Gemm, tiledmm_gemm
from .layout import block_range
from .streams import (_all_gather_into, _check_local, _comm, _gemm_call, _land, _padded, _reduce_scatter_into,
                      _Streams)


def allgather_matmul(a_shard: torch.Tensor, b_local: torch.Tensor, m: Optional[int] = None, *, group=None,
                     gemm: Optional[Gemm] = None, chunks: int = 2, out: Optional[torch.Tensor] = None,
                     stats: Optional[dict] = None) -> torch.Tensor:
    """C_local = A @ b_local where A's rows are sharded over the group (rank r holds
    ``block_range(m, world, r)``). m: A's total rows (default: shard rows x world).
    The shards are gathered in ``chunks`` row chunks; this rank's own shard is multiplied
    while they travel, each gathered chunk as soon as it lands."""
    w, me = dist.get_world_size(group), dist.get_rank(group)
    gemm = gemm or tiledmm_gemm()
    m = m if m is not None else a_shard.shape[0] * w
    r0, r1 = block_range(m, w, me)
    kk = a_shard.shape[1]
    _check_local("a_shard", a_shard, (r1 - r0, kk))
    if b_local.dim() != 2 or b_local.shape[0] != kk or b_local.dtype != a_shard.dtype:
        raise TiledmmError(f"b_local must be {kk}x? {a_shard.dtype}; got {tuple(b_local.shape)} {b_local.dtype}")
    n = b_local.shape[1]
    out = out if out is not None else torch.empty(m, n, dtype=a_shard.dtype, device=a_shard.device)
    _check_local("out", out, (m, n))
    st = _Streams(a_shard.device, stats is not None)
    mm = -(-m // w)                                # padded shard rows
    nch = max(1, min(chunks, mm))
    bounds = [block_range(mm, nch, c) for c in range(nch)]
    with st.on(st.compute):
        handles = []
        for c0, c1 in bounds:
            rows = c1 - c0
            buf = torch.empty(w * rows, kk, dtype=a_shard.dtype, device=a_shard.device)
            gather = (lambda b=buf, x=a_shard[c0:c1], r=rows: _all_gather_into(b, _padded(x, r), group))
            handles.append((buf, _comm(st, f"allgather rows[{c0}:{c1}]", gather)))
        if r1 > r0:
            _gemm_call(st, gemm, a_shard, b_local, out[r0:r1], 1.0, 0.0, "gemm own shard")
        for (c0, c1), (buf, h) in zip(bounds, handles):
            _land(st, h)
            rows = c1 - c0
            for src in range(w):
                if src == me:
                    continue
                s0, s1 = block_range(m, w, src)
                take = max(0, min(c1, s1 - s0) - c0)
                if take > 0:
                    _gemm_call(st, gemm, buf[src * rows:src * rows + take], b_local, out[s0 + c0:s0 + c0 + take],
                               1.0, 0.0, f"gemm rank {src} rows[{c0}:{c0 + take}]")
        st.finish(stats)
    if stats is not None:
        stats.update({"algo": "allgather", "chunks": nch})
    return out


def allgather_then_matmul(a_shard, b_local, m=None, *, group=None, gemm=None, out=None, stats=None):
    """Baseline: all-gather A, then one GEMM (nothing overlapped)."""
    w = dist.get_world_size(group)
    gemm = gemm or tiledmm_gemm()
    m = m if m is not None else a_shard.shape[0] * w
    mm = -(-m // w)
    kk = a_shard.shape[1]
    st = _Streams(a_shard.device, stats is not None)
    with st.on(st.compute):
        send = a_shard
        if send.shape[0] != mm:
            send = torch.zeros(mm, kk, dtype=a_shard.dtype, device=a_shard.device)
            send[:a_shard.shape[0]] = a_shard
        full = torch.empty(w * mm, kk, dtype=a_shard.dtype, device=a_shard.device)
        e0, e1 = st.event(), st.event()
        st.rec(e0, st.compute)
        _all_gather_into(full, send, group).wait()
        st.rec(e1, st.compute)
        st.span("comm", "allgather", e0, e1)
        if mm * w != m:
            full = torch.cat([full[i * mm:i * mm + (block_range(m, w, i)[1] - block_range(m, w, i)[0])]
                              for i in range(w)])
        out = out if out is not None else torch.empty(m, b_local.shape[1], dtype=a_shard.dtype, device=a_shard.device)
        _gemm_call(st, gemm, full, b_local, out, 1.0, 0.0, "gemm")
        st.finish(stats)
    return out


# -- matmul, then reduce-scatter (overlapped)
def matmul_reducescatter(a_local: torch.Tensor, b_local: torch.Tensor, *, group=None, gemm: Optional[Gemm] = None,
                         chunks: int = 2, out: Optional[torch.Tensor] = None,
                         stats: Optional[dict] = None) -> torch.Tensor:
    """This rank's rows (``block_range(M, world, rank)``) of C = sum over ranks of
    a_local @ b_local (a_local: M x K_r, b_local: K_r x N, the K split). Partial products
    are made ``chunks`` row chunks at a time; each chunk is reduce-scattered while the
    next one is computed."""
    w, me = dist.get_world_size(group), dist.get_rank(group)
    gemm = gemm or tiledmm_gemm()
    m, kr = a_local.shape
    if b_local.dim() != 2 or b_local.shape[0] != kr or b_local.dtype != a_local.dtype:
        raise TiledmmError(f"b_local must be {kr}x? {a_local.dtype}; got {tuple(b_local.shape)} {b_local.dtype}")
    n = b_local.shape[1]
    r0, r1 = block_range(m, w, me)
    out = out if out is not None else torch.empty(r1 - r0, n, dtype=a_local.dtype, device=a_local.device)
    _check_local("out", out, (r1 - r0, n))
    st = _Streams(a_local.device, stats is not None)
    mm = -(-m // w)
    nch = max(1, min(chunks, mm))
    bounds = [block_range(mm, nch, c) for c in range(nch)]
    ring = 2
    bufs = [torch.empty(w * (bounds[0][1] - bounds[0][0]), n, dtype=a_local.dtype, device=a_local.device)
            for _ in range(min(ring, nch))]
    free = [None] * len(bufs)
    pending, landed = [], []
    with st.on(st.compute):
        for ci, (c0, c1) in enumerate(bounds):
            rows = c1 - c0
            slot = ci % len(bufs)
            if free[slot] is not None:             # the reduce-scatter that read this buffer is done
                _land(st, free[slot])
                landed.append(free[slot])
            part = bufs[slot][:w * rows]
            _partials(st, gemm, a_local, b_local, part, w, c0, c1)
            dst = out[c0:min(c1, r1 - r0)]
            tmp = dst if dst.shape[0] == rows and dst.is_contiguous() else \
                torch.empty(rows, n, dtype=a_local.dtype, device=a_local.device)
            ready = st.event()
            st.rec(ready, st.compute)
            h = _comm(st, f"reducescatter rows[{c0}:{c1}]", lambda o=tmp, p=part: _reduce_scatter_into(o, p, group),
                      after=[ready] if st.gpu else None)
            free[slot] = h
            pending.append((h, tmp, dst))
        for h, tmp, dst in pending:
            if h not in landed:
                _land(st, h)
            if tmp is not dst and dst.shape[0] > 0:
                dst.copy_(tmp[:dst.shape[0]])
        st.finish(stats)
    if stats is not None:
        stats.update({"algo": "reducescatter", "chunks": nch})
    return out


def matmul_then_reducescatter(a_local, b_local, *, group=None, gemm=None, out=None, stats=None):
    """Baseline: the whole partial product, then one reduce-scatter."""
    w, me = dist.get_world_size(group), dist.get_rank(group)
    gemm = gemm or tiledmm_gemm()
    m, n = a_local.shape[0], b_local.shape[1]
    mm = -(-m // w)
    st = _Streams(a_local.device, stats is not None)
    with st.on(st.compute):
        part = torch.zeros(w * mm, n, dtype=a_local.dtype, device=a_local.device) if mm * w != m else \
            torch.empty(m, n, dtype=a_local.dtype, device=a_local.device)
        if mm * w == m:
            _gemm_call(st, gemm, a_local, b_local, part, 1.0, 0.0, "gemm")
        else:
            for d in range(w):
                s0, s1 = block_range(m, w, d)
                if s1 > s0:
                    _gemm_call(st, gemm, a_local[s0:s1], b_local, part[d * mm:d * mm + s1 - s0], 1.0, 0.0, "gemm")
        r0, r1 = block_range(m, w, me)
        tmp = torch.empty(mm, n, dtype=a_local.dtype, device=a_local.device)
        e0, e1 = st.event(), st.event()
        st.rec(e0, st.compute)
        _reduce_scatter_into(tmp, part, group).wait()
        st.rec(e1, st.compute)
        st.span("comm", "reducescatter", e0, e1)
        out = out if out is not None else torch.empty(r1 - r0, n, dtype=a_local.dtype, device=a_local.device)
        out.copy_(tmp[:r1 - r0])
        st.finish(stats)
    return out


def _partials(st, gemm, a_local, b_local, part, w: int, c0: int, c1: int) -> None:
    """Chunk rows [c0, c1) of every destination rank's block of a_local @ b_local into ``part``
    (w blocks of c1 - c0 rows; rows past a shorter block's end are zeros)."""
    m, rows = a_local.shape[0], c1 - c0
    for d in range(w):
        s0, s1 = block_range(m, w, d)
        take = max(0, min(c1, s1 - s0) - c0)
        if take > 0:
            _gemm_call(st, gemm, a_local[s0 + c0:s0 + c0 + take], b_local, part[d * rows:d * rows + take], 1.0, 0.0,
                       f"gemm dest {d} rows[{c0}:{c0 + take}]")
        if take < rows:
            part[d * rows + take:(d + 1) * rows].zero_()
