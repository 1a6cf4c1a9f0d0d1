"""Multi-GPU GEMM on torch.distributed: one process per GPU (NCCL), or CPU processes (gloo).

The lectures' phase loop one level up: a thread block loads a tile of A and of B into
shared memory, multiplies, moves on along K. Here a GPU is the block, and the
collaborative load is a broadcast.

* ``summa``: A (M x K), B (K x N), C (M x N) block-distributed over a pr x pc process
  grid (rank = row * pc + col). For each K-panel, the grid column owning A's panel
  broadcasts it along each grid row, the grid row owning B's panel broadcasts it along
  each grid column, and every rank adds A_panel @ B_panel to its C block. Broadcasts are
  issued ahead (``depth`` panels in flight, receive buffers in a ring) on their own
  stream, so the next panels travel while this panel's GEMM runs; a rank multiplies the
  panels it already holds first (every rank issues the collectives in one order; only
  the order of the local products differs).
* ``allgather_matmul``: A row-sharded (rank r holds rows r of A), B's column block local:
  C_local = A @ B_local. The shards are all-gathered in row chunks; a rank multiplies
  its own shard at once and each gathered chunk as it lands, while later chunks travel.
* ``matmul_reducescatter``: A column-sharded, B row-sharded (the K split): C = sum_r A_r B_r,
  each rank keeping its rows. Partial products are computed chunk by chunk and each
  chunk is reduce-scattered while the next is computed.
* Unfused baselines ``allgather_then_matmul`` and ``matmul_then_reducescatter``.

Uneven shapes work: blocks are as even as possible (the first ``n % p`` parts one
longer); collectives that need equal sizes are padded internally.
The local GEMM is ``gemm(a, b, c, alpha, beta)`` (c = alpha*a@b + beta*c in place, on
torch's current stream); default: tiledmm's default kernel.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.distributed as dist

from ._arrays import TiledmmError
from .outofcore import tiledmm_gemm, torch_gemm

Gemm = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float, float], object]

__all__ = ["Grid", "grid_shape", "block_range", "summa", "allgather_matmul", "matmul_reducescatter",
           "allgather_then_matmul", "matmul_then_reducescatter", "scatter_summa", "gather_summa",
           "shard_rows", "shard_cols", "gather_rows", "torch_gemm", "tiledmm_gemm"]


# ----------------------------------------------------------------------------- layout helpers
def block_range(n: int, parts: int, idx: int) -> tuple[int, int]:
    """Rows [start, stop) of part idx when n is split into parts as evenly as possible."""
    q, r = divmod(n, parts)
    start = idx * q + min(idx, r)
    return start, start + q + (1 if idx < r else 0)


def grid_shape(world: int) -> tuple[int, int]:
    """pr x pc = world with pr <= pc, as square as possible (2 -> 1x2, 4 -> 2x2, 8 -> 2x4)."""
    pr = int(math.isqrt(world))
    while world % pr:
        pr -= 1
    return pr, world // pr


_groups: dict = {}


@dataclass
class Grid:
    """The process grid of ``group`` (default: the world): rank = row * pc + col."""
    pr: int
    pc: int
    rank: int                  # rank within the group
    ranks: tuple               # global ranks of the group, in group order
    row_group: object
    col_group: object

    @property
    def row(self) -> int:
        return self.rank // self.pc

    @property
    def col(self) -> int:
        return self.rank % self.pc

    def global_rank(self, row: int, col: int) -> int:
        return self.ranks[row * self.pc + col]

    def blocks(self, m: int, k: int, n: int, row=None, col=None) -> dict:
        """Index ranges of the A, B and C blocks a grid position holds."""
        r = self.row if row is None else row
        c = self.col if col is None else col
        mi, nj = block_range(m, self.pr, r), block_range(n, self.pc, c)
        return {"a": (mi, block_range(k, self.pc, c)), "b": (block_range(k, self.pr, r), nj), "c": (mi, nj)}

    @classmethod
    def make(cls, group=None, shape: Optional[tuple] = None) -> "Grid":
        world = dist.get_world_size(group)
        rank = dist.get_rank(group)
        pr, pc = shape or grid_shape(world)
        if pr * pc != world:
            raise TiledmmError(f"process grid {pr}x{pc} does not match {world} processes")
        ranks = tuple(dist.get_process_group_ranks(group) if group is not None else range(world))
        key = (ranks, pr, pc)
        if key not in _groups:            # every rank creates every group, in the same order
            rows = [dist.new_group([ranks[r * pc + c] for c in range(pc)]) for r in range(pr)]
            cols = [dist.new_group([ranks[r * pc + c] for r in range(pr)]) for c in range(pc)]
            _groups[key] = (rows, cols)
        rows, cols = _groups[key]
        return cls(pr, pc, rank, ranks, rows[rank // pc], cols[rank % pc])


def _full(x: Optional[torch.Tensor], shape, dtype, device, src: int, group) -> torch.Tensor:
    """The whole matrix on every rank (``x`` given on ``src``)."""
    if dist.get_rank() == src:
        t = x.to(device=device, dtype=dtype).contiguous()
    else:
        t = torch.empty(shape, dtype=dtype, device=device)
    dist.broadcast(t, src=src, group=group)
    return t


def scatter_summa(a: Optional[torch.Tensor], b: Optional[torch.Tensor], shape: tuple, *, dtype=None, device=None,
                  grid: Optional[Grid] = None, src: int = 0, group=None) -> tuple:
    """A and B (given on rank ``src``) -> this rank's SUMMA blocks (a_local, b_local), contiguous.
    For checks and examples: every rank briefly holds the whole matrices."""
    m, k, n = shape
    grid = grid or Grid.make(group)
    dtype = dtype or (a.dtype if a is not None else torch.float32)
    device = device or _device()
    blk = grid.blocks(m, k, n)
    A = _full(a, (m, k), dtype, device, src, group)
    (r0, r1), (c0, c1) = blk["a"]
    a_loc = A[r0:r1, c0:c1].contiguous()
    del A
    B = _full(b, (k, n), dtype, device, src, group)
    (r0, r1), (c0, c1) = blk["b"]
    return a_loc, B[r0:r1, c0:c1].contiguous()


def gather_summa(c_local: torch.Tensor, m: int, n: int, *, grid: Optional[Grid] = None, group=None) -> torch.Tensor:
    """Every rank's C block -> the whole C on every rank (padded all-gather)."""
    grid = grid or Grid.make(group)
    bm, bn = -(-m // grid.pr), -(-n // grid.pc)
    pad = torch.zeros(bm, bn, dtype=c_local.dtype, device=c_local.device)
    pad[:c_local.shape[0], :c_local.shape[1]] = c_local
    parts = [torch.empty_like(pad) for _ in range(grid.pr * grid.pc)]
    dist.all_gather(parts, pad, group=group)
    C = torch.empty(m, n, dtype=c_local.dtype, device=c_local.device)
    for idx, p in enumerate(parts):
        (r0, r1), (c0, c1) = grid.blocks(m, 1, n, row=idx // grid.pc, col=idx % grid.pc)["c"]
        C[r0:r1, c0:c1] = p[:r1 - r0, :c1 - c0]
    return C


def shard_rows(x: torch.Tensor, group=None) -> torch.Tensor:
    """This rank's row block of a matrix every rank holds."""
    r0, r1 = block_range(x.shape[0], dist.get_world_size(group), dist.get_rank(group))
    return x[r0:r1].contiguous()


def shard_cols(x: torch.Tensor, group=None) -> torch.Tensor:
    c0, c1 = block_range(x.shape[1], dist.get_world_size(group), dist.get_rank(group))
    return x[:, c0:c1].contiguous()


def gather_rows(x_local: torch.Tensor, rows: int, group=None) -> torch.Tensor:
    """Row shards (uneven allowed) -> the whole matrix on every rank."""
    w = dist.get_world_size(group)
    mm = -(-rows // w)
    pad = torch.zeros((mm,) + tuple(x_local.shape[1:]), dtype=x_local.dtype, device=x_local.device)
    pad[:x_local.shape[0]] = x_local
    parts = [torch.empty_like(pad) for _ in range(w)]
    dist.all_gather(parts, pad, group=group)
    return torch.cat([p[:block_range(rows, w, i)[1] - block_range(rows, w, i)[0]] for i, p in enumerate(parts)])


def _device() -> torch.device:
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# ----------------------------------------------------------------------------- streams and events
class _NoEvent:
    def record(self, stream=None):
        self.t = time.perf_counter()

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


class _Streams:
    """A compute and a communication stream on a GPU; plain calls on the CPU. Records
    (stream, what, start, end) events for a timeline."""

    def __init__(self, device: torch.device, timeline: bool):
        self.gpu = device.type == "cuda"
        self.timeline = timeline
        if self.gpu:
            self.compute = torch.cuda.current_stream(device)
            self.comm = torch.cuda.Stream(device)
            self.comm.wait_stream(self.compute)       # inputs written before the call are visible
        else:
            self.compute = self.comm = None
        self.t0 = self.event()
        self.rec(self.t0, self.compute)
        self.spans = []

    def event(self):
        return torch.cuda.Event(enable_timing=self.timeline) if self.gpu else _NoEvent()

    def rec(self, ev, stream):
        ev.record(stream) if self.gpu else ev.record()

    def on(self, stream):
        return torch.cuda.stream(stream) if self.gpu else contextlib.nullcontext()

    def wait(self, stream, ev):
        if self.gpu:
            stream.wait_event(ev)

    def span(self, stream_name, what, e0, e1):
        if self.timeline:
            self.spans.append((stream_name, what, e0, e1))

    def finish(self, stats: Optional[dict]):
        """Compute stream waits for the comm stream; fill stats (synchronises if asked)."""
        if self.gpu:
            self.compute.wait_stream(self.comm)
        if stats is None:
            return
        if self.gpu:
            torch.cuda.current_stream().synchronize()
        busy, tl = {}, []
        for s, what, e0, e1 in self.spans:
            a, b = self.t0.elapsed_time(e0), self.t0.elapsed_time(e1)
            busy[s] = busy.get(s, 0.0) + (b - a)
            tl.append((s, what, round(a, 4), round(b, 4)))
        end = max([b for *_, b in tl] + [0.0])
        stats.update({"span_ms": end, "timeline": tl, **{f"{s}_ms": v for s, v in busy.items()}})


def _comm(streams: _Streams, what: str, fn, after=None):
    """Issue a collective on the comm stream (after ``after`` events); returns an event that
    marks its completion on the comm stream (GPU) or waits for it (CPU)."""
    s = streams
    e0, e1 = s.event(), s.event()
    with s.on(s.comm):
        for ev in after or ():
            s.wait(s.comm, ev)
        s.rec(e0, s.comm)
        work = fn()
        if s.gpu:
            if work is not None:
                work.wait()                           # comm stream waits for NCCL's stream
            s.rec(e1, s.comm)
            s.span("comm", what, e0, e1)
            return e1, None
    return e1, (work, e0, what)


def _land(streams: _Streams, handle):
    """Make the compute stream wait for a collective issued with ``_comm``."""
    ev, cpu = handle
    if streams.gpu:
        streams.wait(streams.compute, ev)
    elif cpu is not None:
        work, e0, what = cpu
        if work is not None:
            work.wait()
        streams.rec(ev, None)
        streams.span("comm", what, e0, ev)


_prepared: set = set()


def _prepare_local(gemm, products, out, alpha) -> None:
    """Run each distinct local product (shapes, strides, 16-byte alignment, beta) once into a
    scratch output before any collective is issued, the first time this process meets it: the
    dispatcher then chooses its kernel (``tiledmm.tuning`` times the candidates) on a quiet GPU
    rather than against the NCCL kernels of the panels in flight, which skewed the choices
    (issue 13). The operands may be receive buffers not yet written: only their layout matters."""
    scratch = None
    for a, b, beta in products:
        key = (getattr(gemm, "__qualname__", type(gemm).__name__), a.dtype, tuple(a.shape), a.stride(), tuple(b.shape),
               b.stride(), a.data_ptr() % 16, b.data_ptr() % 16, beta == 0.0, alpha == 1.0)
        if key in _prepared or 0 in a.shape or 0 in b.shape:
            continue
        _prepared.add(key)
        if scratch is None:
            scratch = torch.zeros_like(out)
        gemm(a, b, scratch, alpha, beta)


def _gemm_call(streams, gemm, a, b, c, alpha, beta, what):
    e0, e1 = streams.event(), streams.event()
    streams.rec(e0, streams.compute)
    gemm(a, b, c, alpha, beta)
    streams.rec(e1, streams.compute)
    streams.span("compute", what, e0, e1)
    return e1


def _padded(x: torch.Tensor, rows: int) -> torch.Tensor:
    """x with zero rows appended up to ``rows`` (made on the current stream)."""
    if x.shape[0] == rows:
        return x
    pad = torch.zeros((rows,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    pad[:x.shape[0]] = x
    return pad


def _is_nccl(group) -> bool:
    return dist.get_backend(group) == "nccl"


def _all_gather_into(out: torch.Tensor, inp: torch.Tensor, group):
    """out (world*rows x ...) <- every rank's inp, async."""
    if _is_nccl(group):
        return dist.all_gather_into_tensor(out, inp, group=group, async_op=True)
    w = dist.get_world_size(group)
    return dist.all_gather(list(out.chunk(w)), inp, group=group, async_op=True)


def _reduce_scatter_into(out: torch.Tensor, inp: torch.Tensor, group):
    """out <- sum over ranks of this rank's part of inp (world*rows x ...), async."""
    if _is_nccl(group):
        return dist.reduce_scatter_tensor(out, inp, group=group, async_op=True)
    # gloo has no reduce-scatter: all-reduce, then keep this rank's part (in _Pending)
    work = dist.all_reduce(inp, group=group, async_op=True)
    return _Pending(work, out, inp.chunk(dist.get_world_size(group))[dist.get_rank(group)])


class _Pending:
    def __init__(self, work, out, part):
        self.work, self.out, self.part = work, out, part

    def wait(self):
        self.work.wait()
        self.out.copy_(self.part)


def _check_local(name, x, shape, dtype=None, device=None):
    if x.dim() != 2 or tuple(x.shape) != tuple(shape):
        raise TiledmmError(f"{name}: this rank's block should be {'x'.join(map(str, shape))}; "
                           f"got {'x'.join(map(str, x.shape))}")
    if dtype is not None and x.dtype != dtype:
        raise TiledmmError(f"{name} is {x.dtype}; the other operand is {dtype}")


# ----------------------------------------------------------------------------- SUMMA
def summa(a_local: torch.Tensor, b_local: torch.Tensor, shape: tuple, *, grid: Optional[Grid] = None,
          group=None, gemm: Optional[Gemm] = None, panel: Optional[int] = None, depth: int = 2,
          out: Optional[torch.Tensor] = None, alpha: float = 1.0, beta: float = 0.0,
          stats: Optional[dict] = None) -> torch.Tensor:
    """This rank's C block of C = alpha*A@B + beta*C by SUMMA on a 2-D grid.

    shape: (M, K, N) of the whole product. a_local, b_local: this rank's blocks
        (``Grid.blocks`` gives their index ranges; ``scatter_summa`` makes them).
    panel: K-panel width (default: the blocks' own K ranges, cut where A's and B's
        K splits differ). depth: panels in flight (receive buffers per operand).
    out: this rank's C block (read when beta != 0); default a new tensor.
    """
    m, k, n = shape
    grid = grid or Grid.make(group)
    gemm = gemm or tiledmm_gemm()
    blk = grid.blocks(m, k, n)
    (ar0, ar1), (ac0, ac1) = blk["a"]
    (br0, br1), (bc0, bc1) = blk["b"]
    mr, nc = ar1 - ar0, bc1 - bc0
    _check_local("a_local", a_local, (mr, ac1 - ac0))
    _check_local("b_local", b_local, (br1 - br0, nc), a_local.dtype)
    if out is None:
        out = torch.empty(mr, nc, dtype=a_local.dtype, device=a_local.device)
    else:
        _check_local("out", out, (mr, nc))
    st = _Streams(a_local.device, stats is not None)
    # K panels: cut at A's column splits (pc) and B's row splits (pr), then at most `panel` wide
    cuts = sorted({block_range(k, grid.pc, c)[0] for c in range(grid.pc)} |
                  {block_range(k, grid.pr, r)[0] for r in range(grid.pr)} | {k})
    panels = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        step = panel or (hi - lo)
        for p0 in range(lo, hi, max(step, 1)):
            p1 = min(hi, p0 + step)
            oc = next(c for c in range(grid.pc) if block_range(k, grid.pc, c)[0] <= p0 < block_range(k, grid.pc, c)[1])
            orow = next(r for r in range(grid.pr) if block_range(k, grid.pr, r)[0] <= p0 < block_range(k, grid.pr, r)[1])
            panels.append((p0, p1, oc, orow))
    wmax = max([p1 - p0 for p0, p1, *_ in panels] + [1])
    depth = max(1, depth)
    a_bufs = [torch.empty(mr * wmax, dtype=a_local.dtype, device=a_local.device) for _ in range(depth)] \
        if grid.pc > 1 else []
    b_bufs = [torch.empty(wmax * nc, dtype=b_local.dtype, device=b_local.device) for _ in range(depth)] \
        if grid.pr > 1 else []
    free_slots = list(range(depth))
    slot_ev = [None] * depth     # event: the GEMM that last read the slot's buffers
    issued = []                  # (panel index, a, b, remote handles, slot or None)
    own_handles = []
    nxt = 0
    done_first = False

    def remote_of(idx):
        """(A's panel comes from another rank, B's panel does)."""
        p0, p1, oc, orow = panels[idx]
        return grid.pc > 1 and mr * (p1 - p0) > 0 and oc != grid.col, \
            grid.pr > 1 and (p1 - p0) * nc > 0 and orow != grid.row

    def operands(idx, slot):
        """Panel idx's operands of the local product: the receive buffers of ``slot`` for a panel
        another rank owns, else views of this rank's blocks."""
        p0, p1, _, _ = panels[idx]
        w = p1 - p0
        a_remote, b_remote = remote_of(idx)
        return (a_bufs[slot][:mr * w].view(mr, w) if a_remote else a_local[:, p0 - ac0:p1 - ac0],
                b_bufs[slot][:w * nc].view(w, nc) if b_remote else b_local[p0 - br0:p1 - br0])

    def issue(idx):
        p0, p1, oc, orow = panels[idx]
        w = p1 - p0
        a_remote, b_remote = remote_of(idx)
        slot = free_slots.pop(0) if (a_remote or b_remote) else None
        after = [slot_ev[slot]] if slot is not None and slot_ev[slot] is not None else []
        remote = []
        a_t, b_t = operands(idx, slot)
        a_own = a_local[:, p0 - ac0:p1 - ac0]
        if grid.pc > 1 and mr * w > 0:
            src = grid.global_rank(grid.row, oc)
            if a_remote:
                fn = (lambda t=a_t, s_=src: dist.broadcast(t, src=s_, group=grid.row_group, async_op=True))
            else:     # the owner sends its panel (a contiguous copy, made on the comm stream, if it is a slice)
                fn = (lambda t=a_own, s_=src: dist.broadcast(t if t.is_contiguous() else t.contiguous(), src=s_,
                                                             group=grid.row_group, async_op=True))
            h = _comm(st, f"bcast A[{p0}:{p1}]", fn, after if a_remote else None)
            (remote if a_remote else own_handles).append(h)
        if grid.pr > 1 and w * nc > 0:
            src = grid.global_rank(orow, grid.col)
            h = _comm(st, f"bcast B[{p0}:{p1}]",
                      lambda t=b_t, s_=src: dist.broadcast(t, src=s_, group=grid.col_group, async_op=True),
                      after if b_remote else None)
            (remote if b_remote else own_handles).append(h)
        issued.append((idx, a_t, b_t, remote, slot))

    with st.on(st.compute):
        if beta == 0 and (not panels or mr * nc == 0):
            out.zero_()
        if st.gpu and mr * nc > 0:
            _prepare_local(gemm, [(*operands(i, 0), beta if i == 0 else 1.0) for i in range(len(panels))],
                           out, alpha)
        while nxt < len(panels) and nxt < depth:
            issue(nxt)
            nxt += 1
        while issued:
            # a panel this rank already holds needs no wait: multiply it first
            pick = next((x for x in issued if not x[3]), issued[0])
            issued.remove(pick)
            idx, a_t, b_t, remote, slot = pick
            for h in remote:
                _land(st, h)
            ev = None
            if mr * nc > 0:
                b_eff = beta if not done_first else 1.0
                ev = _gemm_call(st, gemm, a_t, b_t, out, alpha, b_eff, f"gemm K[{panels[idx][0]}:{panels[idx][1]}]")
                done_first = True
            if slot is not None:
                slot_ev[slot] = ev
                free_slots.append(slot)
            if nxt < len(panels):
                issue(nxt)
                nxt += 1
        if not done_first and mr * nc > 0:        # K == 0
            out.mul_(beta) if beta != 0 else out.zero_()
        if not st.gpu:
            for h in own_handles:                 # sends from this rank's blocks have finished
                _land(st, h)
        st.finish(stats)
    if stats is not None:
        stats.update({"algo": "summa", "grid": (grid.pr, grid.pc), "panels": len(panels)})
    return out


# ----------------------------------------------------------------------------- all-gather, then matmul (overlapped)
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
            handles.append((buf, _comm(st, f"allgather rows[{c0}:{c1}]",
                                       lambda b=buf, x=a_shard[c0:c1], r=rows: _all_gather_into(b, _padded(x, r), group))))
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


# ----------------------------------------------------------------------------- matmul, then reduce-scatter (overlapped)
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
            for d in range(w):
                s0, s1 = block_range(m, w, d)
                take = max(0, min(c1, s1 - s0) - c0)
                if take > 0:
                    _gemm_call(st, gemm, a_local[s0 + c0:s0 + c0 + take], b_local,
                                      part[d * rows:d * rows + take], 1.0, 0.0, f"gemm dest {d} rows[{c0}:{c0 + take}]")
                if take < rows:
                    part[d * rows + take:(d + 1) * rows].zero_()
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
