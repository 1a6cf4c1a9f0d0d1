"""Out-of-core GEMM: C = alpha*A@B + beta*C for host matrices larger than the GPU.

The lectures' tiling one level up: host RAM plays DRAM, the GPU's memory plays shared
memory. C is computed in blocks of bm x bn; each block is the sum over K-chunks of
(bm x bk) @ (bk x bn) products run by a device GEMM callback.

Data movement (one orientation; the other is the same on C^T = B^T A^T):

* B is cut into column *panels* (K x bn). A panel stays on the GPU while every row
  block of C in that column is computed ("resident"), so B crosses PCIe once; A's
  row tiles (bm x bk) stream through, once per column panel. When even one panel
  does not fit, B's tiles stream too ("streamed").
* Bytes host->device:  M*K*n_j + K*N*(1 if resident else n_i) (+ M*N if beta != 0),
  bytes device->host: M*N (times the element sizes). The planner tries both
  orientations (the larger operand resident: streamed fewest times) and every block
  shape that fits the budget, and keeps the one with the smallest modelled time
  (copy and GEMM rates, first-load and last-store exposure, per-call cost).
* Three CUDA streams: copies in, GEMMs, copies out. Device tiles live in rings of
  slots (double buffering) and events order reuse: a slot is refilled only after the
  GEMMs that read it, a C slot only after its block went back to the host. The next
  panel is loaded a little after each GEMM of the current column.
* Host side: pinned sources whose tile has unit inner stride go straight to the GPU
  (cudaMemcpy2DAsync for strided tiles, found in the CUDA runtime torch loaded;
  checked once on a small strided copy, else staged). Pageable sources (numpy) are
  copied into a ring of pinned staging buffers by a pool of host threads, running
  ahead of the copy stream; results come back through pinned buffers the same way.
* Without a GPU (emulation) the "device" is the CPU: the same schedule, slots and
  staging run with plain buffers and no streams, so tests exercise the blocking.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from ._arrays import TiledmmError

Gemm = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float, float], object]

MiB = 1 << 20
GiB = 1 << 30


# ----------------------------------------------------------------------------- GEMM callbacks
def torch_gemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, alpha: float, beta: float) -> None:
    """c = alpha*a@b + beta*c in place with torch (cuBLAS on a GPU); beta=0 ignores c. A wider c
    (float32 for 16-bit a, b) takes the product in its dtype (``torch.mm(out_dtype=)`` where torch has
    it for the device, else on upcast operands)."""
    if c.dtype == a.dtype:
        c.addmm_(a, b, beta=beta, alpha=alpha)
        return
    try:
        p = torch.mm(a, b, out_dtype=c.dtype)
    except (TypeError, RuntimeError, NotImplementedError):
        p = torch.mm(a.to(c.dtype), b.to(c.dtype))
    if beta == 0:
        c.copy_(p)
        if alpha != 1:
            c.mul_(alpha)
    else:
        c.mul_(beta).add_(p, alpha=alpha)


def tiledmm_gemm(kernel: Optional[str] = None, **options) -> Gemm:
    """A callback running ``tiledmm.matmul(a, b, kernel=kernel, out=c, alpha=, beta=)``.
    Kernels without alpha/beta (the SIMT ones) compute a @ b into a temporary and
    combine. ``c`` may be float32 for 16-bit inputs (a wider accumulator)."""
    from .api import matmul
    plain = {}

    def gemm(a, b, c, alpha, beta):
        key = str(a.dtype)
        if not plain.get(key):
            try:
                matmul(a, b, kernel=kernel, out=c, alpha=float(alpha), beta=float(beta), **options)
                return
            except TiledmmError as e:
                if "takes no option" not in str(e):
                    raise
                plain[key] = True
        p = matmul(a, b, kernel=kernel, **options)
        if beta == 0:
            c.copy_(p.mul_(alpha) if alpha != 1 else p)
        else:
            c.mul_(beta).add_(p, alpha=alpha)
    return gemm


# ----------------------------------------------------------------------------- the plan
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
                f"{self.steps} GEMMs), {mode}{cast}; device {self.device_bytes / GiB:.2f} of "
                f"{self.budget / GiB:.2f} GiB; H2D {self.h2d_bytes / 1e9:.2f} GB, D2H {self.d2h_bytes / 1e9:.2f} GB, "
                f"staged {self.staged_bytes / 1e9:.2f} GB; model {self.est_s:.3f} s")

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("transposed", "bm", "bn", "bk", "resident", "n_i", "n_j", "n_k",
                                            "ring", "device_bytes", "h2d_bytes", "d2h_bytes", "staged_bytes",
                                            "est_s", "budget", "acc_bytes", "cast")}
        d["steps"] = self.steps
        d["rates"] = dict(self.rates)
        return d


# conservative H100-class defaults (FLOP/s by element size; bytes/s; seconds per GEMM call)
_GEMM_RATE = {8: 50e12, 4: 45e12, 2: 500e12, 1: 900e12}
_RATES = {"h2d": 20e9, "d2h": 20e9, "host": 15e9, "hbm": 2.5e12, "call": 30e-6}


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
                  transposed, only=None):
    """The best plan of one orientation: every (bm, bn, bk, resident) evaluated at once (numpy)."""
    gemm_rate, h2d, d2h, host = rates["gemm"], rates["h2d"], rates["d2h"], rates["host"]
    hbm, call = rates.get("hbm", _RATES["hbm"]), rates.get("call", _RATES["call"])
    f = np.float64
    sm, sn, sk = ([min(only[0], M)], [min(only[1], N)], [min(only[2], K)]) if only else (_sizes(M), _sizes(N), _sizes(K))
    bm = np.array(sm, f)[:, None, None, None]
    bn = np.array(sn, f)[None, :, None, None]
    bk = np.array(sk, f)[None, None, :, None]
    res = np.array([True, False])[None, None, None, :]
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
    a_traffic = M * K * esz * np.where(one_a, 1, n_j)
    b_traffic = np.where(res, K * N * esz, K * N * esz * n_i)
    c_in = M * N * csz if beta_nz else 0
    h2d_b = a_traffic + b_traffic + c_in
    d2h_b = M * N * csz + 0 * bm
    staged = (0 if a_direct else a_traffic) + (0 if b_direct else b_traffic) + (0 if c_direct else c_in + d2h_b)
    flops = 2.0 * M * N * K
    # GEMM efficiency: partial tiles / waves along M and N, prologue and epilogue along K
    eff = (bm / (bm + 64)) * (bn / (bn + 64)) * (bk / (bk + 256))
    rate = gemm_rate * eff
    # a GEMM reads its A and B tiles at least once from device memory (skinny blocks are bandwidth-bound);
    # every GEMM after a block's first reads and writes its C block (beta = 1), and a cast reads and writes once
    t_step = np.maximum(2.0 * bm * bn * bk / rate, (bm * bk + bk * bn) * esz / hbm)
    c_rw = n_i * n_j * ((n_k + (1 if beta_nz else 0)) * bm * bn * dsz + (n_k - 1) * bm * bn * dsz
                        + np.where(cast, bm * bn * (dsz + csz), 0))
    t_gemm = steps * (t_step + call) + c_rw / hbm
    t_copy = np.maximum(np.maximum(h2d_b / h2d, d2h_b / d2h), staged / host)
    rate_a = h2d if a_direct else min(h2d, host)
    rate_b = h2d if b_direct else min(h2d, host)
    first_b = np.where(res, bk * bn * esz, bk * bn * esz)
    start = bm * bk * esz / rate_a + first_b / rate_b + ((bm * bn * csz / (h2d if c_direct else min(h2d, host)))
                                                           if beta_nz else 0.0)
    tail = bm * bn * csz / d2h + (0.0 if c_direct else bm * bn * csz / host)
    # a resident panel must arrive while the GEMMs before it run: panel 0 during the first row of C
    # blocks (chunk by chunk), panel j during column j-1
    panel_s = K * bn * esz / rate_b
    row_gemm = 2.0 * bm * bn * K / rate
    expose0 = np.where(split, np.maximum(0.0, panel_s + bm * K * esz / rate_a - row_gemm), 0.0)
    col_copy = panel_s + np.where(one_a, 0.0, M * K * esz / rate_a)
    expose_j = (n_j - 1) * np.maximum(0.0, col_copy - 2.0 * M * bn * K / rate)
    expose = np.where(res, expose0 + expose_j, 0.0)
    # copies hide behind GEMMs only partly in practice: charge a tenth of the smaller
    est = start + np.maximum(t_gemm, t_copy) + 0.1 * np.minimum(t_gemm, t_copy) + tail + expose
    # a 16-bit accumulator rounds every partial sum: split K only when nothing else fits
    bad16 = split & (accsz < 4)
    score = np.where(ok, est + np.where(bad16, 1e9, 0.0) + steps * 1e-9, np.inf)
    score, est, dev, dsz, cast, h2d_b, d2h_b, staged, ring, steps = np.broadcast_arrays(
        score, est, dev, dsz, cast, h2d_b, d2h_b, staged, ring, steps)
    idx = np.unravel_index(int(np.argmin(score)), score.shape)
    if not np.isfinite(score[idx]):
        return None
    i, j, k, r = idx
    BM, BN, BK = int(bm[i, 0, 0, 0]), int(bn[0, j, 0, 0]), int(bk[0, 0, k, 0])
    p = Plan(transposed, BM, BN, BK, bool(res[0, 0, 0, r]), -(-M // BM), -(-N // BN), -(-K // BK),
             int(ring[idx]), int(dev[idx]), int(h2d_b[idx]), int(d2h_b[idx]), int(staged[idx]), float(est[idx]),
             int(budget), dict(rates), int(dsz[idx]), bool(cast[idx]))
    p._score = float(score[idx])
    return p


def _min_bytes(esz: int, accsz: int) -> int:
    return 2 * esz + 2 * esz + 2 * accsz


# ----------------------------------------------------------------------------- device abstraction
class _NoEvent:
    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


class _Device:
    """The GPU (streams, events, async copies) or the CPU standing in for it."""

    def __init__(self, device: Optional[torch.device]):
        self.gpu = device is not None and device.type == "cuda"
        self.device = device if self.gpu else torch.device("cpu")
        if self.gpu:
            with torch.cuda.device(self.device):
                self.copy_in = torch.cuda.Stream(self.device)
                self.compute = torch.cuda.Stream(self.device)
                self.copy_out = torch.cuda.Stream(self.device)
        else:
            self.copy_in = self.compute = self.copy_out = None

    def event(self):
        return torch.cuda.Event(enable_timing=True) if self.gpu else _NoEvent()

    def record(self, ev, stream):
        ev.record(stream) if self.gpu else ev.record()

    def wait(self, stream, ev):
        if self.gpu and ev is not None:
            stream.wait_event(ev)

    def on(self, stream):
        return torch.cuda.stream(stream) if self.gpu else contextlib.nullcontext()

    def empty(self, n: int, dtype) -> torch.Tensor:
        return torch.empty(n, dtype=dtype, device=self.device)

    def pinned(self, n: int, dtype) -> torch.Tensor:
        return torch.empty(n, dtype=dtype, pin_memory=self.gpu)

    def sync(self):
        if self.gpu:
            torch.cuda.synchronize(self.device)


# cudaMemcpy2DAsync from the CUDA runtime torch loaded (strided pinned tiles without staging)
_cudart_lock = threading.Lock()
_cudart_fn = None
_cudart_checked = False


def _find_cudart():
    paths = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1] if line.strip() else ""
                if "libcudart.so" in p and p not in paths:
                    paths.append(p)
    except OSError:
        pass
    for p in paths + ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]:
        try:
            lib = ctypes.CDLL(p)
            fn = lib.cudaMemcpy2DAsync
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                       ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        return fn
    return None


def _memcpy2d(dst: torch.Tensor, src: torch.Tensor, kind: int, stream) -> None:
    """dst[:] = src for 2-D tensors with unit inner stride, same dtype (kind 1: H2D, 2: D2H)."""
    es = src.element_size()
    rows, cols = src.shape
    err = _cudart_fn(dst.data_ptr(), dst.stride(0) * es if rows > 1 else cols * es, src.data_ptr(),
                     src.stride(0) * es if rows > 1 else cols * es, cols * es, rows, kind, stream.cuda_stream)
    if err != 0:
        raise RuntimeError(f"cudaMemcpy2DAsync failed with error {err}")


def _cudart_2d(dev: _Device) -> bool:
    """Load cudaMemcpy2DAsync once and check it on a small strided pinned tile."""
    global _cudart_fn, _cudart_checked
    if not dev.gpu or os.environ.get("TILEDMM_OOC_NO_2D") == "1":
        return False
    with _cudart_lock:
        if not _cudart_checked:
            _cudart_checked = True
            try:
                _cudart_fn = _find_cudart()
                if _cudart_fn is not None:
                    src = torch.arange(8 * 16, dtype=torch.float32).reshape(8, 16).pin_memory()
                    d = torch.full((8, 8), float("nan"), device=dev.device)
                    s = torch.cuda.current_stream(dev.device)
                    _memcpy2d(d, src[:, 3:11], 1, s)
                    back = torch.full((8, 16), -1.0).pin_memory()
                    _memcpy2d(back[:, 5:13], d, 2, s)
                    s.synchronize()
                    if not (torch.equal(d.cpu(), src[:, 3:11]) and torch.equal(back[:, 5:13], src[:, 3:11])):
                        _cudart_fn = None
            except Exception:     # noqa: BLE001 -- any failure means: stage instead
                _cudart_fn = None
        return _cudart_fn is not None


# ----------------------------------------------------------------------------- host copies
_INT = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}
_TINT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _np_bytes(t: torch.Tensor) -> np.ndarray:
    """A numpy view of t's elements as same-size integers (bfloat16 included)."""
    return t.view(_TINT[t.element_size()]).numpy()


def _host_copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst[:] = src on the host, same dtype, any strides; releases the GIL (numpy copyto)."""
    np.copyto(_np_bytes(dst), _np_bytes(src), casting="no")


# ----------------------------------------------------------------------------- operands
class _Operand:
    """A host matrix in the orientation its memory has: ``phys`` has unit inner stride when
    possible (a transposed view is used as its transpose); device tiles copy that layout."""

    def __init__(self, x: torch.Tensor, dev: _Device, two_d: bool):
        if x.dim() == 2 and x.size(1) > 1 and x.stride(1) != 1 and (x.stride(0) == 1 or x.size(0) == 1):
            self.T, self.phys = True, x.t()
        else:
            self.T, self.phys = False, x
        unit = self.phys.size(1) <= 1 or self.phys.stride(1) == 1
        pinned = dev.gpu and x.is_pinned()
        self.direct = pinned and unit      # tiles may go straight to the GPU (contiguous, or with 2-D copies)
        self.two_d = two_d
        self.esz = x.element_size()

    def tile(self, r0, r1, c0, c1) -> torch.Tensor:
        """Physical host tile for logical rows r0:r1, cols c0:c1."""
        return self.phys[c0:c1, r0:r1] if self.T else self.phys[r0:r1, c0:c1]

    def shape(self, rows, cols):
        return (cols, rows) if self.T else (rows, cols)

    def logical(self, t: torch.Tensor) -> torch.Tensor:
        return t.t() if self.T else t


class _Slot:
    def __init__(self, buf: torch.Tensor, dev: _Device):
        self.buf = buf
        self.free_ev = dev.event()
        self.free_recorded = False
        self.issued = threading.Event()
        self.issued.set()

    def view(self, shape, offset=0) -> torch.Tensor:
        n = shape[0] * shape[1]
        return self.buf[offset:offset + n].view(shape)


@dataclass
class _Load:
    op: _Operand
    host: torch.Tensor                 # physical host tile
    dev: torch.Tensor                  # physical device tile (contiguous)
    slot: _Slot
    pieces: list
    direct: bool
    need: int                          # first step that reads it
    loaded_ev: object = None
    recorded: bool = False


@dataclass
class _Step:
    i: int
    j: int
    p: int
    a: _Load
    b: _Load
    a_dev: torch.Tensor
    b_dev: torch.Tensor
    c_slot: _Slot
    c_dev: torch.Tensor                # physical C device tile
    c_host: torch.Tensor               # physical C host tile
    c_load: Optional[_Load]
    first: bool
    last: bool
    c_cast: Optional[torch.Tensor] = None   # c-dtype device buffer the block is cast into (else None)


def _pieces(rows: int, cols: int, esz: int, piece_bytes: int) -> list:
    row_b = max(cols * esz, 1)
    if row_b <= piece_bytes:
        per = max(1, piece_bytes // row_b)
        return [(r, min(r + per, rows), 0, cols) for r in range(0, rows, per)]
    w = max(1, piece_bytes // esz)
    return [(r, r + 1, c, min(c + w, cols)) for r in range(rows) for c in range(0, cols, w)]


# ----------------------------------------------------------------------------- public entry
def plan_out_of_core(m: int, n: int, k: int, dtype: torch.dtype, *, c_dtype=None, acc_dtype=None,
                     beta_nonzero: bool = False, max_device_bytes: Optional[int] = None,
                     direct=(False, False, False), device=None, rates: Optional[dict] = None,
                     blocks: Optional[tuple] = None) -> Plan:
    """The blocking ``matmul_out_of_core`` would use for an m x k @ k x n product.

    blocks=(bm, bn, bk): consider only that block shape (C = A B orientation; for experiments).
    Plans are cached: the same arguments (and budget, to 64 MiB) give the same plan at no cost."""
    dev = _resolve_device(device)
    budget = _budget(dev, max_device_bytes)
    esz = torch.empty((), dtype=dtype).element_size()
    cd = c_dtype or dtype
    ad = acc_dtype or cd
    r = _default_rates(dev, esz)
    r.update(rates or {})
    key = (m, n, k, dtype, cd, ad, bool(beta_nonzero), budget, tuple(bool(x) for x in direct),
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
    a_d, b_d, c_d = direct
    differs = ad != cd
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
    best = min(plans, key=lambda p: p._score)
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
_devices: dict = {}


def _resolve_device(device) -> _Device:
    """One _Device (three streams) per GPU for the process; the CPU stand-in when emulating."""
    from . import _backend
    if device is None:
        if _backend.emulating() or not torch.cuda.is_available():
            device = None
        else:
            device = torch.device("cuda", torch.cuda.current_device())
    if device is not None:
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device.type != "cuda":
            device = None
    with _plan_lock:
        d = _devices.get(device)
        if d is None:
            d = _devices[device] = _Device(device)
    return d


_measured = {}


def _default_rates(dev: _Device, esz: int) -> dict:
    """Planner rates: defaults, with host<->device copy rates measured once per process (64 MiB pinned)."""
    r = {"gemm": _GEMM_RATE.get(esz, 45e12), **_RATES}
    if dev.gpu:
        if "h2d" not in _measured:
            try:
                n = 64 * MiB
                h = torch.empty(n, dtype=torch.uint8, pin_memory=True)
                d = torch.empty(n, dtype=torch.uint8, device=dev.device)
                d.copy_(h, non_blocking=True)
                h.copy_(d, non_blocking=True)
                torch.cuda.synchronize(dev.device)
                e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                e0.record()
                for _ in range(3):
                    d.copy_(h, non_blocking=True)
                e1.record()
                for _ in range(3):
                    h.copy_(d, non_blocking=True)
                e2.record()
                e2.synchronize()
                # rounded (to 0.5 GB/s) so that plans cached by their rates are found again
                _measured["h2d"] = round(3 * n / (e0.elapsed_time(e1) * 1e-3) / 5e8) * 5e8
                _measured["d2h"] = round(3 * n / (e1.elapsed_time(e2) * 1e-3) / 5e8) * 5e8
            except Exception:  # noqa: BLE001 -- keep the defaults
                _measured["h2d"] = _measured["d2h"] = None
        for k in ("h2d", "d2h"):
            if _measured.get(k):
                r[k] = _measured[k]
    return r


def _budget(dev: _Device, max_device_bytes: Optional[int]) -> int:
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


def matmul_out_of_core(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *, alpha: float = 1.0,
                       beta: float = 0.0, max_device_bytes: Optional[int] = None, gemm: Optional[Gemm] = None,
                       progress: Optional[Callable[[int, int], object]] = None, stats: Optional[dict] = None,
                       acc_dtype: Optional[torch.dtype] = None, device=None, host_threads: Optional[int] = None,
                       piece_bytes: int = 32 * MiB, plan: Optional[Plan] = None, rates: Optional[dict] = None) -> None:
    """c = alpha * a @ b + beta * c for CPU tensors, on the GPU in blocks that fit its memory.

    a (M x K), b (K x N), c (M x N): CPU torch tensors, any strides (c is written in place).
    gemm(a_dev, b_dev, c_dev, alpha, beta): the device GEMM, in place on c_dev; default
        ``tiledmm_gemm()`` (tiledmm's default kernel).
    max_device_bytes: device budget for tiles (default: free memory less a reserve); the
        GEMM's own workspace is outside it.
    acc_dtype: dtype of the device C blocks (e.g. float32 for bfloat16 c when K is split,
        so partial sums are not rounded to bfloat16; the gemm must accept it).
    progress(done, total): GEMM calls finished so far.
    stats: filled with the plan, bytes moved and per-stream busy/idle times (CUDA events).
    """
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
    t_start = time.perf_counter()
    if M == 0 or N == 0:
        return
    if K == 0 or alpha == 0:
        if beta == 0:
            c.zero_()
        elif beta != 1:
            c.mul_(beta)
        return
    dev = _resolve_device(device)
    two_d = _cudart_2d(dev)
    acc = acc_dtype or c.dtype
    ops = [_Operand(x, dev, two_d) for x in (a, b, c)]
    t_setup = time.perf_counter()
    if plan is None:
        plan = plan_out_of_core(M, N, K, a.dtype, c_dtype=c.dtype, acc_dtype=acc, beta_nonzero=beta != 0,
                                max_device_bytes=max_device_bytes, direct=tuple(o.direct for o in ops),
                                device=dev.device, rates=rates)
    t_plan = time.perf_counter()
    if plan.transposed:
        a, b, c = b.t(), a.t(), c.t()
    gemm = gemm or tiledmm_gemm()
    threads = host_threads or max(1, min(8, (os.cpu_count() or 2)))
    run = _Run(plan, a, b, c, float(alpha), float(beta), gemm, dev, two_d, acc, threads, piece_bytes, progress)
    run.phases["setup_s"] = t_setup - t_start
    run.phases["plan_s"] = t_plan - t_setup
    run.execute()
    if stats is not None:
        stats.update(run.stats(time.perf_counter() - t_start))


def warm_out_of_core(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *, alpha: float = 1.0, beta: float = 0.0,
                     max_device_bytes: Optional[int] = None, gemm: Optional[Gemm] = None,
                     acc_dtype: Optional[torch.dtype] = None, device=None, plan: Optional[Plan] = None,
                     rates: Optional[dict] = None) -> Plan:
    """Plan as ``matmul_out_of_core`` would with the same arguments, and run the GEMM callback once on
    every distinct block shape of that plan (device tiles of random numbers, nothing copied), so that
    first-call costs (compilation, autotuning) stay out of the product itself. Returns the plan."""
    dev = _resolve_device(device)
    two_d = _cudart_2d(dev)
    acc = acc_dtype or c.dtype
    (M, K), N = a.shape, b.shape[1]
    ops = [_Operand(x, dev, two_d) for x in (a, b, c)]
    if plan is None:
        plan = plan_out_of_core(M, N, K, a.dtype, c_dtype=c.dtype, acc_dtype=acc, beta_nonzero=beta != 0,
                                max_device_bytes=max_device_bytes, direct=tuple(o.direct for o in ops),
                                device=dev.device, rates=rates)
    if plan.transposed:
        a, b, c = b.t(), a.t(), c.t()
    gemm = gemm or tiledmm_gemm()
    run = _Run(plan, a, b, c, float(alpha), float(beta), gemm, dev, two_d, acc, 1, 32 * MiB, None)
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


class _Run:
    def __init__(self, plan, a, b, c, alpha, beta, gemm, dev, two_d, acc, threads, piece_bytes, progress):
        self.plan, self.alpha, self.beta, self.gemm, self.dev = plan, alpha, beta, gemm, dev
        self.progress = progress
        # device C blocks: c's dtype when K is not split (the GEMM rounds once either way); else the
        # accumulator's, cast to c's dtype on the GPU (compute stream) before going back
        self.acc = acc if plan.n_k > 1 else c.dtype
        self.cast = self.acc != c.dtype
        self.A, self.B, self.C = (_Operand(x, dev, two_d) for x in (a, b, c))
        self.M, self.K = a.shape
        self.N = b.shape[1]
        self.threads, self.piece_bytes = threads, piece_bytes
        self.direct_piece_bytes = 4 * piece_bytes    # straight copies: fewer, larger pieces
        self.c_dtype, self.ab_dtype = c.dtype, a.dtype
        self.intervals = []           # (stream, kind, start_ev, end_ev)
        self.host = {"stage_s": 0.0, "unstage_s": 0.0, "wait_stage_s": 0.0, "wait_runahead_s": 0.0,
                     "wait_cslot_s": 0.0, "wait_unstage_s": 0.0}
        self.phases = {}
        self.bytes = {"h2d": 0, "d2h": 0, "staged_in": 0, "staged_out": 0}
        self._lock = threading.Lock()

    # ---- building the schedule
    def _build(self):
        p, dev = self.plan, self.dev
        M, N, K = self.M, self.N, self.K
        bm, bn, bk = p.bm, p.bn, p.bk
        A, B, C = self.A, self.B, self.C
        esz = A.esz
        a_slots = [_Slot(dev.empty(bm * bk, self.ab_dtype), dev)
                   for _ in range(1 if p.n_i * p.n_k == 1 else p.ring)]
        if p.resident:
            b_slots = [_Slot(dev.empty(K * bn, self.ab_dtype), dev) for _ in range(2 if p.n_j > 1 else 1)]
        else:
            b_slots = [_Slot(dev.empty(bk * bn, self.ab_dtype), dev) for _ in range(p.ring)]
        c_slots = [_Slot(dev.empty(bm * bn, self.acc), dev) for _ in range(1 if p.n_i * p.n_j == 1 else 2)]
        for cs in c_slots:
            cs.cast = dev.empty(bm * bn, self.c_dtype) if self.cast else None
        self.slots = a_slots + b_slots + c_slots
        steps, loads = [], []
        a_count = b_count = blk = 0
        panel, a_once = {}, None
        for j in range(p.n_j):
            j0, j1 = j * bn, min(N, (j + 1) * bn)
            for i in range(p.n_i):
                i0, i1 = i * bm, min(M, (i + 1) * bm)
                cs = c_slots[blk % len(c_slots)]
                c_dev = cs.view(C.shape(i1 - i0, j1 - j0))
                c_cast = cs.cast[:c_dev.numel()].view(c_dev.shape) if self.cast else None
                c_host = C.tile(i0, i1, j0, j1)
                c_load = None
                if self.beta != 0:
                    c_load = self._load(C, c_host, c_dev, cs, len(steps), self.c_dtype)
                    loads.append(c_load)
                for q in range(p.n_k):
                    k0, k1 = q * bk, min(K, (q + 1) * bk)
                    s = len(steps)
                    if a_once is not None:          # A is one tile: loaded once, kept
                        al = a_once
                    else:
                        a_slot = a_slots[a_count % len(a_slots)]
                        a_count += 1
                        a_dev = a_slot.view(A.shape(i1 - i0, k1 - k0))
                        al = self._load(A, A.tile(i0, i1, k0, k1), a_dev, a_slot, s, self.ab_dtype)
                        loads.append(al)
                        if p.n_i * p.n_k == 1:
                            a_once = al
                    if p.resident:
                        key = (j, q)
                        if key not in panel:
                            bs = b_slots[j % len(b_slots)]
                            bd = bs.view(B.shape(k1 - k0, j1 - j0), offset=k0 * bn)
                            panel[key] = self._load(B, B.tile(k0, k1, j0, j1), bd, bs, s, self.ab_dtype)
                            panel[key].panel = j
                            loads.append(panel[key])
                        bl = panel[key]
                    else:
                        bs = b_slots[b_count % len(b_slots)]
                        b_count += 1
                        bl = self._load(B, B.tile(k0, k1, j0, j1), bs.view(B.shape(k1 - k0, j1 - j0)), bs, s,
                                        self.ab_dtype)
                        loads.append(bl)
                    steps.append(_Step(i, j, q, al, bl, A.logical(al.dev), B.logical(bl.dev), cs, c_dev, c_host,
                                       c_load if q == 0 else None, q == 0, q == p.n_k - 1, c_cast))
                blk += 1
        # where each load's pieces go: after the GEMM before the one that needs it, except the
        # resident panels of column j >= 1, spread over the GEMMs of column j-1 (prefetch)
        per_col = p.n_i * p.n_k
        after = [[] for _ in range(len(steps) + 1)]     # after[s+1]: pieces placed after GEMM s
        for ld in sorted(loads, key=lambda x: x.need):
            j = getattr(ld, "panel", None)
            if j is not None and j >= 1:
                lo, hi = (j - 1) * per_col, j * per_col          # GEMMs lo..hi-1
                total = len(ld.pieces)
                self._spread(after, ld, lo, hi, total)
            else:
                for pc in ld.pieces:
                    after[max(ld.need, 0)].append((ld, pc))
        # panel pieces of several chunks share a column: keep each load's pieces in order
        self.steps, self.after = steps, after

    def _spread(self, after, ld, lo, hi, total):
        n = hi - lo
        for idx, pc in enumerate(ld.pieces):
            # chunk (j, q) of the panel: spread across the column's GEMMs by piece index
            pos = lo + 1 + min(n - 1, (idx * n) // max(total, 1))
            pos = min(pos, ld.need)
            after[pos].append((ld, pc))

    def _load(self, op, host, dev_tile, slot, need, host_dtype):
        rows, cols = host.shape
        direct = op.direct and dev_tile.dtype == host_dtype and (op.two_d or host.is_contiguous())
        pb = self.direct_piece_bytes if direct else self.piece_bytes
        ld = _Load(op, host, dev_tile, slot, _pieces(rows, cols, host.element_size(), pb), direct, need)
        ld.loaded_ev = self.dev.event()
        return ld

    # ---- running it
    def execute(self):
        t_b = time.perf_counter()
        self._build()
        dev = self.dev
        order = []                     # the global piece order (staging runs ahead along it)
        for s in range(len(self.steps) + 1):
            order.extend(self.after[s])
        # panels spread over a column may land before loads needed earlier in the same slot:
        # order is what the copy stream sees; every piece's slot condition was met when placed
        staged = [x for x in order if not x[0].direct]
        nstage = self.threads + 2 if staged else 0
        maxp = 1
        for ld, (r0, r1, c0, c1) in staged:
            maxp = max(maxp, (r1 - r0) * (c1 - c0) * ld.host.element_size())
        self.stage_bufs = [dev.pinned(maxp, torch.uint8) for _ in range(nstage)]
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
        r, cc = self.steps[0].c_host.shape
        outb = min(max(self.piece_bytes, self.C.esz), r * cc * self.C.esz)
        self.out_bufs = [dev.pinned(outb, torch.uint8) for _ in range(0 if self.c_store_direct else 2 * out_threads)]
        self.out_evs = [dev.event() for _ in self.out_bufs]
        self.out_futs = [None] * len(self.out_bufs)
        self.out_next = 0
        drain = threading.Thread(target=self._drain, name="tiledmm-drain", daemon=True)
        self.t0_ev = dev.event()
        self.done_evs = []
        try:
            with (torch.cuda.device(dev.device) if dev.gpu else contextlib.nullcontext()):
                dev.record(self.t0_ev, dev.compute)
                dev.wait(dev.copy_in, self.t0_ev)
                dev.wait(dev.copy_out, self.t0_ev)
                drain.start()
                self.phases["build_s"] = time.perf_counter() - t_b
                t_i = time.perf_counter()
                self._refill()
                self._main()
                self.phases["issue_s"] = time.perf_counter() - t_i
                t_f = time.perf_counter()
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
                self.phases["finish_s"] = time.perf_counter() - t_f
                if self.drain_err is not None:
                    raise self.drain_err
        finally:
            if drain.is_alive():
                with self.drain_cv:
                    self.drain_q.append(None)
                    self.drain_cv.notify()
                drain.join()
            self.pool.shutdown(wait=True)
            self.out_pool.shutdown(wait=True)
        if self.progress:
            self.progress(len(self.steps), len(self.steps))

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
        if ev is not None:
            ev.synchronize()          # the H2D that last read this buffer has finished
        t = time.perf_counter()
        r0, r1, c0, c1 = pc
        src = ld.host[r0:r1, c0:c1]
        buf = self.stage_bufs[k][: (r1 - r0) * (c1 - c0) * src.element_size()].view(src.dtype).view(r1 - r0, c1 - c0)
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
        nbytes = (r1 - r0) * (c1 - c0) * ld.host.element_size()
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
                _memcpy2d(dst, src, 1, dev.copy_in)
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
                _memcpy2d(st.c_host, src_dev, 2, dev.copy_out)
            dev.record(e1, dev.copy_out)
            self.intervals.append(("copy_out", "d2h", e0, e1))
            self.bytes["d2h"] += rows * cols * C.esz
            return
        for pc in _pieces(rows, cols, C.esz, self.piece_bytes):
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


# -- helpers for runs of it (the CLI's `tiledmm outofcore`, scripts/bench_outofcore.py) ---------------
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
    from . import _backend
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


__all__ = ["matmul_out_of_core", "plan_out_of_core", "warm_out_of_core", "Plan", "torch_gemm", "tiledmm_gemm",
           "fill_random", "check_sampled", "sample_index", "row_chunks"]
