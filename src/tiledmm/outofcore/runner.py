"""The stream runner: one out-of-core product issued on three CUDA streams (copies in, GEMMs,
copies out), with host threads staging pageable tiles through pinned buffers, and the public
entry points ``matmul_out_of_core`` and ``warm_out_of_core``.

The schedule (schedule.py) says which GEMM runs when and which tile pieces go before it; this
module orders them with events: a slot is refilled only after the GEMMs that read it, a C slot
only after its block went back to the host. Staging threads run ahead of the copy stream along
the global piece order; results come back on their own thread so the main thread keeps queuing.

Pinned buffers: a ring of (threads + 2) staging buffers of one staged piece (8 MiB by default)
and (unstaging threads + 2) result buffers, no more than the run has pieces for. They come from
the device's pool (cudart.HostPool), so only a process's first run makes them, and lazily: a
staging buffer when its thread first stages into it (the threads fault theirs in at once), the
result buffers when the first block comes back (behind the GEMMs). They go back to the pool when
the run ends, after the device has finished every copy.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable, Optional

import numpy as np
import torch

from .._arrays import TiledmmError
from .cudart import has_memcpy2d, memcpy2d, resolve_device
from .gemms import Gemm, tiledmm_gemm
from .planner import MiB, Plan, plan_out_of_core
from .schedule import Operand, Schedule, pieces

_TINT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

# Pieces: staged ones are the size of a pinned staging (and result) buffer; smaller buffers pin
# faster, and at 8 MiB a piece's copy (~0.15 ms over PCIe Gen5) still dwarfs its issue cost.
# Pinned operands go straight to the GPU in larger pieces (no buffer to fill).
STAGED_PIECE = 8 * MiB
DIRECT_PIECE = 128 * MiB


def _np_bytes(t: torch.Tensor) -> np.ndarray:
    """A numpy view of t's elements as same-size integers (bfloat16 included)."""
    return t.view(_TINT[t.element_size()]).numpy()


def _host_copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst[:] = src on the host, same dtype, any strides; releases the GIL (numpy copyto)."""
    np.copyto(_np_bytes(dst), _np_bytes(src), casting="no")


def _check(a, b, c) -> tuple:
    """(M, K, N) of a product the out-of-core path takes, else a TiledmmError naming what is wrong."""
    for name, x in (("a", a), ("b", b), ("c", c)):
        if not isinstance(x, torch.Tensor) or x.device.type != "cpu" or x.dim() != 2:
            raise TiledmmError(f"out-of-core: {name} must be a 2-D CPU torch tensor; got "
                               f"{type(x).__name__} {getattr(x, 'shape', '')} {getattr(x, 'device', '')}")
    (M, K), (K2, N) = a.shape, b.shape
    if K2 != K or tuple(c.shape) != (M, N):
        raise TiledmmError(f"out-of-core: shapes do not chain: a {M}x{K}, b {K2}x{N}, c {'x'.join(map(str, c.shape))}")
    if a.dtype != b.dtype:
        raise TiledmmError(f"out-of-core: a is {a.dtype}, b is {b.dtype}; give both the same dtype")
    if not (a.dtype.is_floating_point and c.dtype.is_floating_point):
        raise TiledmmError(f"out-of-core: floating-point operands only; got a {a.dtype}, c {c.dtype}")
    return M, K, N


def _setup(a, b, c, beta, max_device_bytes, acc_dtype, device, plan, rates, phases: dict) -> tuple:
    """(device, 2-D copies usable, accumulator dtype, plan, a, b, c): the plan given, else planned for
    these operands (which of them can go straight to the GPU), and a, b, c in the plan's orientation
    (C^T = B^T A^T when transposed). Host seconds go into ``phases`` (setup_s, plan_s)."""
    t0 = time.perf_counter()
    dev = resolve_device(device)
    two_d = has_memcpy2d(dev)
    acc = acc_dtype or c.dtype
    direct = tuple(Operand(x, dev, two_d).direct for x in (a, b, c))
    t1 = time.perf_counter()
    if plan is None:
        (M, K), N = a.shape, b.shape[1]
        plan = plan_out_of_core(M, N, K, a.dtype, c_dtype=c.dtype, acc_dtype=acc, beta_nonzero=beta != 0,
                                max_device_bytes=max_device_bytes, direct=direct, device=dev.device, rates=rates)
    phases.update(setup_s=t1 - t0, plan_s=time.perf_counter() - t1)
    if plan.transposed:
        a, b, c = b.t(), a.t(), c.t()
    return dev, two_d, acc, plan, a, b, c


def matmul_out_of_core(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *, alpha: float = 1.0,
                       beta: float = 0.0, max_device_bytes: Optional[int] = None, gemm: Optional[Gemm] = None,
                       progress: Optional[Callable[[int, int], object]] = None, stats: Optional[dict] = None,
                       acc_dtype: Optional[torch.dtype] = None, device=None, host_threads: Optional[int] = None,
                       piece_bytes: Optional[int] = None, plan: Optional[Plan] = None,
                       rates: Optional[dict] = None) -> None:
    """c = alpha * a @ b + beta * c for CPU tensors, on the GPU in blocks that fit its memory.

    a (M x K), b (K x N), c (M x N): CPU torch tensors, any strides (c is written in place).
    gemm(a_dev, b_dev, c_dev, alpha, beta): the device GEMM, in place on c_dev; default
        ``tiledmm_gemm()`` (the Triton block kernel).
    max_device_bytes: device budget for tiles (default: free memory less a reserve); the
        GEMM's own workspace is outside it.
    acc_dtype: dtype of the device C blocks (e.g. float32 for bfloat16 c when K is split,
        so partial sums are not rounded to bfloat16; the gemm must accept it).
    progress(done, total): GEMM calls finished so far.
    host_threads: staging threads (default: CPUs, at most 8).
    piece_bytes: the pieces tiles are copied in: through host staging (and results back) pieces
        of piece_bytes (default 8 MiB: the pinned buffers' size), straight from pinned operands
        4 x piece_bytes (default 128 MiB).
    stats: filled with the plan, bytes moved (``pinned``: the run's pinned buffers, ``pinned_new``:
        those it had to make), per-stream busy/idle times (CUDA events), host seconds of the
        threads (``alloc_s``: making pinned buffers) and per phase (setup, plan, build: the
        schedule and device slots, staging: host threads, issue, finish).
    """
    M, K, N = _check(a, b, c)
    t_start = time.perf_counter()
    if M == 0 or N == 0:
        return
    if K == 0 or alpha == 0:
        if beta == 0:
            c.zero_()
        elif beta != 1:
            c.mul_(beta)
        return
    phases: dict = {}
    dev, two_d, acc, plan, a, b, c = _setup(a, b, c, beta, max_device_bytes, acc_dtype, device, plan, rates, phases)
    gemm = gemm or tiledmm_gemm()
    threads = host_threads or max(1, min(8, (os.cpu_count() or 2)))
    pieces_ = (piece_bytes, 4 * piece_bytes) if piece_bytes else (STAGED_PIECE, DIRECT_PIECE)
    run = _Run(plan, a, b, c, float(alpha), float(beta), gemm, dev, two_d, acc, threads, pieces_, progress)
    run.phases.update(phases)
    run.execute()
    if stats is not None:
        stats.update(run.stats(time.perf_counter() - t_start))


def warm_out_of_core(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *, alpha: float = 1.0, beta: float = 0.0,
                     max_device_bytes: Optional[int] = None, gemm: Optional[Gemm] = None,
                     acc_dtype: Optional[torch.dtype] = None, device=None, plan: Optional[Plan] = None,
                     rates: Optional[dict] = None) -> Plan:
    """Plan as ``matmul_out_of_core`` would with the same arguments, and run the GEMM callback once on
    every distinct block shape of that plan (device tiles of random numbers, nothing copied), so that
    first-call costs (compilation; tuning under TILEDMM_TUNE=on) stay out of the product itself.
    Returns the plan."""
    _check(a, b, c)
    dev, two_d, acc, plan, a, b, c = _setup(a, b, c, beta, max_device_bytes, acc_dtype, device, plan, rates, {})
    gemm = gemm or tiledmm_gemm()
    run = _Run(plan, a, b, c, float(alpha), float(beta), gemm, dev, two_d, acc, 1, (STAGED_PIECE, DIRECT_PIECE), None)
    run._build()
    with (torch.cuda.device(dev.device) if dev.gpu else contextlib.nullcontext()), dev.on(dev.compute):
        for sl in run.slots:
            sl.buf.normal_()
        seen = set()
        for st in run.steps:
            beta_s = run.beta if st.first else 1.0
            cl = run.C.logical(st.c_dev)
            key = (tuple(st.a_dev.shape), st.a_dev.stride(), tuple(st.b_dev.shape), st.b_dev.stride(),
                   tuple(cl.shape), cl.stride(), beta_s != 0)
            if key in seen:
                continue
            seen.add(key)
            gemm(st.a_dev, st.b_dev, cl, run.alpha, beta_s)
    dev.sync()
    return plan


def _nbytes(pc: tuple, esz: int) -> int:
    """Bytes of piece (r0, r1, c0, c1) of elements of esz bytes."""
    r0, r1, c0, c1 = pc
    return (r1 - r0) * (c1 - c0) * esz


class _Run:
    """One product in flight: the schedule, the staging pools, the drain thread, and what happened
    (per-stream intervals from events, bytes moved, host seconds) for ``stats``."""

    def __init__(self, plan, a, b, c, alpha, beta, gemm, dev, two_d, acc, threads, piece_bytes: tuple, progress):
        self.plan, self.alpha, self.beta, self.gemm, self.dev = plan, alpha, beta, gemm, dev
        self.progress = progress
        # device C blocks: c's dtype when K is not split (the GEMM rounds once either way); else the
        # accumulator's, cast to c's dtype on the GPU (compute stream) before going back
        self.acc = acc if plan.n_k > 1 else c.dtype
        self.A, self.B, self.C = (Operand(x, dev, two_d) for x in (a, b, c))
        self.shape = (a.shape[0], b.shape[1], a.shape[1])
        self.threads = threads
        self.piece_bytes, self.direct_piece_bytes = piece_bytes      # staged, straight
        self.c_dtype, self.ab_dtype = c.dtype, a.dtype
        self.intervals = []           # (stream, kind, start_ev, end_ev)
        self.host = {"stage_s": 0.0, "unstage_s": 0.0, "wait_stage_s": 0.0, "wait_runahead_s": 0.0,
                     "wait_cslot_s": 0.0, "wait_unstage_s": 0.0, "alloc_s": 0.0}
        self.phases = {}
        self.bytes = {"h2d": 0, "d2h": 0, "staged_in": 0, "staged_out": 0, "pinned": 0, "pinned_new": 0}
        self.stage_bufs, self.out_bufs = [], []
        self._lock = threading.Lock()

    def _build(self):
        s = Schedule(self.plan, self.A, self.B, self.C, self.shape, self.dev, self.ab_dtype, self.acc,
                     self.c_dtype, self.beta, self.piece_bytes, self.direct_piece_bytes)
        self.slots, self.steps, self.after = s.slots, s.steps, s.after

    # ---- running it
    def execute(self):
        t_b = time.perf_counter()
        self._build()
        t_s = time.perf_counter()
        self._open_staging()
        self.phases["staging_s"] = time.perf_counter() - t_s     # host threads (pinned buffers come later)
        dev = self.dev
        drain = threading.Thread(target=self._drain, name="tiledmm-drain", daemon=True)
        self.t0_ev = dev.event()
        self.done_evs = []
        try:
            with (torch.cuda.device(dev.device) if dev.gpu else contextlib.nullcontext()):
                dev.record(self.t0_ev, dev.compute)
                dev.wait(dev.copy_in, self.t0_ev)
                dev.wait(dev.copy_out, self.t0_ev)
                drain.start()
                self.phases["build_s"] = time.perf_counter() - t_b - self.phases["staging_s"]
                t_i = time.perf_counter()
                self._refill()
                self._main()
                self.phases["issue_s"] = time.perf_counter() - t_i
                t_f = time.perf_counter()
                self._finish(drain)
                self.phases["finish_s"] = time.perf_counter() - t_f
        finally:
            if drain.is_alive():
                with self.drain_cv:
                    self.drain_q.append(None)
                    self.drain_cv.notify()
                drain.join()
            self.pool.shutdown(wait=True)
            self.out_pool.shutdown(wait=True)
            self._close_staging()
        if self.progress:
            self.progress(len(self.steps), len(self.steps))

    def _open_staging(self):
        """Host thread pools and the sizes of the pinned buffers (made on first use: ``_pinned``):
        pieces in (along the global piece order), results out (unless they go straight into a
        pinned c); the drain queue."""
        dev = self.dev
        order = []                     # the global piece order (staging runs ahead along it)
        for s in range(len(self.steps) + 1):
            order.extend(self.after[s])
        # panels spread over a column may land before loads needed earlier in the same slot:
        # order is what the copy stream sees; every piece's slot condition was met when placed
        staged = [x for x in order if not x[0].direct]
        self.stage_size = max([_nbytes(pc, ld.host.element_size()) for ld, pc in staged] + [1])
        nstage = min(self.threads + 2, len(staged))
        self.stage_bufs = [None] * nstage
        self.stage_evs = [dev.event() for _ in range(nstage)]
        self.stage_rec = [False] * nstage
        self.staged_order, self.stage_next, self.stage_futs = staged, 0, {}
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="tiledmm-stage")
        # results straight into a pinned c (2-D copies), else through pinned buffers and host threads
        self.c_store_direct = self.C.direct and (self.C.two_d or all(st.c_host.is_contiguous() for st in self.steps))
        out_threads = 1 if self.c_store_direct else max(2, min(8, self.threads))
        self.out_pool = ThreadPoolExecutor(out_threads, thread_name_prefix="tiledmm-unstage")
        self.drain_q, self.drain_err = [], None
        self.drain_cv = threading.Condition()
        out = [] if self.c_store_direct else [pc for st in self.steps if st.last for pc in self._out_pieces(st)]
        self.out_size = max([_nbytes(pc, self.C.esz) for pc in out] + [1])
        self.out_bufs = [None] * min(out_threads + 2, len(out))
        self.out_evs = [dev.event() for _ in self.out_bufs]
        self.out_futs = [None] * len(self.out_bufs)
        self.out_next = 0

    def _out_pieces(self, st) -> list:
        rows, cols = st.c_host.shape
        return pieces(rows, cols, self.C.esz, self.piece_bytes)

    def _pinned(self, nbytes: int) -> torch.Tensor:
        """A pinned buffer of at least nbytes from the device's pool (made there if none is free)."""
        t = time.perf_counter()
        buf, new = self.dev.host_pool.take(nbytes)
        with self._lock:
            self.host["alloc_s"] += time.perf_counter() - t
            self.bytes["pinned"] += buf.numel()
            self.bytes["pinned_new"] += buf.numel() if new else 0
        return buf

    def _open_out(self):
        """The result buffers, when the first block comes back: taken (made, on a first run) by the
        unstaging threads at once."""
        futs = [self.out_pool.submit(self._pinned, self.out_size) for _ in self.out_bufs]
        wait(futs)
        for k, f in enumerate(futs):          # every buffer taken is kept (and given back) before any error
            if f.exception() is None:
                self.out_bufs[k] = f.result()
        for f in futs:
            f.result()

    def _close_staging(self):
        """The run's pinned buffers back to the pool once no copy can still use them: after an error
        the device is synchronised here first (the normal end did already); buffers of a device that
        fails to synchronise are not reused."""
        bufs = [b for b in self.stage_bufs + self.out_bufs if b is not None]
        if not bufs:
            return
        try:
            self.dev.sync()
        except Exception:     # noqa: BLE001 -- the run's own error is the one to see
            return
        self.dev.host_pool.give(bufs)

    def _finish(self, drain: threading.Thread):
        """Wait for the drain thread and the unstaging copies, mark each stream's end, synchronise."""
        dev = self.dev
        with self.drain_cv:
            self.drain_q.append(None)
            self.drain_cv.notify()
        drain.join()
        for f in self.out_futs:
            if f is not None:
                f.result()
        self.end_evs = []
        for s in (dev.compute, dev.copy_in, dev.copy_out):
            e = dev.event()
            dev.record(e, s)
            self.end_evs.append(e)
        dev.sync()
        if self.drain_err is not None:
            raise self.drain_err

    def _refill(self):
        """Start host staging copies for upcoming pieces (ring of pinned buffers)."""
        nst = len(self.stage_bufs)
        while self.stage_next < len(self.staged_order) and len(self.stage_futs) < nst:
            q = self.stage_next
            k = q % nst
            ld, pc = self.staged_order[q]
            ev = self.stage_evs[k] if self.stage_rec[k] else None
            self.stage_futs[q] = (k, self.pool.submit(self._stage, ld, pc, k, ev))
            self.stage_next += 1

    def _stage(self, ld, pc, k, ev):
        """Copy piece pc of load ld into staging buffer k (made here, by this thread, on its first use;
        else once the H2D that last read it has finished); the piece's view of the buffer."""
        if ev is not None:
            ev.synchronize()          # the H2D that last read this buffer has finished
        elif self.stage_bufs[k] is None:
            self.stage_bufs[k] = self._pinned(self.stage_size)
        t = time.perf_counter()
        r0, r1, c0, c1 = pc
        src = ld.host[r0:r1, c0:c1]
        buf = self.stage_bufs[k][: _nbytes(pc, src.element_size())].view(src.dtype).view(r1 - r0, c1 - c0)
        _host_copy(buf, src)
        with self._lock:
            self.host["stage_s"] += time.perf_counter() - t
        return buf

    def _main(self):
        dev, S = self.dev, len(self.steps)
        q_staged = 0
        runahead = 4
        for s in range(S + 1):
            for ld, pc in self.after[s]:
                q_staged = self._issue_piece(ld, pc, q_staged)
            if s == S:
                break
            st = self.steps[s]
            if s >= runahead:
                t = time.perf_counter()
                self.done_evs[s - runahead].synchronize()
                self.host["wait_runahead_s"] += time.perf_counter() - t
                if self.progress:
                    self.progress(s - runahead + 1, S)
            with dev.on(dev.compute):
                for ld in (st.a, st.b, st.c_load):
                    if ld is not None:
                        assert ld.recorded, "tiledmm out-of-core: a tile was not loaded before its GEMM"
                        dev.wait(dev.compute, ld.loaded_ev)
                beta = self.beta if st.first else 1.0
                if st.first and st.c_load is None:     # beta == 0: the GEMM never reads the block
                    self._wait_slot(st.c_slot, dev.compute)
                e0, e1 = dev.event(), dev.event()
                dev.record(e0, dev.compute)
                self.gemm(st.a_dev, st.b_dev, self.C.logical(st.c_dev), self.alpha, beta)
                dev.record(e1, dev.compute)
                self.intervals.append(("compute", "gemm", e0, e1))
                self.done_evs.append(e1)
                done = e1
                if st.last and st.c_cast is not None:
                    done = dev.event()
                    st.c_cast.copy_(st.c_dev)
                    dev.record(done, dev.compute)
                    self.intervals.append(("compute", "cast", e1, done))
                for ld in (st.a, st.b):
                    dev.record(ld.slot.free_ev, dev.compute)
                    ld.slot.free_recorded = True
            if st.last:
                st.c_slot.issued.clear()
                with self.drain_cv:
                    self.drain_q.append((st, done))
                    self.drain_cv.notify()
            if self.drain_err is not None:
                raise self.drain_err

    def _wait_slot(self, slot, stream):
        if not slot.issued.is_set():
            t = time.perf_counter()
            while not slot.issued.wait(1.0):
                if self.drain_err is not None:
                    raise self.drain_err
            self.host["wait_cslot_s"] += time.perf_counter() - t
        if slot.free_recorded:
            self.dev.wait(stream, slot.free_ev)

    def _issue_piece(self, ld, pc, q_staged):
        dev = self.dev
        r0, r1, c0, c1 = pc
        first = pc is ld.pieces[0]
        dst = ld.dev[r0:r1, c0:c1]
        nbytes = _nbytes(pc, ld.host.element_size())
        if first:
            # a slot is refilled only after the GEMMs that read its old contents; the K-chunks of one
            # resident panel share a slot, so a later chunk must not wait for the GEMMs reading the
            # panel's earlier chunks (a false dependency: it held each chunk of panel 0 back until the
            # GEMM before it had finished -- 414 ms of idle compute in the fp32 90000^3 run)
            panel = getattr(ld, "panel", None)
            if panel is None or getattr(ld.slot, "owner", None) != panel:
                self._wait_slot(ld.slot, dev.copy_in)
            if panel is not None:
                ld.slot.owner = panel
        if ld.direct:
            e0, e1 = dev.event(), dev.event()
            dev.record(e0, dev.copy_in)
            src = ld.host[r0:r1, c0:c1]
            if src.is_contiguous() and dst.is_contiguous():
                with dev.on(dev.copy_in):
                    dst.copy_(src, non_blocking=True)
            else:
                memcpy2d(dst, src, 1, dev.copy_in)
            dev.record(e1, dev.copy_in)
        else:
            k, fut = self.stage_futs.pop(q_staged)
            t = time.perf_counter()
            buf = fut.result()
            self.host["wait_stage_s"] += time.perf_counter() - t
            e0, e1 = dev.event(), dev.event()
            with dev.on(dev.copy_in):
                dev.record(e0, dev.copy_in)
                dst.copy_(buf, non_blocking=True)
                dev.record(e1, dev.copy_in)
                dev.record(self.stage_evs[k], dev.copy_in)
            self.stage_rec[k] = True
            self.bytes["staged_in"] += nbytes
            q_staged += 1
            self._refill()
        self.intervals.append(("copy_in", "h2d", e0, e1))
        self.bytes["h2d"] += nbytes
        if pc is ld.pieces[-1]:
            dev.record(ld.loaded_ev, dev.copy_in)
            ld.recorded = True
        return q_staged

    # ---- results back to the host (own thread, so the main thread keeps queuing GEMMs)
    def _drain(self):
        dev = self.dev
        try:
            with (torch.cuda.device(dev.device) if dev.gpu else contextlib.nullcontext()):
                while True:
                    with self.drain_cv:
                        while not self.drain_q:
                            self.drain_cv.wait()
                        item = self.drain_q.pop(0)
                    if item is None:
                        return
                    st, done = item
                    dev.wait(dev.copy_out, done)
                    self._store(st)
                    dev.record(st.c_slot.free_ev, dev.copy_out)
                    st.c_slot.free_recorded = True
                    st.c_slot.issued.set()
        except BaseException as e:  # noqa: BLE001 -- handed to the main thread
            self.drain_err = e
            for sl in self.slots:
                sl.issued.set()

    def _store(self, st):
        dev, C = self.dev, self.C
        rows, cols = st.c_host.shape
        src_dev = st.c_cast if st.c_cast is not None else st.c_dev
        if self.c_store_direct:
            e0, e1 = dev.event(), dev.event()
            dev.record(e0, dev.copy_out)
            if st.c_host.is_contiguous():
                with dev.on(dev.copy_out):
                    st.c_host.copy_(src_dev, non_blocking=True)
            else:
                memcpy2d(st.c_host, src_dev, 2, dev.copy_out)
            dev.record(e1, dev.copy_out)
            self.intervals.append(("copy_out", "d2h", e0, e1))
            self.bytes["d2h"] += rows * cols * C.esz
            return
        if self.out_bufs[0] is None:
            self._open_out()
        for pc in self._out_pieces(st):
            r0, r1, c0, c1 = pc
            k = self.out_next % len(self.out_bufs)
            self.out_next += 1
            if self.out_futs[k] is not None:
                t = time.perf_counter()
                self.out_futs[k].result()
                self.host["wait_unstage_s"] += time.perf_counter() - t
            n = (r1 - r0) * (c1 - c0)
            buf = self.out_bufs[k][: n * C.esz].view(self.c_dtype).view(r1 - r0, c1 - c0)
            e0, e1 = dev.event(), dev.event()
            with dev.on(dev.copy_out):
                dev.record(e0, dev.copy_out)
                buf.copy_(src_dev[r0:r1, c0:c1], non_blocking=True)
                dev.record(e1, dev.copy_out)
                dev.record(self.out_evs[k], dev.copy_out)
            self.intervals.append(("copy_out", "d2h", e0, e1))
            self.bytes["d2h"] += n * C.esz
            self.bytes["staged_out"] += n * C.esz
            self.out_futs[k] = self.out_pool.submit(self._unstage, st.c_host[r0:r1, c0:c1], buf, self.out_evs[k])

    def _unstage(self, dst, buf, ev):
        ev.synchronize()
        t = time.perf_counter()
        _host_copy(dst, buf)
        with self._lock:
            self.host["unstage_s"] += time.perf_counter() - t

    # ---- what happened
    def stats(self, wall_s: float) -> dict:
        """The run's record for ``matmul_out_of_core(stats=)``: see its docstring."""
        busy = {"copy_in": 0.0, "compute": 0.0, "copy_out": 0.0}
        timeline = []
        t0 = self.t0_ev
        for stream, kind, e0, e1 in self.intervals:
            a, b = t0.elapsed_time(e0), t0.elapsed_time(e1)
            busy[stream] += b - a
            timeline.append((stream, kind, round(a, 4), round(b, 4)))
        span = max([t0.elapsed_time(e) for e in self.end_evs] + [0.0])
        out = {"plan": self.plan.as_dict(), "plan_text": self.plan.describe(), "wall_s": wall_s,
               "device_span_ms": span, "gpu": self.dev.gpu, "gemm_calls": len(self.steps),
               "bytes": dict(self.bytes), "host": {k: round(v, 4) for k, v in self.host.items()},
               "threads": self.threads, "memcpy2d": self.A.two_d,
               "phases": {k: round(v, 4) for k, v in self.phases.items()}}
        for k, v in busy.items():
            out[f"{k}_ms"] = v
            out[f"{k}_idle_ms"] = max(0.0, span - v)
        out["timeline"] = timeline
        return out

