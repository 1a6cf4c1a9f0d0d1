"""Memory-access traces of the SIMT kernels, recorded in numba's CUDA simulator.

The kernel runs unchanged; its arrays (the global M, N, P and every shared array)
are replaced by recording wrappers, and each barrier a thread passes is counted, so
every access is known with its block, thread, warp, phase and byte address. From
that: global loads and stores, reuse, sectors and lines per warp request
(coalescing), shared-memory bank conflicts, and per block and phase which elements
were loaded, which shared cells were zero-filled, and which threads stored P.

Warp-level requests are reconstructed by grouping the k-th access of each thread of
a warp to the same array (threads of a warp run in lockstep on the hardware).
"""
from __future__ import annotations

import threading
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from .. import _adapter

SECTOR, LINE, BANKS, BANK_BYTES = 32, 128, 32, 4


@dataclass
class Event:
    op: str          # "ld" | "st"
    array: str       # "M", "N", "P" or the shared array's name
    space: str       # "global" | "shared"
    block: tuple
    thread: tuple
    tid: int         # linear thread index in the block
    phase: int       # barriers this thread had passed
    index: tuple
    addr: int        # byte offset within the array
    zero: bool = False   # shared store of a literal 0 (the lectures' zero-fill)
    src: tuple | None = None   # shared store: the (global array, index) this thread loaded just before


class Recorder:
    def __init__(self):
        self.events: list[Event] = []
        self.lock = threading.Lock()
        # per simulated thread (blockIdx, threadIdx): barriers passed, the last global load. Keyed by the
        # simulated thread, not a threading.local: one Python thread may run many simulated ones in turn
        self.state: dict[tuple, SimpleNamespace] = {}

    def _mine(self, block, thread) -> SimpleNamespace:
        t = self.state.get((block, thread))
        if t is None:
            t = self.state[(block, thread)] = SimpleNamespace(barriers=0, loaded=None)
        return t

    def barrier(self):
        block, thread, _ = _adapter.numba_sim_thread()
        self._mine(block, thread).barriers += 1

    def log(self, op, arr, idx, value=None):
        block, thread, tid = _adapter.numba_sim_thread()
        t = self._mine(block, thread)
        idx = idx if isinstance(idx, tuple) else (idx,)
        idx = tuple(int(i) for i in idx)
        addr = int(sum(i * s for i, s in zip(idx, arr._a.strides)))
        loaded = t.loaded
        shared_st = op == "st" and arr._space == "shared"
        ev = Event(op, arr._name, arr._space, block, thread, tid, t.barriers, idx, addr,
                   bool(shared_st and not loaded and value == 0), loaded if shared_st else None)
        if op == "ld" and arr._space == "global":
            t.loaded = (arr._name, idx)
        elif shared_st:
            t.loaded = None
        with self.lock:
            self.events.append(ev)


class RecArray:
    """A numpy array that tells the recorder about every element access."""

    def __init__(self, a: np.ndarray, name: str, space: str, rec: Recorder):
        self._a, self._name, self._space, self._rec = a, name, space, rec
        self.shape, self.dtype, self.ndim, self.size = a.shape, a.dtype, a.ndim, a.size

    def __getitem__(self, idx):
        if any(i < 0 or i >= n for i, n in zip(idx if isinstance(idx, tuple) else (idx,), self.shape)):
            raise IndexError(f"{self._name}{list(idx) if isinstance(idx, tuple) else [idx]} is outside "
                             f"{self._name}'s shape {self.shape}")
        self._rec.log("ld", self, idx)
        return self._a[idx]

    def __setitem__(self, idx, value):
        if any(i < 0 or i >= n for i, n in zip(idx if isinstance(idx, tuple) else (idx,), self.shape)):
            raise IndexError(f"store to {self._name}{list(idx) if isinstance(idx, tuple) else [idx]} outside "
                             f"{self._name}'s shape {self.shape}")
        self._rec.log("st", self, idx, value)
        self._a[idx] = value


def _instrumented(rec: Recorder):
    """Count barriers per thread; record every shared array the kernel allocates."""
    def shared_array(shape, dtype, line):
        return RecArray(np.zeros(shape, dtype), (line or "shared").split("=")[0].strip(), "shared", rec)
    return _adapter.numba_sim_hooks(on_barrier=rec.barrier, shared_array=shared_array)


@dataclass
class Trace:
    kernel: str
    tile: int
    shape: tuple
    grid: tuple
    block: tuple
    events: list = field(repr=False)
    result_ok: bool = False
    barriers_per_phase: int = 1      # syncthreads() calls per K-phase (the registry's)

    # -- summaries -----------------------------------------------------------------------------
    def counts(self) -> dict:
        c = Counter((e.space, e.op, e.array) for e in self.events)
        return {f"{s} {o} {a}": n for (s, o, a), n in sorted(c.items())}

    def reuse(self) -> dict:
        """Global loads per distinct element, for M and N."""
        out = {}
        for name in ("M", "N"):
            loads = [e.index for e in self.events if e.space == "global" and e.op == "ld" and e.array == name]
            if loads:
                per = Counter(loads)
                out[name] = {"loads": len(loads), "unique": len(per), "loads_per_element": len(loads) / len(per),
                             "min": min(per.values()), "max": max(per.values())}
        return out

    def _requests(self, space: str):
        """Warp-level requests: (block, warp, array, op, k) -> list of byte addresses."""
        seq = Counter()
        groups = defaultdict(list)
        for e in self.events:
            if e.space != space:
                continue
            key_t = (e.block, e.tid, e.array, e.op)
            k = seq[key_t]
            seq[key_t] += 1
            groups[(e.block, e.tid // 32, e.array, e.op, k)].append(e.addr)
        return groups

    def coalescing(self) -> dict:
        """Per global array and op: requests, mean 32-byte sectors and 128-byte lines per request."""
        agg = defaultdict(lambda: [0, 0, 0, 0])
        for (_, _, arr, op, _), addrs in self._requests("global").items():
            a = agg[(arr, op)]
            a[0] += 1
            a[1] += len({x // SECTOR for x in addrs})
            a[2] += len({x // LINE for x in addrs})
            a[3] += len(addrs)
        return {f"{op} {arr}": {"requests": n, "sectors_per_request": s / n, "lines_per_request": l / n,
                                "threads_per_request": t / n}
                for (arr, op), (n, s, l, t) in sorted(agg.items())}

    def bank_conflicts(self) -> dict:
        """Per shared array and op: requests, and extra wavefronts from bank conflicts
        (a bank asked for w distinct words serves them in w passes; same word = broadcast)."""
        agg = defaultdict(lambda: [0, 0, 0])
        for (_, _, arr, op, _), addrs in self._requests("shared").items():
            per_bank = defaultdict(set)
            for x in addrs:
                per_bank[(x // BANK_BYTES) % BANKS].add(x // BANK_BYTES)
            ways = max(len(v) for v in per_bank.values())
            a = agg[(arr, op)]
            a[0] += 1
            a[1] += ways - 1
            a[2] = max(a[2], ways)
        return {f"{op} {arr}": {"requests": n, "extra_wavefronts": x, "worst_ways": w}
                for (arr, op), (n, x, w) in sorted(agg.items())}

    def phases(self) -> list[dict]:
        """Per block and step, in the lectures' terms: Phase 0..n-1 (the K-phases, counted by barriers)
        and then "the store" (P written after the last phase). Per step: the elements of M and N loaded,
        what each shared cell received ("M0,2", or "0" for a zero-fill), the zero-filled cells, and the
        P elements stored with the storing thread (threadIdx x, y, z). ``block`` is (blockIdx.x, y, z). The
        shared arrays come by name, so the rows do not depend on the order the simulator ran the threads in."""
        out = defaultdict(lambda: {"M": set(), "N": set(), "zero": defaultdict(set), "P": {},
                                   "shared": defaultdict(dict)})
        per = max(self.barriers_per_phase, 1)
        for e in self.events:
            d = out[(e.block, e.phase // per)]
            if e.space == "global" and e.op == "ld" and e.array in ("M", "N"):
                d[e.array].add(e.index)
            elif e.space == "shared" and e.op == "st":
                if e.zero:
                    d["zero"][e.array].add(e.index)
                d["shared"][e.array][e.index] = "0" if e.zero else (
                    f"{e.src[0]}{','.join(map(str, e.src[1]))}" if e.src else "")
            elif e.space == "global" and e.op == "st":
                d["P"][e.index] = e.thread
        rows = []
        for (block, ph), d in sorted(out.items()):
            store_only = bool(d["P"]) and not (d["M"] or d["N"] or d["shared"])
            rows.append({"block": block, "phase": ph, "step": "the store" if store_only else f"Phase {ph}",
                         "M": sorted(d["M"]), "N": sorted(d["N"]),
                         "zero_filled": {k: sorted(v) for k, v in sorted(d["zero"].items())},
                         "shared": {k: dict(sorted(v.items())) for k, v in sorted(d["shared"].items())},
                         "stored": sorted(d["P"]), "storing_threads": [d["P"][i] for i in sorted(d["P"])]})
        return rows

    def stores_by_block(self) -> dict:
        s = defaultdict(list)
        for e in self.events:
            if e.space == "global" and e.op == "st":
                s[e.block].append(e.index)
        return {b: sorted(v) for b, v in sorted(s.items())}

    def summary(self) -> dict:
        return {"kernel": self.kernel, "tile": self.tile, "shape": self.shape, "grid": self.grid,
                "block": self.block, "correct": self.result_ok, "counts": self.counts(), "reuse": self.reuse(),
                "coalescing": self.coalescing(), "bank_conflicts": self.bank_conflicts(),
                "stores_by_block": {str(k): v for k, v in self.stores_by_block().items()}}


TRACE_LIMIT = 64 ** 3   # multiply-adds: a trace records 2 J K L + J L accesses or more, a Python object each


def check_request(kernel: str, shape: tuple, tile: int | None) -> int | None:
    """What ``trace`` refuses, checked before any work; returns the tile it will use."""
    from .. import registry
    from .._arrays import TiledmmError
    spec = registry.get(kernel)
    if spec.make is None:
        raise TiledmmError(f"trace records SIMT kernels; {kernel!r} is a {spec.family} kernel")
    tile = spec.check_tile(tile)
    if len(shape) != 3 or min(shape) < 1:
        raise TiledmmError(f"trace takes one J x K x L product with positive sizes, got {shape}")
    J, K, L = shape
    if J * K * L > TRACE_LIMIT:
        raise TiledmmError(f"trace of {J}x{K}x{L} would record {2 * J * K * L:,}+ accesses; keep J*K*L <= 64^3")
    return tile


def trace(kernel: str, shape: tuple, tile: int | None, dtype: str = "float32", seed: int = 0,
          progress=None) -> Trace:
    """Run ``kernel`` once in the simulator on random J x K x L inputs, recording every access.
    ``progress(done, total)`` is called after each block."""
    from .. import registry
    from .._arrays import TiledmmError
    from .._backend import emulating
    if not emulating():
        raise TiledmmError("traces are recorded in numba's CUDA simulator: run with TILEDMM_EMULATE=1 "
                           "(or `tiledmm --emulate trace ...`)")
    tile = check_request(kernel, shape, tile)
    spec = registry.get(kernel)
    J, K, L = shape
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((J, K)).astype(dtype)
    N = rng.standard_normal((K, L)).astype(dtype)
    P = np.full((J, L), np.nan, dtype)
    rec = Recorder()
    grid, block = spec.launch_config(tile, J, K, L)
    k = spec.make(tile, dtype)
    with _instrumented(rec), _block_progress(progress, int(np.prod(grid))):
        k[grid, block](RecArray(M, "M", "global", rec), RecArray(N, "N", "global", rec),
                       RecArray(P, "P", "global", rec))
    ok = bool(np.allclose(P, M.astype(np.float64) @ N.astype(np.float64), rtol=1e-4, atol=1e-4))
    return Trace(kernel, tile, tuple(shape), tuple(grid), tuple(block), rec.events, ok, spec.barriers_per_phase)


@contextmanager
def _block_progress(progress, total: int):
    """Call ``progress(done, total)`` after each block the simulator runs."""
    if progress is None:
        yield
        return
    done = [0]

    def block_done():
        done[0] += 1
        progress(done[0], total)

    with _adapter.numba_sim_hooks(on_block=block_done):
        progress(0, total)
        yield


def region(cells) -> str:
    """A set of (row, col) as the lectures would say it: 'rows 0-1 x col 2 (2)', else a count."""
    cells = sorted(map(tuple, cells))
    if not cells:
        return "–"
    rows = sorted({r for r, _ in cells})
    cols = sorted({c for _, c in cells})
    span = lambda w, v: f"{w} {v[0]}" if len(v) == 1 else f"{w}s {v[0]}–{v[-1]}"  # noqa: E731
    full = len(cells) == len(rows) * len(cols) and rows[-1] - rows[0] + 1 == len(rows) \
        and cols[-1] - cols[0] + 1 == len(cols)
    return f"{span('row', rows)} × {span('col', cols)} ({len(cells)})" if full else f"{len(cells)} elements"


def describe_step(p: dict) -> tuple:
    """One row of the per block and phase table: blockIdx.x, blockIdx.y, step, M loaded, N loaded,
    zero-filled, P stored, storing threads (threadIdx.x,y)."""
    zeros = ", ".join(f"{k} {len(v)}" for k, v in p["zero_filled"].items()) or "–"
    th = p["storing_threads"]
    if not th:
        who = "–"
    elif len(th) <= 4:
        who = "; ".join(f"P[{i[0]},{i[1]}] by ({t[0]},{t[1]})" for i, t in zip(p["stored"], th))
    else:
        who = region([(t[1], t[0]) for t in th]).replace("row", "y").replace("col", "x")
    return (p["block"][0], p["block"][1], p["step"], region(p["M"]), region(p["N"]), zeros, region(p["stored"]),
            who)
