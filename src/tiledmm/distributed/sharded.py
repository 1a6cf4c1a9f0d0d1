"""Row- and K-sharded distributed GEMMs: all-gather overlapped with the GEMM
(``allgather_matmul``), the GEMM overlapped with a reduce-scatter (``matmul_reducescatter``),
and their unfused baselines.

Engines as in SUMMA: "nccl" (collectives on a communication stream of their own, the local
products on the compute stream, events between them) and "symm" (torch's symmetric memory: the
copy engines read the peers' shards, or write each destination's partial product into its buffer,
while the next product runs; no SM is taken from the products). ``chunks`` None: the scaling
model's choice (``model.tp_chunks``), the same on every rank. The even case (M a multiple of
the group size) pads nothing and copies nothing.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from .._arrays import TiledmmError
from ..outofcore.gemms import Gemm, tiledmm_gemm
from . import _symm
from . import model as _model
from .layout import block_range
from .streams import (_all_gather_into, _check_engine, _check_local, _comm, _gemm_call, _land, _padded,
                      _reduce_scatter_into, _Streams)


def _chunk_count(chunks, m, k, n, w, algo, elem, engine, machine, rows) -> int:
    if chunks is None:
        chunks = _model.tp_chunks(m, k, n, w, algo=algo, machine=machine, elem=elem, engine=engine)
    if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 1:
        raise TiledmmError(f"chunks {chunks!r}: a positive integer (or None: the model's choice)")
    return max(1, min(chunks, max(rows, 1)))


def allgather_matmul(a_shard: torch.Tensor, b_local: torch.Tensor, m: Optional[int] = None, *, group=None,
                     gemm: Optional[Gemm] = None, chunks: Optional[int] = None, engine: str = "nccl",
                     out: Optional[torch.Tensor] = None, stats: Optional[dict] = None,
                     machine: Optional[_model.Machine] = None) -> torch.Tensor:
    """C_local = A @ b_local where A's rows are sharded over the group (rank r holds
    ``block_range(m, world, r)``). m: A's total rows (default: shard rows x world).
    This rank's own shard is multiplied at once; the others' travel meanwhile ("nccl": all-gathered
    in ``chunks`` row chunks; "symm": read from each peer in turn, ``chunks`` pieces each), and each
    piece is multiplied as soon as it lands."""
    _check_engine(engine)
    w, me = dist.get_world_size(group), dist.get_rank(group)
    gemm = gemm or tiledmm_gemm()
    m = m if m is not None else a_shard.shape[0] * w
    r0, r1 = block_range(m, w, me)
    kk = a_shard.shape[1] if a_shard.dim() == 2 else -1
    _check_local("a_shard", a_shard, (r1 - r0, kk))
    if b_local.dim() != 2 or b_local.shape[0] != kk or b_local.dtype != a_shard.dtype:
        raise TiledmmError(f"b_local must be {kk}x? {a_shard.dtype}; got {tuple(b_local.shape)} {b_local.dtype}")
    if engine == "symm":
        _symm.check_device(a_shard.device)
    n = b_local.shape[1]
    out = out if out is not None else torch.empty(m, n, dtype=a_shard.dtype, device=a_shard.device)
    _check_local("out", out, (m, n))
    mm = -(-m // w)                                # the longest shard
    nch = _chunk_count(chunks, m, kk, n, w, "allgather", a_shard.element_size(), engine, machine, mm)
    st = _Streams(a_shard.device, stats is not None, ("tp",))
    with st.on(st.compute):
        if engine == "symm":
            _allgather_symm(st, a_shard, b_local, out, m, nch, group, gemm)
        else:
            _allgather_nccl(st, a_shard, b_local, out, m, nch, group, gemm)
        st.finish(stats)
    if stats is not None:
        stats.update({"algo": "allgather", "chunks": nch, "engine": engine})
    return out


def _allgather_nccl(st, a_shard, b_local, out, m, nch, group, gemm) -> None:
    w, me = dist.get_world_size(group), dist.get_rank(group)
    kk = a_shard.shape[1]
    mm = -(-m // w)
    r0, r1 = block_range(m, w, me)
    even = mm * w == m
    bounds = [block_range(mm, nch, c) for c in range(nch)]
    handles = []
    for c0, c1 in bounds:            # every chunk's all-gather queued now: one communicator runs them in turn
        rows = c1 - c0
        buf = torch.empty(w * rows, kk, dtype=a_shard.dtype, device=a_shard.device)
        after = None
        if c1 <= a_shard.shape[0]:
            part = a_shard[c0:c1]
        else:                        # a shorter shard's last chunk: zero rows appended (made on the compute stream)
            part = _padded(a_shard[min(c0, a_shard.shape[0]):], rows)
            after = [st.event()]
            st.rec(after[0], st.compute)
        h = _comm(st, f"allgather rows[{c0}:{c1}]", lambda b=buf, x=part: _all_gather_into(b, x, group), after)
        handles.append((buf, h))
    if r1 > r0:
        _gemm_call(st, gemm, a_shard, b_local, out[r0:r1], 1.0, 0.0, "gemm own shard")
    for (c0, c1), (buf, h) in zip(bounds, handles):
        _land(st, h)
        rows = c1 - c0
        if even and nch == 1:        # the gathered buffer is A: the rows before and after this rank's, two products
            for s0, s1 in ((0, me * mm), ((me + 1) * mm, m)):
                if s1 > s0:
                    _gemm_call(st, gemm, buf[s0:s1], b_local, out[s0:s1], 1.0, 0.0, f"gemm rows[{s0}:{s1}]")
            continue
        for src in range(w):
            if src == me:
                continue
            s0, s1 = block_range(m, w, src)
            take = max(0, min(c1, s1 - s0) - c0)
            if take > 0:
                _gemm_call(st, gemm, buf[src * rows:src * rows + take], b_local, out[s0 + c0:s0 + c0 + take],
                           1.0, 0.0, f"gemm rank {src} rows[{c0}:{c0 + take}]")


def _allgather_symm(st, a_shard, b_local, out, m, nch, group, gemm) -> None:
    w, me = dist.get_world_size(group), dist.get_rank(group)
    kk, elem = a_shard.shape[1], a_shard.element_size()
    mm = -(-m // w)
    r0, r1 = block_range(m, w, me)
    space = _symm.space(group, _symm.align(mm * kk * elem), a_shard.device, "allgather")
    if r1 > r0:
        space.view(me, 0, (r1 - r0, kk), a_shard.dtype).copy_(a_shard)
    st.follow(st.comm, st.compute)
    with st.on(st.comm):
        space.barrier(0)                          # every shard in place before any read; the own product goes on
    recv = torch.empty(max(m, 1), kk, dtype=a_shard.dtype, device=a_shard.device)
    pieces = []
    for step in range(1, w):                      # every read queued now, in the order they are multiplied
        src = (me + step) % w
        s0, s1 = block_range(m, w, src)
        for c0, c1 in (block_range(s1 - s0, nch, c) for c in range(nch)):
            if c1 <= c0:
                continue
            dst, view = recv[s0 + c0:s0 + c1], space.view(src, c0 * kk * elem, (c1 - c0, kk), a_shard.dtype)

            def read(d=dst, v=view):
                d.copy_(v)
            pieces.append((src, s0 + c0, s0 + c1, _comm(st, f"read rank {src} rows[{c0}:{c1}]", read)))
    if r1 > r0:
        _gemm_call(st, gemm, a_shard, b_local, out[r0:r1], 1.0, 0.0, "gemm own shard")
    for src, g0, g1, h in pieces:
        _land(st, h)
        _gemm_call(st, gemm, recv[g0:g1], b_local, out[g0:g1], 1.0, 0.0, f"gemm rank {src} rows[{g0}:{g1}]")
    st.follow(st.compute, st.comm)
    space.barrier(0)                              # every peer has read this rank's shard


def allgather_then_matmul(a_shard, b_local, m=None, *, group=None, gemm=None, out=None, stats=None):
    """Baseline: all-gather A, then one GEMM (nothing overlapped)."""
    w = dist.get_world_size(group)
    gemm = gemm or tiledmm_gemm()
    m = m if m is not None else a_shard.shape[0] * w
    mm = -(-m // w)
    kk = a_shard.shape[1]
    st = _Streams(a_shard.device, stats is not None, ("tp",))
    with st.on(st.compute):
        send = _padded(a_shard, mm)
        full = torch.empty(w * mm, kk, dtype=a_shard.dtype, device=a_shard.device)
        e0, e1 = st.event(), st.event()
        st.rec(e0, st.compute)
        _all_gather_into(full, send, group).wait()
        st.rec(e1, st.compute)
        st.span("tp", "allgather", e0, e1)
        if mm * w != m:
            full = torch.cat([full[i * mm:i * mm + (block_range(m, w, i)[1] - block_range(m, w, i)[0])]
                              for i in range(w)])
        out = out if out is not None else torch.empty(m, b_local.shape[1], dtype=a_shard.dtype, device=a_shard.device)
        _gemm_call(st, gemm, full, b_local, out, 1.0, 0.0, "gemm")
        st.finish(stats)
    return out


# -- matmul, then reduce-scatter (overlapped)
def matmul_reducescatter(a_local: torch.Tensor, b_local: torch.Tensor, *, group=None, gemm: Optional[Gemm] = None,
                         chunks: Optional[int] = None, engine: str = "nccl", out: Optional[torch.Tensor] = None,
                         stats: Optional[dict] = None, machine: Optional[_model.Machine] = None) -> torch.Tensor:
    """This rank's rows (``block_range(M, world, rank)``) of C = sum over ranks of
    a_local @ b_local (a_local: M x K_r, b_local: K_r x N, the K split). "nccl": the partial
    product is made ``chunks`` row chunks at a time, each chunk reduce-scattered while the next is
    made; "symm": each other rank's rows are made in turn and written into its buffer by the copy
    engines while the next are made, this rank's own last; then one barrier and this rank's sum."""
    _check_engine(engine)
    w, me = dist.get_world_size(group), dist.get_rank(group)
    gemm = gemm or tiledmm_gemm()
    if a_local.dim() != 2:
        raise TiledmmError(f"a_local must be a matrix; got {a_local.dim()} dimensions")
    m, kr = a_local.shape
    if b_local.dim() != 2 or b_local.shape[0] != kr or b_local.dtype != a_local.dtype:
        raise TiledmmError(f"b_local must be {kr}x? {a_local.dtype}; got {tuple(b_local.shape)} {b_local.dtype}")
    if engine == "symm":
        _symm.check_device(a_local.device)
    n = b_local.shape[1]
    r0, r1 = block_range(m, w, me)
    out = out if out is not None else torch.empty(r1 - r0, n, dtype=a_local.dtype, device=a_local.device)
    _check_local("out", out, (r1 - r0, n))
    mm = -(-m // w)
    nch = _chunk_count(chunks, m, kr * w, n, w, "reducescatter", a_local.element_size(), engine, machine, mm)
    st = _Streams(a_local.device, stats is not None, ("tp",))
    with st.on(st.compute):
        if engine == "symm":
            _reducescatter_symm(st, a_local, b_local, out, nch, group, gemm)
        else:
            _reducescatter_nccl(st, a_local, b_local, out, nch, group, gemm)
        st.finish(stats)
    if stats is not None:
        stats.update({"algo": "reducescatter", "chunks": nch, "engine": engine})
    return out


def _reducescatter_nccl(st, a_local, b_local, out, nch, group, gemm) -> None:
    w, me = dist.get_world_size(group), dist.get_rank(group)
    m, n = a_local.shape[0], b_local.shape[1]
    mm = -(-m // w)
    r0, r1 = block_range(m, w, me)
    bounds = [block_range(mm, nch, c) for c in range(nch)]
    ring = min(2, nch)
    bufs = [torch.empty(w * (bounds[0][1] - bounds[0][0]), n, dtype=a_local.dtype, device=a_local.device)
            for _ in range(ring)]
    last = [None] * ring                          # the reduce-scatter that last read each buffer
    pending = []
    for ci, (c0, c1) in enumerate(bounds):
        rows = c1 - c0
        slot = ci % ring
        _land(st, last[slot])
        part = bufs[slot][:w * rows]
        _partials(st, gemm, a_local, b_local, part, w, c0, c1, mm * w == m and nch == 1)
        dst = out[c0:min(c1, r1 - r0)]
        tmp = dst if dst.shape[0] == rows and dst.is_contiguous() else \
            torch.empty(rows, n, dtype=a_local.dtype, device=a_local.device)
        ready = st.event()
        st.rec(ready, st.compute)
        h = _comm(st, f"reducescatter rows[{c0}:{c1}]", lambda o=tmp, p=part: _reduce_scatter_into(o, p, group),
                  after=[ready])
        last[slot] = h
        pending.append((h, tmp, dst))
    for h, tmp, dst in pending:
        _land(st, h)
        if tmp is not dst and dst.shape[0] > 0:
            dst.copy_(tmp[:dst.shape[0]])


def _reducescatter_symm(st, a_local, b_local, out, nch, group, gemm) -> None:
    w, me = dist.get_world_size(group), dist.get_rank(group)
    m, n, elem = a_local.shape[0], b_local.shape[1], a_local.element_size()
    mm = -(-m // w)
    r0, r1 = block_range(m, w, me)
    space = _symm.space(group, _symm.align(w * mm * n * elem), a_local.device, "reducescatter")
    with st.on(st.comm):
        space.barrier(0)                          # every rank has summed the previous call's parts
    crows = -(-mm // nch)
    stage = [torch.empty(crows, n, dtype=a_local.dtype, device=a_local.device) for _ in range(min(2, w * nch))]
    last = [None] * len(stage)
    i = 0
    for step in range(1, w):
        dst = (me + step) % w
        d0, d1 = block_range(m, w, dst)
        for c0, c1 in (block_range(d1 - d0, nch, c) for c in range(nch)):
            if c1 <= c0:
                continue
            slot = i % len(stage)
            i += 1
            _land(st, last[slot])                 # the write that read this staging buffer is done
            part = stage[slot][:c1 - c0]
            _gemm_call(st, gemm, a_local[d0 + c0:d0 + c1], b_local, part, 1.0, 0.0,
                       f"gemm for rank {dst} rows[{c0}:{c1}]")
            ready = st.event()
            st.rec(ready, st.compute)
            view = space.view(dst, ((me * mm) + c0) * n * elem, (c1 - c0, n), a_local.dtype)

            def write(v=view, p=part):
                v.copy_(p)
            last[slot] = _comm(st, f"write rank {dst} rows[{c0}:{c1}]", write, after=[ready])
    mine = space.view(me, 0, (w, mm, n), a_local.dtype)
    if r1 > r0:
        _gemm_call(st, gemm, a_local[r0:r1], b_local, mine[me, :r1 - r0], 1.0, 0.0, "gemm own rows")
    with st.on(st.comm):
        space.barrier(0)                          # every rank's writes into this rank's buffer are done
    st.follow(st.compute, st.comm)
    if r1 > r0:
        torch.sum(mine[:, :r1 - r0], dim=0, out=out)


def matmul_then_reducescatter(a_local, b_local, *, group=None, gemm=None, out=None, stats=None):
    """Baseline: the whole partial product, then one reduce-scatter."""
    w, me = dist.get_world_size(group), dist.get_rank(group)
    gemm = gemm or tiledmm_gemm()
    m, n = a_local.shape[0], b_local.shape[1]
    mm = -(-m // w)
    st = _Streams(a_local.device, stats is not None, ("tp",))
    with st.on(st.compute):
        part = torch.zeros(w * mm, n, dtype=a_local.dtype, device=a_local.device) if mm * w != m else \
            torch.empty(m, n, dtype=a_local.dtype, device=a_local.device)
        _partials(st, gemm, a_local, b_local, part, w, 0, mm, mm * w == m)
        r0, r1 = block_range(m, w, me)
        tmp = torch.empty(mm, n, dtype=a_local.dtype, device=a_local.device)
        e0, e1 = st.event(), st.event()
        st.rec(e0, st.compute)
        _reduce_scatter_into(tmp, part, group).wait()
        st.rec(e1, st.compute)
        st.span("tp", "reducescatter", e0, e1)
        out = out if out is not None else torch.empty(r1 - r0, n, dtype=a_local.dtype, device=a_local.device)
        out.copy_(tmp[:r1 - r0])
        st.finish(stats)
    return out


def _partials(st, gemm, a_local, b_local, part, w: int, c0: int, c1: int, whole: bool) -> None:
    """Chunk rows [c0, c1) of every destination rank's block of a_local @ b_local into ``part``
    (w blocks of c1 - c0 rows; rows past a shorter block's end are zeros). whole: the even case with
    one chunk, ``part`` is the whole product: one GEMM."""
    if whole:
        _gemm_call(st, gemm, a_local, b_local, part, 1.0, 0.0, "gemm all rows")
        return
    m, rows = a_local.shape[0], c1 - c0
    for d in range(w):
        s0, s1 = block_range(m, w, d)
        take = max(0, min(c1, s1 - s0) - c0)
        if take > 0:
            _gemm_call(st, gemm, a_local[s0 + c0:s0 + c0 + take], b_local, part[d * rows:d * rows + take], 1.0, 0.0,
                       f"gemm dest {d} rows[{c0}:{c0 + take}]")
        if take < rows:
            part[d * rows + take:(d + 1) * rows].zero_()
