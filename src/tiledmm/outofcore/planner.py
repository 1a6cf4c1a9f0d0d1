"""The out-of-core planner: which block shape, orientation and residency a product gets.

A model, not a measurement: the candidates (bm, bn, bk, resident) of both orientations are
scored at once with numpy from byte counts and rates -- copy and GEMM rates, first-load and
last-store exposure, a per-call cost -- and nothing is timed. Only the candidates whose GEMM
time alone could beat the best of a coarse sub-grid are scored in full (the same plan as scoring
them all, in a fraction of the time). Plans are cached per arguments.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Optional

import numpy as np
import torch

from .._arrays import TiledmmError
from .cudart import Device, resolve_device

MiB = 1 << 20
GiB = 1 << 30


def _size(n: float) -> str:
    """Bytes in the binary unit that fits the size (12.0 KiB, 1.50 GiB), three digits."""
    for unit, size in (("TiB", 1 << 40), ("GiB", GiB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def _secs(s: float) -> str:
    """A modelled time in the unit that fits it (0.8 ms, 1.2 s), three digits."""
    for unit, size in (("s", 1.0), ("ms", 1e-3)):
        if s >= size:
            return f"{s / size:.3g} {unit}"
    return f"{s * 1e6:.3g} us"


@dataclass
class Plan:
    transposed: bool          # computed as C^T = B^T @ A^T (then "A"/"B" below are B^T/A^T)
    bm: int
    bn: int
    bk: int
    resident: bool            # B's K x bn panel stays on the device for a whole column of C blocks
    n_i: int
    n_j: int
    n_k: int
    ring: int                 # slots per streamed operand (2 = double buffering)
    device_bytes: int
    h2d_bytes: int
    d2h_bytes: int
    staged_bytes: int         # bytes that pass through host staging buffers
    est_s: float
    budget: int
    rates: dict = field(default_factory=dict)
    acc_bytes: int = 4        # element size of the device C blocks
    cast: bool = False        # device C blocks are in the accumulator dtype and cast to c's on the GPU

    @property
    def steps(self) -> int:
        return self.n_i * self.n_j * self.n_k

    def describe(self) -> str:
        o = "C^T = B^T A^T, " if self.transposed else ""
        mode = "resident panels" if self.resident else "streamed tiles"
        cast = f", {self.acc_bytes}-byte C cast on the GPU" if self.cast else ""
        return (f"{o}blocks {self.bm}x{self.bn}, K-chunk {self.bk} ({self.n_i}x{self.n_j}x{self.n_k} = "
                f"{self.steps} GEMMs), {mode}{cast}; device {_size(self.device_bytes)} of {_size(self.budget)}; "
                f"copied in {_size(self.h2d_bytes)}, out {_size(self.d2h_bytes)}, staged {_size(self.staged_bytes)}; "
                f"model {_secs(self.est_s)}")

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("transposed", "bm", "bn", "bk", "resident", "n_i", "n_j", "n_k",
                                            "ring", "device_bytes", "h2d_bytes", "d2h_bytes", "staged_bytes",
                                            "est_s", "budget", "acc_bytes", "cast")}
        d["steps"] = self.steps
        d["rates"] = dict(self.rates)
        return d


# Model rates. GEMM FLOP/s by element size (H100-class defaults; callers with a measured rate pass
# rates={"gemm": ...}); bytes/s; seconds per GEMM call. On a GPU the host<->device rates are those
# of pinned copies over PCIe Gen5 x16 on the H100 host: 54.5 / 55 GB/s, what the planner measured
# there (timing 64 MiB copies on its first call) before it stopped timing anything.
_GEMM_RATE = {8: 50e12, 4: 45e12, 2: 500e12, 1: 900e12}
_RATES = {"h2d": 20e9, "d2h": 20e9, "host": 15e9, "hbm": 2.5e12, "call": 30e-6}
_GPU_LINK = {"h2d": 54.5e9, "d2h": 55e9}


def _counts(d: int) -> list[int]:
    """Block counts to try along a dimension of size d."""
    out, c = [], 1
    while c <= d:
        out.append(c)
        c = c + 1 if c < 16 else max(c + 1, int(c * 1.25))
    if d not in out:
        out.append(d)
    return out


def _block(d: int, count: int) -> int:
    size = -(-d // count)
    if size >= 1024:            # aligned rows (16-byte, TMA-friendly) for big blocks
        size = min(-(-size // 128) * 128, d)
    return size


def _sizes(d: int) -> list[int]:
    return sorted({_block(d, c) for c in _counts(d)}, reverse=True)


def _orient_plans(M, N, K, esz, csz, accsz, acc_differs, beta_nz, a_direct, b_direct, c_direct, budget, rates,
                  transposed, only=None, prune=True):
    """The best plan of one orientation (None where nothing fits): the model scored at once (numpy)
    on the candidates (bm, bn, bk, resident) that can be best (``_worth_scoring``), or on every one
    with ``prune=False`` -- the same plan either way."""
    sizes = ([min(only[0], M)], [min(only[1], N)], [min(only[2], K)]) if only else (_sizes(M), _sizes(N), _sizes(K))
    axes = tuple(np.array(x, np.float64) for x in sizes) + (np.array([True, False]),)
    shape = tuple(len(x) for x in axes)
    model = (M, N, K, esz, csz, accsz, acc_differs, beta_nz, (a_direct, b_direct, c_direct), budget, rates)
    pick = _worth_scoring(axes, model) if prune else np.arange(int(np.prod(shape)))
    g, est, score = _score(_gather(axes, pick), model)
    if not score.size:
        return None
    # the first best in (bm, bn, bk, resident) order: ``pick`` is in that order, as was the whole grid
    t = int(np.argmin(score))
    if not np.isfinite(score[t]):
        return None
    est, dev, dsz, cast, h2d_b, d2h_b, staged, ring = np.broadcast_arrays(
        est, g.dev, g.dsz, g.cast, g.h2d_b, g.d2h_b, g.staged, g.ring)
    BM, BN, BK = int(g.bm[t]), int(g.bn[t]), int(g.bk[t])
    p = Plan(transposed, BM, BN, BK, bool(g.res[t]), -(-M // BM), -(-N // BN), -(-K // BK),
             int(ring[t]), int(dev[t]), int(h2d_b[t]), int(d2h_b[t]), int(staged[t]), float(est[t]),
             int(budget), dict(rates), int(dsz[t]), bool(cast[t]))
    p._score = float(score[t])
    return p


def _worth_scoring(axes: tuple, model: tuple) -> np.ndarray:
    """Flat indices (in (bm, bn, bk, resident) order) of the candidates that can be best: those whose
    floor (``_floor``: the GEMM time alone, cheap on every block shape) is at most the best score on
    a coarse sub-grid (every 4th size of each axis, and the smallest); any other candidate scores
    above its floor, so above a score some candidate has. Every candidate where nothing on the
    sub-grid fits. (Scoring all 2 x 44^3 candidates of a 16384^3 product took 0.06 s of a first
    call on the H100 host; this scores about 8% of them, sub-grid included.)"""
    shape = tuple(len(x) for x in axes)
    coarse = [_every_4th_and_last(n) for n in shape[:3]] + [np.arange(shape[3])]
    probe = np.ravel_multi_index(np.meshgrid(*coarse, indexing="ij"), shape).ravel()
    best = float(np.min(_score(_gather(axes, probe), model)[2]))
    if not np.isfinite(best):
        return np.arange(int(np.prod(shape)))
    M, N, K, rates = model[0], model[1], model[2], model[-1]
    bm, bn, bk = (ax.reshape([-1 if d == i else 1 for d in range(3)]) for i, ax in enumerate(axes[:3]))
    blocks = np.flatnonzero(_floor(bm, bn, bk, M, N, K, rates) <= best * (1 + 1e-9))   # margin: rounding
    return (blocks[:, None] * shape[3] + np.arange(shape[3])).ravel()


def _every_4th_and_last(n: int) -> np.ndarray:
    """0, 4, 8, ... and n - 1, ascending, each once (np.unique would do; in numpy 2.4 it imports
    numpy.ma, 17 ms of a first call on the H100 host)."""
    idx = np.arange(0, n, 4)
    return idx if idx[-1] == n - 1 else np.append(idx, n - 1)


def _gather(axes: tuple, flat: np.ndarray) -> tuple:
    """The candidates (bm, bn, bk, resident) at these flat indices of the grid of ``axes``, as 1-D arrays."""
    return tuple(ax[i] for ax, i in zip(axes, np.unravel_index(flat, tuple(len(x) for x in axes))))


def _score(cand: tuple, model: tuple) -> tuple:
    """(geometry, model seconds, score) of candidates (bm, bn, bk, resident): arrays that broadcast.
    The score is the time, plus 1e9 where a 16-bit accumulator would round every partial sum (K split
    only when nothing else fits), plus a nanosecond a GEMM call (ties: fewer calls); inf where the
    candidate does not fit."""
    M, N, K, esz, csz, accsz, acc_differs, beta_nz, direct, budget, rates = model
    g = _candidates(M, N, K, cand, esz, csz, accsz, acc_differs, beta_nz, direct, budget)
    est = _seconds(g, M, N, K, esz, csz, beta_nz, direct, rates)
    bad16 = g.split & (accsz < 4)
    score = np.where(g.ok, est + np.where(bad16, 1e9, 0.0) + g.steps * 1e-9, np.inf)
    return g, est, score


def _geometry(M, N, K, cand, esz, csz, accsz, acc_differs, budget) -> SimpleNamespace:
    """Candidates' (bm, bn, bk, resident: arrays that broadcast) block counts, device C block dtype,
    device bytes and whether they fit the budget."""
    bm, bn, bk, res = cand
    n_i, n_j, n_k = np.ceil(M / bm), np.ceil(N / bn), np.ceil(K / bk)
    steps = n_i * n_j * n_k
    one_c = (n_i * n_j) == 1
    one_a = (n_i * n_k) == 1
    # device C blocks: c's dtype when K is not split (one rounding either way), else the accumulator's,
    # cast on the GPU into a c-dtype buffer before going back when the two differ
    split = n_k > 1
    dsz = np.where(split, accsz, csz)
    cast = split & acc_differs
    cbytes = np.where(one_c, 1, 2) * bm * bn * (dsz + np.where(cast, csz, 0))
    ring = np.where(steps == 1, 1, 2)
    abytes = np.where(one_a, 1, ring) * bm * bk * esz
    bbytes = np.where(res, np.where(n_j > 1, 2, 1) * K * bn * esz, ring * bk * bn * esz)
    dev = abytes + bbytes + cbytes
    ok = (dev <= budget) & (res | (n_i > 1))          # streamed == resident when one row block
    return SimpleNamespace(bm=bm, bn=bn, bk=bk, res=res, n_i=n_i, n_j=n_j, n_k=n_k, steps=steps, one_a=one_a,
                           split=split, dsz=dsz, cast=cast, ring=ring, dev=dev, ok=ok)


def _candidates(M, N, K, cand, esz, csz, accsz, acc_differs, beta_nz, direct, budget) -> SimpleNamespace:
    """Candidates' geometry (``_geometry``) and bytes each way and through host staging."""
    g = _geometry(M, N, K, cand, esz, csz, accsz, acc_differs, budget)
    a_traffic = M * K * esz * np.where(g.one_a, 1, g.n_j)
    b_traffic = np.where(g.res, K * N * esz, K * N * esz * g.n_i)
    c_in = M * N * csz if beta_nz else 0
    d2h_b = M * N * csz + 0 * g.bm
    a_direct, b_direct, c_direct = direct
    staged = (0 if a_direct else a_traffic) + (0 if b_direct else b_traffic) + (0 if c_direct else c_in + d2h_b)
    g.h2d_b, g.d2h_b, g.staged = a_traffic + b_traffic + c_in, d2h_b, staged
    return g


def _efficiency(bm, bn, bk):
    """The model's GEMM efficiency of a block shape: partial tiles / waves along M and N, prologue and
    epilogue along K."""
    return (bm / (bm + 64)) * (bn / (bn + 64)) * (bk / (bk + 256))


def _floor(bm, bn, bk, M, N, K, rates) -> np.ndarray:
    """A lower bound of ``_seconds`` for block shapes (arrays that broadcast), either residency: its GEMM
    time alone, each call's cost plus the product's FLOPs at the block shape's rate (the blocks cover
    M x N x K, and a step takes at least its FLOPs)."""
    steps = np.ceil(M / bm) * np.ceil(N / bn) * np.ceil(K / bk)
    return steps * rates.get("call", _RATES["call"]) + 2.0 * M * N * K / (rates["gemm"] * _efficiency(bm, bn, bk))


def _seconds(g: SimpleNamespace, M, N, K, esz, csz, beta_nz, direct, rates) -> np.ndarray:
    """The model's time of every candidate: first load + max(GEMM, copy) + a tenth of the smaller +
    last store + the part of each resident panel's load its column's GEMMs cannot cover."""
    gemm_rate, h2d, d2h, host = rates["gemm"], rates["h2d"], rates["d2h"], rates["host"]
    hbm, call = rates.get("hbm", _RATES["hbm"]), rates.get("call", _RATES["call"])
    a_direct, b_direct, c_direct = direct
    bm, bn, bk, n_i, n_j, n_k, dsz = g.bm, g.bn, g.bk, g.n_i, g.n_j, g.n_k, g.dsz
    rate = gemm_rate * _efficiency(bm, bn, bk)
    # a GEMM reads its A and B tiles at least once from device memory (skinny blocks are bandwidth-bound);
    # every GEMM after a block's first reads and writes its C block (beta = 1), and a cast reads and writes once
    t_step = np.maximum(2.0 * bm * bn * bk / rate, (bm * bk + bk * bn) * esz / hbm)
    c_rw = n_i * n_j * ((n_k + (1 if beta_nz else 0)) * bm * bn * dsz + (n_k - 1) * bm * bn * dsz
                        + np.where(g.cast, bm * bn * (dsz + csz), 0))
    t_gemm = g.steps * (t_step + call) + c_rw / hbm
    t_copy = np.maximum(np.maximum(g.h2d_b / h2d, g.d2h_b / d2h), g.staged / host)
    rate_a = h2d if a_direct else min(h2d, host)
    rate_b = h2d if b_direct else min(h2d, host)
    start = bm * bk * esz / rate_a + bk * bn * esz / rate_b + ((bm * bn * csz / (h2d if c_direct else min(h2d, host)))
                                                               if beta_nz else 0.0)
    tail = bm * bn * csz / d2h + (0.0 if c_direct else bm * bn * csz / host)
    # a resident panel must arrive while the GEMMs before it run: panel 0 during the first row of C
    # blocks (chunk by chunk), panel j during column j-1
    panel_s = K * bn * esz / rate_b
    row_gemm = 2.0 * bm * bn * K / rate
    expose0 = np.where(g.split, np.maximum(0.0, panel_s + bm * K * esz / rate_a - row_gemm), 0.0)
    col_copy = panel_s + np.where(g.one_a, 0.0, M * K * esz / rate_a)
    expose_j = (n_j - 1) * np.maximum(0.0, col_copy - 2.0 * M * bn * K / rate)
    expose = np.where(g.res, expose0 + expose_j, 0.0)
    # copies hide behind GEMMs only partly in practice: charge a tenth of the smaller
    return start + np.maximum(t_gemm, t_copy) + 0.1 * np.minimum(t_gemm, t_copy) + tail + expose


def _min_bytes(esz: int, accsz: int) -> int:
    return 2 * esz + 2 * esz + 2 * accsz

def plan_out_of_core(m: int, n: int, k: int, dtype: torch.dtype, *, c_dtype=None, acc_dtype=None,
                     beta_nonzero: bool = False, max_device_bytes: Optional[int] = None,
                     direct=(False, False, False), device=None, rates: Optional[dict] = None,
                     blocks: Optional[tuple] = None) -> Plan:
    """The blocking ``matmul_out_of_core`` would use for an m x k @ k x n product.

    blocks=(bm, bn, bk): consider only that block shape (C = A B orientation; for experiments).
    rates: overrides of the model's rates ("gemm" FLOP/s, "h2d"/"d2h"/"host"/"hbm" bytes/s, "call" s).
    Plans are cached per device: the same arguments (and budget, to 64 MiB) give the same plan at no cost."""
    dev = resolve_device(device)
    budget = _budget(dev, max_device_bytes)
    esz = torch.empty((), dtype=dtype).element_size()
    cd = c_dtype or dtype
    ad = acc_dtype or cd
    r = _default_rates(dev, esz)
    r.update(rates or {})
    key = (dev.device, m, n, k, dtype, cd, ad, bool(beta_nonzero), budget, tuple(bool(x) for x in direct),
           tuple(sorted((kk, float(v)) for kk, v in r.items())), tuple(blocks) if blocks else None)
    with _plan_lock:
        hit = _plan_cache.get(key)
    if hit is not None:
        return hit
    csz = torch.empty((), dtype=cd).element_size()
    accsz = torch.empty((), dtype=ad).element_size()
    need = _min_bytes(esz, accsz)
    if budget < need:
        raise TiledmmError(f"out-of-core {m}x{k} @ {k}x{n}: a device budget of {budget:,} bytes cannot hold "
                           f"even 1x1 blocks; at least {need:,} bytes are needed (max_device_bytes)")
    best = _best(m, n, k, esz, csz, accsz, ad != cd, beta_nonzero, direct, budget, r, blocks)
    if best.steps > 2_000_000:
        raise TiledmmError(f"out-of-core {m}x{k} @ {k}x{n}: a device budget of {budget:,} bytes forces "
                           f"{best.steps:,} GEMM calls of {best.bm}x{best.bn}x{best.bk}; give a larger "
                           "max_device_bytes")
    with _plan_lock:
        if len(_plan_cache) > 256:
            _plan_cache.clear()
        _plan_cache[key] = best
    return best


_plan_cache: dict = {}
_plan_lock = threading.Lock()


def _best(m, n, k, esz, csz, accsz, differs, beta_nonzero, direct, budget, r, blocks) -> Plan:
    """The better orientation's best plan (C = A B, or C^T = B^T A^T with A's and B's roles swapped);
    only C = A B with the given blocks when ``blocks`` is set."""
    a_d, b_d, c_d = direct
    if blocks:
        p1 = _orient_plans(m, n, k, esz, csz, accsz, differs, beta_nonzero, a_d, b_d, c_d, budget, r, False,
                           only=tuple(int(x) for x in blocks))
        p2 = None
    else:
        p1 = _orient_plans(m, n, k, esz, csz, accsz, differs, beta_nonzero, a_d, b_d, c_d, budget, r, False)
        p2 = _orient_plans(n, m, k, esz, csz, accsz, differs, beta_nonzero, b_d, a_d, c_d, budget, r, True)
    plans = [p for p in (p1, p2) if p is not None]
    if not plans:
        raise TiledmmError(f"out-of-core {m}x{k} @ {k}x{n}: no blocking fits a device budget of {budget:,} bytes"
                           + (f" with blocks {blocks}" if blocks else ""))
    return min(plans, key=lambda p: p._score)


def _default_rates(dev: Device, esz: int) -> dict:
    """The model's rates for this device and element size (nothing measured)."""
    return {"gemm": _GEMM_RATE.get(esz, 45e12), **_RATES, **(_GPU_LINK if dev.gpu else {})}


def _budget(dev: Device, max_device_bytes: Optional[int]) -> int:
    """Bytes for tiles: free memory (plus what torch's caching allocator holds unused) less a reserve,
    or max_device_bytes if smaller; the free-memory figure rounded down to 1/64 of its power of two
    (>= 64 MiB: 1 GiB at 64-128 GiB), so repeated calls find their cached plan."""
    if dev.gpu:
        free, total = torch.cuda.mem_get_info(dev.device)
        free += torch.cuda.memory_reserved(dev.device) - torch.cuda.memory_allocated(dev.device)
        usable = int(free - max(2 * GiB, 0.06 * total))
        step = max(64 * MiB, (1 << max(0, usable.bit_length() - 1)) // 64)
        usable = max(0, usable // step * step)
        if max_device_bytes is not None:
            return max(0, min(int(max_device_bytes), usable))
        return usable
    return int(max_device_bytes) if max_device_bytes is not None else 1 * GiB

