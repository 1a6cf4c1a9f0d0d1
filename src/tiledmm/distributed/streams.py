"""Streams, events and collectives shared by the distributed algorithms: a compute and a
communication stream on a GPU (plain calls on the CPU), collectives issued on the communication
stream and landed on the compute stream, gloo fallbacks for NCCL-only collectives, and the
first-use run of each distinct local product."""
from __future__ import annotations

import contextlib
import time
from typing import Optional

import torch
import torch.distributed as dist

from .._arrays import TiledmmError


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
    scratch output before any collective is issued, the first time this process meets it: its
    kernel is compiled, and under ``TILEDMM_TUNE=on`` timed, on a quiet GPU rather than against
    the NCCL kernels of the panels in flight, which skewed timed choices. The operands
    may be receive buffers not yet written: only their layout matters."""
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

