"""The one timing method every number in tiledmm comes from.

Autotuners (Triton configs, variant choice, the SIMT rung-10 shapes), the harness,
the benchmark and benchmarks/ (docs/performance.md's numbers) all call ``time_calls``:

* warm up (compilation, module load and clock ramp-up stay out of the numbers);
* one pair of CUDA events around a *batch* of many queued calls -- so the host's
  launch cost overlaps the GPU work as it does in a user's program, and a single
  launch's event jitter does not dominate a short kernel;
* the calls rotate through several input sets (the caller passes one callable per
  set), so a small problem is not timed from a warm L2;
* the median over several batches.

``device_and_host`` is the same measurement with the GPU's and the host's share apart (each
batch queued behind a GPU sleep): the Triton dispatcher chooses with it, since for a small
problem the queued time is the launch path's, alike for every candidate.

Nothing here imports the checking harness: kernels and tuners may use it freely.
In emulation (no GPU) the host clock stands in; such times say nothing about a GPU.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Callable, Sequence

from . import _adapter, _backend

Call = Callable[[], object]


def _cuda_timer():
    import torch
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


SLOW_MS = 100.0    # time_calls: the batches of a call that outlasts a batch on its own, at most this long together


def time_calls(calls: Sequence[Call] | Call, *, batches: int = 5, per_batch: int | None = None,
               warmup: int = 2, batch_ms: float = 10.0, max_per_batch: int = 1000) -> float:
    """Median milliseconds per call.

    calls: one callable per input set (or a single callable); each enqueues one run.
    per_batch: calls between the two events; default: enough for about ``batch_ms``
        of GPU time (at least 3, at most ``max_per_batch``), from a first timed batch.
        Where one call lasts ``batch_ms`` or more (a batch of one), ``batches`` is cut to what fits in
        ``SLOW_MS``, three at least: so long a call varies little from run to run, and ten batches of the
        lectures' naive kernel (35 ms a call) took a third of the main job's time.
    """
    calls = _listed(calls, "time_calls")
    if _backend.emulating():
        return _host_time(calls, max(batches, 1))
    _warm(calls, warmup)
    if per_batch is None:
        per_batch, one_ms = _batch_size(calls, batch_ms, max_per_batch)
        if per_batch == 1:
            batches = min(batches, max(3, math.ceil(SLOW_MS / one_ms)))
    times = [_batch(calls, per_batch, b * per_batch) / per_batch for b in range(max(batches, 1))]
    return statistics.median(times)


def _listed(calls, who: str) -> list:
    calls = [calls] if callable(calls) else list(calls)
    if not calls:
        raise ValueError(f"{who} needs at least one callable")
    return calls


def _warm(calls: list, warmup: int) -> None:
    """Warm-up calls (compilation, module load, clocks), then wait for them."""
    import torch
    for i in range(max(warmup, 1)):
        calls[i % len(calls)]()
    torch.cuda.synchronize()


def _batch_size(calls: list, batch_ms: float, max_per_batch: int) -> tuple[int, float]:
    """(calls a batch, ms a call as timed): a batch for about ``batch_ms`` of queued time (at least 3), from a
    first batch of 3 -- but one where a single call already lasts ``batch_ms`` (the events' cost is nothing
    beside it, and three of a slow kernel's calls a batch tripled the main job's time)."""
    one = _batch(calls, 1, 0)
    if one >= batch_ms:
        return 1, one
    est = _batch(calls, 3, 1) / 3
    return int(min(max_per_batch, max(3, math.ceil(batch_ms / max(est, 1e-4))))), est


def _batch(calls: list, n: int, offset: int) -> float:
    import torch
    start, end = _cuda_timer()
    start.record()
    for i in range(n):
        calls[(offset + i) % len(calls)]()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


_SLEEP_TRIES = 4     # device_and_host: batches queued again behind a longer sleep when the host was slow


def device_and_host(calls: Sequence[Call] | Call, *, batches: int = 3, warmup: int = 1, batch_ms: float = 5.0,
                    max_per_batch: int = 500) -> tuple[float, float]:
    """(GPU ms per call, host ms per call), apart: the same queued batches between a pair of
    events, but each batch queued behind a GPU sleep long enough for the host to enqueue all
    of it, so the events see the GPU's work back to back however slow the launches; the host's
    enqueue time per call is read from the host clock meanwhile (the least over batches: host
    noise only adds). A batch the host took longer to queue than the sleep lasted (the first
    calls of a process, a busy host) is queued again behind a longer sleep. For choosing
    between kernels of small problems, where ``time_calls`` sees only the launch path (the
    same for every candidate) and the choice would be noise."""
    calls = _listed(calls, "device_and_host")
    if _backend.emulating():
        t = _host_time(calls, max(batches, 1))
        return t, t
    import torch
    _warm(calls, warmup)
    t0 = time.perf_counter()
    for i in range(3):
        calls[i % len(calls)]()
    host_est = (time.perf_counter() - t0) / 3
    n, _ = _batch_size(calls, batch_ms, max_per_batch)
    sleep_s = 1.5 * n * host_est + 50e-6
    device, host = [], []
    for b in range(max(batches, 1)):
        for _ in range(_SLEEP_TRIES):
            torch.cuda.synchronize()
            _adapter.gpu_sleep(int(2e9 * sleep_s))        # >= that long at <= 2 GHz
            start, end = _cuda_timer()
            start.record()
            t0 = time.perf_counter()
            for i in range(n):
                calls[(b * n + i) % len(calls)]()
            queued_s = time.perf_counter() - t0
            end.record()
            end.synchronize()
            if queued_s < 0.8 * sleep_s:      # the GPU still slept when the batch was queued: it ran back to back
                break
            sleep_s = 2.0 * queued_s + 50e-6  # the host was slower than estimated: again, behind a longer sleep
        host.append(queued_s * 1e3 / n)
        device.append(start.elapsed_time(end) / n)
    return statistics.median(device), min(host)


def _host_time(calls: list, repeats: int) -> float:
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        calls[i % len(calls)]()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def wall_us_per_call(call: Call, *, n: int = 200, warmup: int = 20, repeats: int = 5) -> float:
    """Host wall time per call of ``call`` queued ``n`` times (synchronised at the end):
    the per-call cost a user sees when the GPU work is shorter than the launch path.
    Median of ``repeats``, in microseconds."""
    sync = _sync()
    for _ in range(warmup):
        call()
    sync()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            call()
        sync()
        out.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(out)


def _sync() -> Callable[[], None]:
    if _backend.emulating():
        return lambda: None
    import torch
    return torch.cuda.synchronize


def rotation_for(shape: tuple, dtype: str, l2_bytes: int = 50 * 2**20) -> int:
    """How many input sets to rotate through so that they do not all fit in L2 (max 8): the one timing
    method's rotation, for the harness, the bench and the tuner alike."""
    *batch, m, k, n = shape
    itemsize = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}.get(dtype) or _itemsize(dtype)
    one = (batch[0] if batch else 1) * (m * k + k * n + m * n) * itemsize
    return int(min(8, max(1, -(-3 * l2_bytes // one))))


def _itemsize(dtype: str) -> int:
    import numpy as np
    return np.dtype(dtype).itemsize


__all__ = ["time_calls", "device_and_host", "wall_us_per_call", "rotation_for"]
