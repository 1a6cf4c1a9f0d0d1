"""Streams, events and collectives shared by the distributed algorithms: the compute stream and
named communication streams on a GPU (plain calls on the CPU), collectives issued on a
communication stream and landed on the compute stream with events (the host never waits), gloo
fallbacks for NCCL-only collectives, the first-use run of each distinct local product, and the
timeline a call records when asked (per span: the host's issue time, the GPU's start and end, and
for a local product what the compute stream waited for)."""
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


_side: dict = {}       # (device index, name) -> the communication stream of that name on that device


def side_stream(device: torch.device, name: str):
    """The communication stream ``name`` of ``device`` (made once per device and name: a product's
    collectives of one kind queue on one stream, other kinds run beside them)."""
    key = (device.index, name)
    s = _side.get(key)
    if s is None:
        s = _side[key] = torch.cuda.Stream(device)
    return s


class _Streams:
    """The compute stream and named communication streams on a GPU; plain calls on the CPU.
    Records (stream, what, host issue time, start event, end event, waited-for) for a timeline."""

    def __init__(self, device: torch.device, timeline: bool, comm_names=("comm",)):
        self.gpu = device.type == "cuda"
        self.timeline = timeline
        self.names = tuple(comm_names)
        self.h0 = time.perf_counter()
        if self.gpu:
            self.compute = torch.cuda.current_stream(device)
            self.comms = {n: side_stream(device, n) for n in self.names}
            for s in self.comms.values():
                s.wait_stream(self.compute)           # inputs written before the call are visible
        else:
            self.compute = None
            self.comms = {n: None for n in self.names}
        self.comm = self.comms[self.names[0]]
        self.t0 = self.event()
        self.rec(self.t0, self.compute)
        self.spans = []
        self.landed = []                              # names of the collectives landed since the last product

    def event(self):
        return torch.cuda.Event(enable_timing=self.timeline) if self.gpu else _NoEvent()

    def rec(self, ev, stream):
        ev.record(stream) if self.gpu else ev.record()

    def on(self, stream):
        return torch.cuda.stream(stream) if self.gpu else contextlib.nullcontext()

    def wait(self, stream, ev):
        if self.gpu and ev is not None:
            stream.wait_event(ev)

    def follow(self, waiter, waited) -> None:
        """Stream ``waiter`` waits for everything queued on ``waited`` so far (nothing to do on the CPU)."""
        if self.gpu:
            waiter.wait_stream(waited)

    def host_ms(self) -> float:
        return (time.perf_counter() - self.h0) * 1e3

    def span(self, stream_name, what, e0, e1, issued=None, after=()):
        if self.timeline:
            self.spans.append((stream_name, what, self.host_ms() if issued is None else issued, e0, e1,
                               tuple(after)))

    def finish(self, stats: Optional[dict]):
        """The compute stream waits for every communication stream; fill stats (synchronises if asked):
        ``timeline`` rows (stream, what, issued, start, end, waited-for) in ms from the call's start
        (issued: host clock; start, end: the GPU's), busy ms per stream, ``span_ms``, and
        ``compute_wait_ms`` (the compute stream idle between its first product's start and its last's end)."""
        if self.gpu:
            for s in self.comms.values():
                self.compute.wait_stream(s)
        if stats is None:
            return
        if self.gpu:
            torch.cuda.current_stream().synchronize()
        busy, tl = {}, []
        for s, what, issued, e0, e1, after in self.spans:
            a, b = self.t0.elapsed_time(e0), self.t0.elapsed_time(e1)
            busy[s] = busy.get(s, 0.0) + (b - a)
            tl.append((s, what, round(issued, 4), round(a, 4), round(b, 4), list(after)))
        end = max([row[4] for row in tl] + [0.0])
        comp = sorted((row[3], row[4]) for row in tl if row[0] == "compute")
        idle = sum(max(0.0, s1 - e0) for (_, e0), (s1, _) in zip(comp, comp[1:])) if comp else 0.0
        stats.update({"span_ms": end, "timeline": tl, "compute_wait_ms": idle,
                      "first_compute_ms": comp[0][0] if comp else None,
                      **{f"{s}_ms": v for s, v in busy.items()}})
        stats["comm_ms"] = sum(v for k, v in busy.items() if k != "compute")


class _Handle:
    """A collective in flight: on a GPU the event that ends it on its communication stream; on the
    CPU the work to wait for."""
    __slots__ = ("ev", "work", "e0", "what", "stream", "issued")

    def __init__(self, ev, work=None, e0=None, what="", stream="", issued=0.0):
        self.ev, self.work, self.e0, self.what, self.stream, self.issued = ev, work, e0, what, stream, issued


def _comm(streams: _Streams, what: str, fn, after=None, stream: Optional[str] = None) -> _Handle:
    """Issue ``fn()`` (a collective with async_op=True, or copies) on communication stream ``stream``
    (default: the first) after the ``after`` events. On a GPU the stream waits for the collective's
    own stream with ``work.wait()`` -- a stream-side wait, the host goes on -- and an event marks the
    end; other communication streams are not held up (their collectives run beside it)."""
    s = streams
    name = stream or s.names[0]
    cs = s.comms[name]
    e0, e1 = s.event(), s.event()
    issued = s.host_ms()
    with s.on(cs):
        for ev in after or ():
            s.wait(cs, ev)
        s.rec(e0, cs)
        work = fn()
        if s.gpu:
            if work is not None:
                work.wait()
            s.rec(e1, cs)
            s.span(name, what, e0, e1, issued)
            return _Handle(e1, what=what, stream=name)
    return _Handle(e1, work, e0, what, name, issued)


def _land(streams: _Streams, handle: Optional[_Handle]) -> None:
    """Make the compute stream wait for a collective issued with ``_comm`` (an event wait on a GPU;
    the work's wait on the CPU)."""
    if handle is None:
        return
    if streams.gpu:
        streams.wait(streams.compute, handle.ev)
    elif handle.work is None and handle.e0 is None:
        return                                        # landed before
    else:
        if handle.work is not None:
            handle.work.wait()
            handle.work = None
        streams.rec(handle.ev, None)
        streams.span(handle.stream, handle.what, handle.e0, handle.ev, handle.issued)
        handle.e0 = None
    streams.landed.append(handle.what)


_prepared: set = set()


def _prepare_local(gemm, products, out, alpha) -> None:
    """Run each distinct local product (shapes, strides, 16-byte alignment, beta) once into a
    scratch output before any collective is issued, the first time this process meets it: its
    kernel is compiled, and under ``TILEDMM_TUNE=on`` timed, on a quiet GPU rather than against
    the NCCL kernels of the panels in flight, which skewed timed choices. The operands may be
    receive buffers not yet written: only their layout matters."""
    scratch = None
    for a, b, beta in products:
        key = (getattr(gemm, "__qualname__", type(gemm).__name__), a.dtype, a.device.index, tuple(a.shape),
               a.stride(), tuple(b.shape), b.stride(), a.data_ptr() % 16, b.data_ptr() % 16, beta == 0.0,
               alpha == 1.0)
        if key in _prepared or 0 in a.shape or 0 in b.shape:
            continue
        _prepared.add(key)
        if scratch is None:
            scratch = torch.zeros_like(out)
        gemm(a, b, scratch, alpha, beta)


def _gemm_call(streams: _Streams, gemm, a, b, c, alpha, beta, what):
    """A local product on the compute stream (events around it; the collectives landed since the last
    product are what it waited for)."""
    issued = streams.host_ms()
    e0, e1 = streams.event(), streams.event()
    streams.rec(e0, streams.compute)
    gemm(a, b, c, alpha, beta)
    streams.rec(e1, streams.compute)
    streams.span("compute", what, e0, e1, issued, streams.landed)
    streams.landed = []
    return e1


def _padded(x: torch.Tensor, rows: int) -> torch.Tensor:
    """x with zero rows appended up to ``rows`` (made on the current stream); x itself when it has them."""
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
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or tuple(x.shape) != tuple(shape):
        got = "x".join(map(str, x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__
        raise TiledmmError(f"{name}: this rank's block should be {'x'.join(map(str, shape))}; got {got}")
    if dtype is not None and x.dtype != dtype:
        raise TiledmmError(f"{name} is {x.dtype}; the other operand is {dtype}")


def _check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise TiledmmError(f"engine {engine!r}: one of {', '.join(ENGINES)}")


# how panels and shards travel: NCCL collectives (gloo on the CPU), or copy-engine reads of the peers'
# symmetric memory (torch's symmetric memory; GPUs of one node)
ENGINES = ("nccl", "symm")
