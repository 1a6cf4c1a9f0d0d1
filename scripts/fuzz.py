#!/usr/bin/env python3
"""A randomized checker of ``tiledmm.matmul``'s contract (README, "The contract").

    python3 scripts/fuzz.py --cases 10000 --seed 0 [--out DIR] [--max-dim N]
    python3 scripts/fuzz.py --seed 0 --only 123,456 -v      # re-run (repro) single cases

Every case is drawn from its own generator, ``numpy.random.default_rng([seed, index])``, so a
case is reproduced by its seed and index alone, whatever ran before it (on a GPU its structure comes
from one of ``--templates`` per-run templates, its sizes and values from its own generator: see
``draw_case``; worker processes, ``--jobs``, share the GPU). A case draws:

* the array kind: torch CUDA most often; numpy, torch CPU, CuPy and numba device arrays where
  importable (in emulation: torch CPU, numpy, numba's simulated device arrays);
* dtype and precision: float32 ieee / tf32, float64, float16, bfloat16 (torch only);
* the kernel: the default most often, else any registered kernel that takes the dtype (and
  the precision; within its emulation limit in emulation), a tile or config for the kernels
  that have them, and now and then a forced Triton ``variant=`` (with a ``config=`` on a GPU);
* ranks and batch dimensions: 1-D vectors, 2-D, 3-D and 4-D, batch dimensions that broadcast;
* sizes: mostly 1..300 (odd ones often), zeros now and then, rarely up to ``--max-dim``;
* layouts, per operand: transposed views, slices with steps, negative strides (numpy, CuPy,
  numba), zero strides (expand / broadcast_to), offsets that break 16-byte alignment,
  operands that share one buffer;
* the GEMM form: no out, a fresh out (same dtype, float32 for 16-bit inputs, now and then
  another float), out that *is* an input or overlaps one; alpha and beta incl. 0 and 1; when
  beta == 0 the out (its whole buffer) is poisoned with NaN.

Each operand is a view of a flat buffer; the same view is built over ``arange`` on the host,
so the checker knows which buffer element every array element is. After the call it checks:
the result's kind, device, shape and dtype (``a @ b``'s), that ``out`` is returned, every
input buffer bit-for-bit unchanged (except where out overlaps it), no write into out's buffer
outside out's elements, no NaN from a poisoned out, and the error against the float64
reference (numpy, on the CPU) ``alpha * a @ b + beta * out_old``:

    err = ||C - ref|| / max(||ref||, ||alpha|*|a|@|b| + |beta|*|out_old|| / sqrt(K))

(the second term only matters where ref cancels to near zero; ref == 0 needs C == 0), under a
tolerance per dtype/precision (fp64 1e-12, fp32 1e-5, tf32 5e-3, fp16 5e-3, bf16 3e-2; the
out's dtype where it is coarser) times max(1, sqrt(K / 256)).

A few percent of the cases are invalid inputs (inner dimensions that differ, batches that do
not broadcast, mixed dtypes or kinds, beta without out, a wrong out, an out with overlapping
elements, bad options): they must raise ``tiledmm.TiledmmError``.

Categories: ok; wrong (a wrong answer or a broken promise; also an invalid input accepted);
refused (TiledmmError on a valid input); refused-by-design (a forced variant that cannot run
the call: TiledmmError "variant ... cannot run this call"); crash (any other exception).
Exit status 1 if any case is wrong, refused or crashed.

Tuning is off (``TILEDMM_TUNE=off``, the model picks; ``--tune`` keeps first-call timing on)
and tuned choices go to a throw-away folder, never the user's cache.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# --------------------------------------------------------------------------------------------
# environment: what can run here
# --------------------------------------------------------------------------------------------

PAIRS = (("float32", "ieee"), ("float32", "tf32"), ("float64", None), ("float16", None), ("bfloat16", None))
PAIR_WEIGHTS = (0.32, 0.14, 0.16, 0.16, 0.22)
BASE_TOL = {"float64": 1e-12, "ieee": 1e-5, "tf32": 5e-3, "float16": 5e-3, "bfloat16": 3e-2}
FLOATS = ("float64", "float32", "float16", "bfloat16")
BITS = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}
CATEGORIES = ("ok", "wrong", "refused", "by_design", "crash")
# On a GPU every new structure costs a compile (Triton specialises on each int argument being 1 or a
# multiple of 16, on 16-byte alignment, dtypes and flags; numba per signature): about a second of
# CPU each. Drawing each case's structure from this many templates a run (values stay per case)
# keeps 10,000 cases to a few minutes; --templates 0 draws every structure afresh (slower, wider).
DEFAULT_TEMPLATES = 150


def _setup_env(tune: bool = False) -> None:
    """Before tiledmm is imported: quiet, tuning off unless asked, a throw-away tuning cache."""
    os.environ.setdefault("TILEDMM_QUIET", "1")
    if not tune:
        os.environ.setdefault("TILEDMM_TUNE", "off")
    os.environ.setdefault("TILEDMM_CACHE_DIR", tempfile.mkdtemp(prefix="tiledmm-fuzz-cache-"))


@dataclass
class Env:
    gpu: bool
    kinds: list            # [(kind, weight)]: "torch-cuda", "torch-cpu", "numpy", "cupy", "numba"
    specs: dict            # name -> KernelSpec
    variants: tuple
    max_dim: int
    small: int             # the usual size range's top (300 on a GPU)
    work_cap: int          # most multiply-adds of one case (the CPU reference's cost)
    templates: int = 0     # structures per run (0: every case its own; see draw_case)

    @staticmethod
    def detect(max_dim: int | None = None, templates: int | None = None) -> "Env":
        _setup_env()
        import tiledmm
        from tiledmm import _backend, registry
        gpu = not _backend.emulating()
        kinds = [("torch-cuda", 0.55), ("numpy", 0.15), ("torch-cpu", 0.12)] if gpu else \
            [("torch-cpu", 0.5), ("numpy", 0.3)]
        if gpu:
            try:
                import cupy  # noqa: F401
                kinds.append(("cupy", 0.09))
            except Exception:   # noqa: BLE001  (not installed, or no usable CUDA for it)
                pass
        try:
            _backend.numba_cuda()
            kinds.append(("numba", 0.09 if gpu else 0.2))
        except Exception:       # noqa: BLE001
            pass
        from tiledmm.kernels.block.matmul import VARIANTS
        specs = {s.name: s for s in registry.all_specs()}
        if max_dim is None:
            max_dim = 2048 if gpu else 24
        if templates is None:
            templates = DEFAULT_TEMPLATES if gpu else 0
        return Env(gpu=gpu, kinds=kinds, specs=specs, variants=tuple(VARIANTS), max_dim=max_dim,
                   small=300 if gpu else 12, work_cap=2 ** 31 if gpu else 2 ** 14, templates=templates)


# --------------------------------------------------------------------------------------------
# a case: plain data, drawn from its own generator
# --------------------------------------------------------------------------------------------

@dataclass
class View:
    """An array as a view of a flat buffer: buffer[offset : offset + prod(storage)].reshape(storage),
    sliced start:start+(n-1)*step+1:step per storage dim, last two dims swapped (transpose),
    reversed along ``flips`` (logical axes), broadcast to ``shape`` (zero strides)."""
    buf: int
    shape: tuple
    offset: int = 0
    storage: tuple = ()
    starts: tuple = ()
    steps: tuple = ()
    counts: tuple = ()          # elements per storage dim before the expansion
    transpose: bool = False
    flips: tuple = ()
    expanded: tuple = ()        # logical axes broadcast from size 1

    def span(self) -> int:
        return self.offset + math.prod(self.storage)

    def tags(self) -> str:
        t = []
        if self.transpose:
            t.append("T")
        if any(s > 1 for s in self.steps):
            t.append("step" + "x".join(map(str, self.steps)))
        elif any(st for st in self.starts) or any(f > c for f, c in zip(self.storage, self.counts)):
            t.append("sub")
        if self.flips:
            t.append("neg" + ",".join(map(str, self.flips)))
        if self.expanded:
            t.append("zero" + ",".join(map(str, self.expanded)))
        if self.offset:
            t.append(f"off{self.offset}")
        return "[" + (" ".join(t) or "contig") + "]"


@dataclass
class Case:
    seed: int
    index: int
    kind: str
    dtype: str
    precision: str | None           # the pair's precision ("ieee", "tf32", or None)
    kernel: str | None              # None: the default
    resolved: str                   # the kernel that runs (for the table)
    a: View | None = None
    b: View | None = None
    out: View | None = None         # None: no out
    out_dtype: str | None = None
    out_is: str | None = None       # "a" / "b": out is that very object
    bufs: dict = field(default_factory=dict)   # buffer id -> (length, dtype, fill: "randn" | "nan")
    kwargs: dict = field(default_factory=dict)  # tile, precision, variant, config, alpha, beta, stream
    stream: str | None = None       # None | "context" | "param"
    invalid: str | None = None      # the kind of invalid input (expect TiledmmError)
    K: int = 0

    def label(self) -> str:
        if self.invalid:
            return "invalid-input"
        name = self.resolved if self.kernel else f"default:{self.resolved}"
        v = self.kwargs.get("variant")
        return f"{name}[{v}]" if v else name

    def dlabel(self) -> str:
        return f"{self.dtype}/{self.precision}" if self.dtype == "float32" else self.dtype

    def describe(self) -> str:
        kw = {k: v for k, v in self.kwargs.items() if k not in ("alpha", "beta")}
        kw = " ".join(f"{k}={v!r}" for k, v in kw.items())
        s = f"{self.kind} {self.dlabel()} kernel={self.kernel} {kw} "
        if self.a is not None:
            s += f"a={_shape(self.a.shape)}{self.a.tags()} b={_shape(self.b.shape)}{self.b.tags()}"
            if self.b.buf == self.a.buf:
                s += "(shares a's buffer)"
        if self.out is not None:
            s += f" out={_shape(self.out.shape)} {self.out_dtype}{self.out.tags()}"
            if self.out_is:
                s += f"(is {self.out_is})"
            elif self.out.buf in (self.a.buf, self.b.buf):
                s += "(overlaps an input)"
        s += f" alpha={self.kwargs.get('alpha', 1.0)!r} beta={self.kwargs.get('beta', 0.0)!r}"
        if self.stream:
            s += f" stream={self.stream}"
        if self.invalid:
            s += f" INVALID:{self.invalid}"
        return s


def _shape(s) -> str:
    return "(" + ",".join(map(str, s)) + ")"


def _choice(rng, items, weights=None):
    if weights is None:
        return items[int(rng.integers(len(items)))]
    w = np.asarray(weights, dtype=float)
    return items[int(rng.choice(len(items), p=w / w.sum()))]


def _dim(rng, env: Env, zero_p: float = 0.03) -> int:
    u = rng.random()
    if u < zero_p:
        return 0
    if u < zero_p + 0.25:
        return int(rng.integers(1, min(17, env.small + 1)))
    n = int(rng.integers(1, env.small + 1))
    return n | 1 if rng.random() < 0.5 else n         # odd sizes often


RANKS = [((2, 2), .36), ((3, 3), .14), ((3, 2), .08), ((2, 3), .06), ((4, 4), .04), ((4, 3), .02),
         ((3, 4), .015), ((4, 2), .015), ((2, 4), .01), ((1, 2), .05), ((2, 1), .05), ((1, 1), .03),
         ((1, 3), .03), ((3, 1), .03), ((4, 1), .01), ((1, 4), .01)]


def _batch(rng, env: Env, r: int) -> tuple:
    dims = []
    for _ in range(r):
        u = rng.random()
        if u < 0.01:
            dims.append(0)
        elif u < 0.75 or not env.gpu:
            dims.append(int(rng.integers(1, 4 if env.gpu else 3)))
        else:
            dims.append(int(rng.integers(4, 17)))
    return tuple(dims)


def _eligible(env: Env, dtype: str, precision: str | None) -> list[str]:
    out = []
    for name, s in env.specs.items():
        if dtype not in s.dtypes or (not env.gpu and s.emulation_limit is None):
            continue
        if precision == "tf32" and "precision" not in s.options:
            continue
        out.append(name)
    return out


def _default(dtype: str, env: Env) -> str:
    from tiledmm.api import default_kernel
    return default_kernel(dtype)


def _kernel(rng, env: Env, dtype: str, precision: str | None) -> str | None:
    if rng.random() < 0.5:
        return None
    names = _eligible(env, dtype, precision)
    weights = [6.0 if n == "triton" else 2.0 if n == "cublas" else 1.0 for n in names]
    return _choice(rng, names, weights)


def _view(rs, rv, env: Env, kind: str, shape: tuple, buf: int, *, writable: bool = False,
          plain: bool = False) -> View:
    """A random layout for a logical ``shape``; ``writable``: no zero strides (an out). Which
    layout from ``rs`` (the structure), pad and offset sizes from ``rv`` (the values)."""
    r = len(shape)
    neg_ok = kind in ("numpy", "cupy", "numba")
    u = [rs.random() for _ in range(5 * 4 + 3)]      # a fixed count: the structure stream stays in step
    if plain or u[0] < 0.4:
        transpose, steps, flips, expanded, offset, pads = False, [1] * r, (), (), 0, [0] * r
    else:
        transpose = r >= 2 and u[1] < 0.35
        steps = [(2 if u[3 + i] < 0.5 else 3) if u[7 + i] < 0.15 else 1 for i in range(r)]
        flips = tuple(i for i in range(r) if neg_ok and shape[i] > 1 and u[11 + i] < 0.15)
        expanded = () if writable else tuple(i for i in range(r) if u[15 + i] < 0.1 and i not in flips)
        if kind == "numba" and env.gpu and (expanded or 0 in shape):
            flips = ()      # numba's own slicing gets these shapes wrong ([::-1] of a 4x0 array is 1x0)
        offset = int(rv.integers(1, 4)) if u[2] < 0.2 else 0
        pads = [int(rv.integers(1, 4)) if u[19 + min(i, 3)] < 0.2 else 0 for i in range(r)]
    counts = [1 if i in expanded else n for i, n in enumerate(shape)]
    order = list(range(r))
    if transpose:
        order[-2], order[-1] = order[-1], order[-2]
    scount = [counts[i] for i in order]           # storage order
    ssteps = [steps[i] for i in order]
    spads = [pads[i] for i in order]
    storage, starts = [], []
    for n, st, p in zip(scount, ssteps, spads):
        start = int(rv.integers(0, p + 1)) if p else 0
        storage.append(start + ((n - 1) * st + 1 if n else 0) + (p - start))
        starts.append(start)
    return View(buf=buf, shape=tuple(shape), offset=offset, storage=tuple(storage), starts=tuple(starts),
                steps=tuple(ssteps), counts=tuple(scount), transpose=transpose, flips=flips,
                expanded=expanded)


def draw_case(env: Env, seed: int, index: int) -> Case:
    """Case ``index`` of run ``seed``: the same case whatever ran before.

    Two generators: ``rs`` draws the structure (kind, dtype, kernel, options, ranks, which layouts,
    the GEMM form: what Triton and numba compile a new kernel for), ``rv`` the values (sizes, pads,
    offsets, alpha and beta, the data). Without templates both are the case's own; with
    ``env.templates`` = P the structure is template t's (t drawn by the case), so a run of N cases
    meets about P structures, N / P times each with fresh sizes and values -- and compiles about P
    kernels instead of N."""
    rv = np.random.default_rng([seed, index])
    if env.templates:
        rs = np.random.default_rng([seed, 1 << 20, int(rv.integers(env.templates))])
    else:
        rs = rv
    rng = rs
    kind = _choice(rng, [k for k, _ in env.kinds], [w for _, w in env.kinds])
    while True:
        dtype, precision = _choice(rng, PAIRS, PAIR_WEIGHTS)
        if dtype == "bfloat16" and not kind.startswith("torch"):
            continue                                  # numpy, CuPy, numba have no bfloat16
        break
    if rng.random() < 0.03:
        return _invalid_case(rv, env, seed, index, kind, dtype, precision)
    kernel = _kernel(rng, env, dtype, precision)
    resolved = kernel or _default(dtype, env)
    spec = env.specs[resolved]
    c = Case(seed, index, kind, dtype, precision, kernel, resolved)

    # options
    if precision == "tf32":
        c.kwargs["precision"] = "tf32"
    elif precision == "ieee" and "precision" in spec.options and rng.random() < 0.5:
        c.kwargs["precision"] = "ieee"
    if spec.tiles and rng.random() < 0.5:
        tiles = [t for t in spec.tiles if t <= 8] if not env.gpu and min(spec.tiles) <= 8 else list(spec.tiles)
        c.kwargs["tile"] = int(_choice(rng, tiles))
    elif not env.gpu and spec.tiles and min(spec.tiles) <= 8:
        c.kwargs["tile"] = int(_choice(rng, [t for t in spec.tiles if t <= 8]))   # the simulator: small blocks
    if "config" in spec.options and spec.family == "simt" and env.gpu and rng.random() < 0.2:
        c.kwargs["config"] = _simt_config(rng, resolved, dtype)
    if kernel == "triton" and rng.random() < 0.35:
        c.kwargs["variant"] = _choice(rng, list(env.variants))
        if env.gpu and rng.random() < 0.3:
            cfg = _triton_config(rng, c.kwargs["variant"], precision)
            if cfg is not None:
                c.kwargs["config"] = cfg

    # ranks, batch, sizes
    ra, rb = _choice(rng, [r for r, _ in RANKS], [w for _, w in RANKS])
    r = max(ra, rb) - 2
    full = _batch(rv, env, max(r, 0))
    huge = env.gpu and r >= 1 and rv.random() < 0.002 and resolved in ("triton", "cublas")
    if huge:                                           # more than 65535 batches: over gridDim.y
        full = (int(rv.integers(65536, 70001)),) + full[1:]
    bcast = [rs.random() < 0.2 for _ in range(8)]      # which batch dims of a / b broadcast (size 1)

    def part(rank, first):
        if rank < 3:
            return ()
        dims = full[len(full) - (rank - 2):]
        return tuple(1 if bcast[first + i] else d for i, d in enumerate(dims))
    ba, bb = part(ra, 0), part(rb, 4)
    big = env.max_dim > env.small and rv.random() < (0.004 if env.gpu else 0.05)
    M, K, N = _dim(rv, env), _dim(rv, env), _dim(rv, env)
    if big:                                            # one or two dims up to --max-dim
        for which in rv.choice(3, size=int(rv.integers(1, 3)), replace=False):
            v = int(rv.integers(env.small + 1, env.max_dim + 1))
            M, K, N = (v, K, N) if which == 0 else (M, v, N) if which == 1 else (M, K, v)
    if huge:
        M, K, N = (int(rv.integers(1, 5)) for _ in range(3))
    if c.kwargs.get("variant") == "simt-async" and env.gpu and rv.random() < 0.5:
        M, K, N = (int(rv.integers(1024, 1100)) for _ in range(3))      # what it takes (every side >= 1024)

    # GEMM form (decided before the sizes are final: out = a needs N == K)
    u = rng.random()
    out_mode = "none" if u < 0.45 else "fresh" if u < 0.86 else "alias"
    alias_of = None
    if out_mode == "alias":
        alias_of = _choice(rng, ["a", "b"])
        if huge:
            pass
        elif alias_of == "a" and ra >= 2 and rb >= 2 and rb <= ra:
            N = K
            ba = full[len(full) - (ra - 2):] if ra > 2 else ()
            if len(bb) > len(ba):
                bb = bb[len(bb) - len(ba):]
        elif alias_of == "b" and rb >= 2 and ra >= 2 and ra <= rb:
            M = K
            bb = full[len(full) - (rb - 2):] if rb > 2 else ()
            if len(ba) > len(bb):
                ba = ba[len(ba) - len(bb):]
        # else: out overlaps the operand's buffer without being it
    sa = ba + ((M,) if ra >= 2 else ()) + (K,)
    sb = bb + (K,) + ((N,) if rb >= 2 else ())
    if ra == 1:
        sa = (K,)
    if rb == 1:
        sb = (K,)
    # the work cap (CPU reference; the kernel's emulation limit)
    cap = env.work_cap if env.gpu else min(env.work_cap, spec.emulation_limit or env.work_cap)
    sa, sb = _fit(sa, sb, ra, rb, cap, keep_square=alias_of if out_mode == "alias" else None)
    K = sa[-1]
    c.K = K
    res = _result_shape(sa, sb)

    # layouts
    c.bufs[0] = [0, dtype, "randn"]
    c.a = _view(rs, rv, env, kind, sa, 0)
    shared = rng.random() < 0.08
    if shared:                                         # b reads a's buffer too
        c.b = _view(rs, rv, env, kind, sb, 0)
        c.b.offset += int(rv.integers(0, max(1, c.a.span())))
    else:
        c.bufs[1] = [0, dtype, "randn"]
        c.b = _view(rs, rv, env, kind, sb, 1)

    alpha = _alpha(rs, rv)
    beta = 0.0
    if out_mode == "none":
        if rng.random() < 0.1:
            c.kwargs["beta"] = 0.0
    else:
        beta = _beta(rs, rv)
        c.kwargs["beta"] = beta
        is_a = alias_of == "a" and tuple(res) == tuple(sa) and not c.a.expanded
        is_b = alias_of == "b" and tuple(res) == tuple(sb) and not c.b.expanded
        same_object = rng.random() < 0.7                # (drawn always: the structure stream stays in step)
        overlap_plain = rng.random() < 0.6
        if (is_a or is_b) and same_object:
            c.out_is = "a" if is_a else "b"
            c.out = c.a if is_a else c.b
            c.out_dtype = dtype
        elif alias_of and kind != "numba":             # out's elements inside an input's buffer
            src = c.a if alias_of == "a" else c.b
            c.out = _view(rs, rv, env, kind, res, src.buf, writable=True, plain=overlap_plain)
            c.out.offset += int(rv.integers(0, max(1, src.span())))
            c.out_dtype = dtype
        else:
            c.out_dtype = _out_dtype(rng, kind, dtype)
            c.bufs[2] = [0, c.out_dtype, "nan" if beta == 0.0 else "randn"]
            c.out = _view(rs, rv, env, kind, res, 2, writable=True)
    if alpha != 1.0 or rng.random() < 0.1:
        c.kwargs["alpha"] = alpha
    for v in (c.a, c.b, c.out):
        if v is not None:
            c.bufs[v.buf][0] = max(c.bufs[v.buf][0], v.span())
    if env.gpu and kind != "torch-cpu" and kind != "numpy" and rng.random() < 0.06 or \
            env.gpu and kind in ("numpy", "torch-cpu") and rng.random() < 0.02:
        c.stream = _choice(rng, ["context", "param"]) if kind == "torch-cuda" else "param"
    return c


def _simt_config(rng, name: str, dtype: str) -> str:
    from tiledmm.kernels.simt import k10_autotune, k11_async
    mod = k10_autotune if name == "autotuned" else k11_async
    return str(_choice(rng, list(mod.CANDIDATES[dtype])).name)


def _triton_config(rng, variant: str, precision: str | None):
    from tiledmm.kernels.block import configs as C
    from tiledmm.kernels.block import variants as V
    v = V.BY_NAME.get(variant)
    cfgs = v.configs(C.kind_of(precision or "none")) if v is not None else []
    return dict(_choice(rng, list(cfgs))) if cfgs else None


def _alpha(rs, rv):
    """The kind of alpha from the structure (1, 0, other: what the kernels compile for), its value
    from the values."""
    u = round(float(rv.uniform(-2, 2)), 3)
    return _choice(rs, [1.0, 1, 0.0, -1.0, 0.5, 2, np.float64(-0.75), u],
                   [0.45, 0.05, 0.06, 0.08, 0.08, 0.06, 0.06, 0.16])


def _beta(rs, rv):
    u = round(float(rv.uniform(-2, 2)), 3)
    return _choice(rs, [0.0, 0, 1.0, -0.5, 2.0, u], [0.45, 0.05, 0.15, 0.1, 0.05, 0.2])


def _out_dtype(rng, kind: str, dtype: str) -> str:
    u = rng.random()
    if dtype in ("float16", "bfloat16") and u < 0.35:
        return "float32"
    if u > 0.93:
        others = [d for d in FLOATS if d != dtype and (d != "bfloat16" or kind.startswith("torch"))]
        return _choice(rng, others)
    return dtype


def _fit(sa, sb, ra, rb, cap, keep_square=None):
    """Shrink sizes (the largest first, halving) until the work is under ``cap``; batch dims are
    shrunk in both operands alike (they must still broadcast); ``keep_square``: N == K ("a") or
    M == K ("b") stays true."""
    ba = list(sa[:-2]) if ra >= 2 else []
    bb = list(sb[:-2]) if rb >= 2 else []
    M = sa[-2] if ra >= 2 else None
    N = sb[-1] if rb >= 2 else None
    K = sa[-1]

    def shapes():
        a = tuple(ba) + ((M,) if M is not None else ()) + (K,)
        b = tuple(bb) + (K,) + ((N,) if N is not None else ())
        return a, b
    while True:
        a, b = shapes()
        if math.prod(_result_shape(a, b)) * K <= cap:
            return a, b
        full = list(np.broadcast_shapes(tuple(ba), tuple(bb)))
        dims = {"M": M or 0, "N": N or 0, "K": K}
        if full and max(full) > max(dims.values()):
            p = len(full) - int(np.argmax(full[::-1])) - 1      # position in the full batch
            v = full[p]
            for lst in (ba, bb):
                j = len(lst) - (len(full) - p)
                if j >= 0 and lst[j] == v:
                    lst[j] = max(1, v // 2)
            continue
        which = max(dims, key=dims.get)
        if keep_square == "a" and which in ("N", "K"):
            which = "NK"
        if keep_square == "b" and which in ("M", "K"):
            which = "MK"
        if "M" in which and M is not None:
            M = max(1, M // 2)
        if "N" in which and N is not None:
            N = max(1, N // 2)
        if "K" in which:
            K = max(1, K // 2)


def _result_shape(sa: tuple, sb: tuple) -> tuple:
    """numpy's matmul result shape (the checker's own, not the library's)."""
    ba, bb = sa[:-2], sb[:-2]
    batch = np.broadcast_shapes(ba, bb)
    return tuple(batch) + ((sa[-2],) if len(sa) > 1 else ()) + ((sb[-1],) if len(sb) > 1 else ())


INVALID = ("inner", "batch", "mixed-dtype", "mixed-kind", "beta-no-out", "out-shape", "out-overlap",
           "precision", "option", "kernel", "tile", "alpha", "scalar", "kernel-dtype")


def _invalid_case(rng, env, seed, index, kind, dtype, precision) -> Case:
    what = _choice(rng, list(INVALID))
    c = Case(seed, index, kind, dtype, precision, None, _default(dtype, env), invalid=what)
    M, K, N = (int(rng.integers(2, 9)) for _ in range(3))
    sa, sb = (M, K), (K, N)
    if what == "inner":
        sb = (K + 1, N)
    elif what == "batch":
        sa, sb = (2, M, K), (3, K, N)
    elif what == "scalar":
        sa = ()
    c.bufs = {0: [0, dtype, "randn"], 1: [0, dtype, "randn"]}
    c.a = View(0, sa, storage=sa, starts=(0,) * len(sa), steps=(1,) * len(sa), counts=sa)
    c.b = View(1, sb, storage=sb, starts=(0,) * len(sb), steps=(1,) * len(sb), counts=sb)
    res = (M, N)
    if what == "out-shape":
        res = (M, N + 1)
    if what in ("out-shape", "out-overlap"):
        c.bufs[2] = [0, dtype, "randn"]
        counts = (1, N) if what == "out-overlap" else res
        c.out = View(2, (M, N) if what == "out-overlap" else res, storage=counts, starts=(0, 0), steps=(1, 1),
                     counts=counts, expanded=(0,) if what == "out-overlap" else ())
        c.out_dtype = dtype
        c.kwargs["beta"] = 0.0
    for v in (c.a, c.b, c.out):
        if v is not None:
            c.bufs[v.buf][0] = max(c.bufs[v.buf][0], v.span(), 1)
    if what == "beta-no-out":
        c.kwargs["beta"] = 0.5
    elif what == "precision":
        c.kwargs["precision"] = "tf32" if dtype != "float32" else "fp8"
        c.kernel = "triton" if dtype != "float64" else None
    elif what == "option":
        c.kwargs["colour"] = "blue"
    elif what == "kernel":
        c.kernel = "no-such-kernel"
    elif what == "tile":
        c.kernel, c.kwargs["tile"] = "tiled", 3
        if dtype not in env.specs["tiled"].dtypes:
            c.kwargs["tile"] = 16
    elif what == "alpha":
        c.kwargs["alpha"] = _choice(rng, ["2", True, None, 1j])
    elif what == "kernel-dtype":          # a kernel that does not take the dtype
        if dtype == "float32":
            c.kernel, c.kwargs["tile"], c.kwargs["precision"] = "naive", 4, "tf32"   # naive takes no precision
        else:
            c.kernel = "triton" if dtype == "float64" else "naive"
    c.K = K
    return c


# --------------------------------------------------------------------------------------------
# building the arrays
# --------------------------------------------------------------------------------------------

def _torch_dtype(name: str):
    import torch
    return getattr(torch, name)


def _round_to(vals: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values exactly representable in ``dtype``."""
    if dtype == "bfloat16":
        import torch
        return torch.from_numpy(vals).to(torch.bfloat16).to(torch.float64).numpy()
    return vals.astype(dtype).astype(np.float64)


def _apply(x, v: View, lib: str, *, flips: bool = True, expand: bool = True):
    """The view ``v`` over the flat buffer ``x`` (numpy / cupy / torch / numba-sim semantics)."""
    n = math.prod(v.storage)
    x = x[v.offset:v.offset + n].reshape(v.storage)
    idx = tuple(slice(s, s + ((c - 1) * st + 1 if c else 0), st) for s, c, st in zip(v.starts, v.counts, v.steps))
    x = x[idx] if idx else x           # (numpy: x[()] of a 0-d array is a scalar, not a view)
    if v.transpose:
        x = x.transpose(-1, -2) if lib == "torch" else x.swapaxes(-1, -2)
    if flips and v.flips:
        x = x[tuple(slice(None, None, -1) if i in v.flips else slice(None) for i in range(len(v.shape)))]
    if expand and v.expanded:
        if lib == "torch":
            x = x.expand(v.shape)
        elif lib == "cupy":
            import cupy
            x = cupy.broadcast_to(x, v.shape)
        else:
            x = np.broadcast_to(x, v.shape)
    assert tuple(x.shape) == tuple(v.shape), (x.shape, v.shape)
    return x


def index_map(v: View) -> np.ndarray:
    """For every element of the view, its position in the flat buffer."""
    return _apply(np.arange(max(v.span(), 1)), v, "numpy")


class Built:
    """The arrays of one case, their buffers, and the host values before the call."""

    def __init__(self, case: Case, env: Env, rng):
        import torch
        self.case, self.env = case, env
        kind = case.kind
        self.host = {}       # buffer id -> float64 values before the call
        self.bufs = {}       # buffer id -> the buffer in the case's kind (torch base for numba on a GPU)
        for bid, (length, dtype, fill) in case.bufs.items():
            vals = np.full(length, np.nan) if fill == "nan" else rng.standard_normal(length)
            vals = _round_to(vals, dtype)
            self.host[bid] = vals
            self.bufs[bid] = _make_buffer(vals, dtype, kind)
        self.a = self.realize(case.a)
        self.b = self.realize(case.b)
        if case.invalid == "mixed-dtype":
            other = "float64" if case.dtype != "float64" else "float32"
            self.b = _wrap(_make_buffer(self.host[1][:math.prod(case.b.shape)], other, kind).reshape(case.b.shape),
                           kind, env.gpu)
        elif case.invalid == "mixed-kind":
            other = "numpy" if kind != "numpy" else "torch-cpu"
            dt = case.dtype if other != "numpy" or case.dtype != "bfloat16" else "float32"
            self.b = _wrap(_make_buffer(self.host[1][:math.prod(case.b.shape)], dt, other).reshape(case.b.shape),
                           other, env.gpu)
        if case.out is None:
            self.out = None
        elif case.out_is == "a":
            self.out = self.a
        elif case.out_is == "b":
            self.out = self.b
        else:
            self.out = self.realize(case.out)
        self.stream = None
        if case.stream:
            self.stream = torch.cuda.Stream()
            self.stream.wait_stream(torch.cuda.current_stream())

    def _realize(self, v: View):
        kind = self.case.kind
        buf = self.bufs[v.buf]
        if kind == "numba":
            if not self.env.gpu:                       # the simulator: a FakeCUDAArray over the numpy view
                from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
                return FakeCUDAArray(_apply(buf, v, "numpy"))
            from tiledmm._backend import numba_cuda
            t = _apply(buf, v, "torch", flips=False)
            x = numba_cuda().as_cuda_array(t)
            if v.flips:
                x = x[tuple(slice(None, None, -1) if i in v.flips else slice(None) for i in range(len(v.shape)))]
            return x
        lib = "torch" if kind.startswith("torch") else kind
        return _apply(buf, v, lib)

    def realize(self, v: View):
        x = self._realize(v)
        if tuple(x.shape) != tuple(v.shape):     # the array library built something else (the checker's problem)
            raise RuntimeError(f"{self.case.kind} built shape {tuple(x.shape)} for the view {v}")
        return x

    def read_buffer(self, bid: int) -> np.ndarray:
        return _to_host64(self.bufs[bid], "torch" if self.case.kind == "numba" and self.env.gpu else
                          ("numpy" if self.case.kind == "numba" else self.case.kind))


def _wrap(x, kind: str, gpu: bool):
    """A numba device array over ``x`` (a torch CUDA tensor; a numpy array in the simulator)."""
    if kind != "numba":
        return x
    if not gpu:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
        return FakeCUDAArray(x)
    from tiledmm._backend import numba_cuda
    return numba_cuda().as_cuda_array(x)


def _make_buffer(vals: np.ndarray, dtype: str, kind: str):
    import torch
    if kind == "numpy" or (kind == "numba" and _emulating()):
        return vals.astype(dtype)
    if kind == "cupy":
        import cupy
        return cupy.asarray(vals.astype(dtype))
    t = torch.from_numpy(vals.copy()).to(_torch_dtype(dtype))     # a copy: vals stay the "before"
    return t.cuda() if kind in ("torch-cuda", "numba") else t


def _emulating() -> bool:
    from tiledmm import _backend
    return _backend.emulating()


def _to_host64(x, kind: str) -> np.ndarray:
    """Any array of the case's kinds as float64 numpy (a copy)."""
    import torch
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    if isinstance(x, np.ndarray):
        return x.astype(np.float64)
    mod = type(x).__module__
    if mod.startswith("cupy"):
        import cupy
        return cupy.asnumpy(x).astype(np.float64)
    if hasattr(x, "copy_to_host"):
        return np.asarray(x.copy_to_host()).astype(np.float64)
    raise TypeError(f"cannot read {type(x)}")


# --------------------------------------------------------------------------------------------
# running and checking one case
# --------------------------------------------------------------------------------------------

@dataclass
class Result:
    category: str
    err: float = 0.0
    reason: str = ""
    tb: str = ""                 # the traceback of a crash (printed with -v)
    seconds: float = 0.0         # building, the call (compiles included) and the check


def tolerance(case: Case) -> float:
    key = case.precision if case.dtype == "float32" else case.dtype
    tol = BASE_TOL[key]
    if case.out_dtype and BITS[case.out_dtype] < BITS[case.dtype]:
        tol = max(tol, BASE_TOL["ieee" if case.out_dtype == "float32" else case.out_dtype])
    return tol * max(1.0, math.sqrt(case.K / 256))


def _expect_kind(case: Case, r, a) -> str | None:
    """Why ``r`` is not what ``a @ b`` gives for this kind (None: it is)."""
    import torch
    kind = case.kind
    if kind.startswith("torch"):
        if not isinstance(r, torch.Tensor):
            return f"result is {type(r).__name__}, expected a torch tensor"
        if r.device != a.device:
            return f"result on {r.device}, inputs on {a.device}"
        return None
    if kind == "numpy":
        return None if isinstance(r, np.ndarray) else f"result is {type(r).__name__}, expected numpy.ndarray"
    if kind == "cupy":
        import cupy
        if not isinstance(r, cupy.ndarray):
            return f"result is {type(r).__name__}, expected cupy.ndarray"
        return None if r.device.id == a.device.id else f"result on device {r.device.id}, inputs on {a.device.id}"
    if not type(r).__module__.startswith("numba"):
        return f"result is {type(r).__module__}.{type(r).__name__}, expected a numba device array"
    return None


def _dtype_of(x) -> str:
    from tiledmm._arrays import dtype_name, kind_of
    return dtype_name(x, kind_of(x))


def run_case(env: Env, case: Case) -> Result:
    """Build, call, check. Never raises: every outcome is a Result."""
    import tiledmm
    rng = np.random.default_rng([case.seed, case.index, 1])
    try:
        built = Built(case, env, rng)
    except Exception as e:   # noqa: BLE001  (the checker's own failure: reported as a crash of the case)
        return Result("crash", reason=f"building the inputs failed: {type(e).__name__}: {e}")
    kw = dict(case.kwargs)
    try:
        if case.stream == "param":
            kw["stream"] = built.stream
            r = tiledmm.matmul(built.a, built.b, kernel=case.kernel, out=built.out, **kw)
        elif case.stream == "context":
            import torch
            with torch.cuda.stream(built.stream):
                r = tiledmm.matmul(built.a, built.b, kernel=case.kernel, out=built.out, **kw)
        else:
            r = tiledmm.matmul(built.a, built.b, kernel=case.kernel, out=built.out, **kw)
        if env.gpu:
            import torch
            torch.cuda.synchronize()
    except tiledmm.TiledmmError as e:
        msg = str(e)
        if case.invalid:
            return Result("ok", reason=f"rejected: {msg}") if msg.strip() else \
                Result("wrong", reason="TiledmmError without a message")
        if "variant" in kw and "cannot run this call" in msg:
            return Result("by_design", reason=msg.split(";")[0])
        return Result("refused", reason=f"TiledmmError: {msg}")
    except Exception as e:   # noqa: BLE001
        tb = traceback.extract_tb(e.__traceback__)
        where = f" at {tb[-1].filename.split('/src/')[-1]}:{tb[-1].lineno}" if tb else ""
        return Result("crash", reason=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}{where}",
                      tb=traceback.format_exc())
    if case.invalid:
        return Result("wrong", reason=f"invalid input ({case.invalid}) accepted, no TiledmmError")
    try:
        return _check(env, case, built, r)
    except Exception as e:   # noqa: BLE001
        return Result("crash", reason=f"checking the result failed: {type(e).__name__}: {e}")


def _check(env: Env, case: Case, built: Built, r) -> Result:
    A = built.host[case.a.buf][index_map(case.a)]
    B = built.host[case.b.buf][index_map(case.b)]
    ref = np.matmul(A, B)
    alpha = float(case.kwargs.get("alpha", 1.0))
    beta = float(case.kwargs.get("beta", 0.0))
    mag = abs(alpha) * np.matmul(np.abs(A), np.abs(B))
    ref = alpha * ref
    C0 = None
    if case.out is not None:
        C0 = built.host[case.out.buf][index_map(case.out)]
        if beta != 0.0:
            ref = ref + beta * C0
            mag = mag + abs(beta) * np.abs(C0)

    # the result object: kind, shape, dtype; out returned
    if case.out is not None:
        if r is not built.out:
            return Result("wrong", reason=f"out given but a different object returned ({type(r).__name__})")
    else:
        why = _expect_kind(case, r, built.a)
        if why:
            return Result("wrong", reason=why)
        if tuple(r.shape) != ref.shape:
            return Result("wrong", reason=f"result shape {tuple(r.shape)}, a @ b gives {ref.shape}")
        if _dtype_of(r) != case.dtype:
            return Result("wrong", reason=f"result dtype {_dtype_of(r)}, expected {case.dtype}")

    # buffers: inputs unchanged; out's buffer unchanged outside out's elements
    written = index_map(case.out).ravel() if case.out is not None else np.empty(0, dtype=np.int64)
    after = {}
    check_bufs = not (case.kind == "numba" and not env.gpu and case.out is not None and case.out.buf in
                      (case.a.buf, case.b.buf))
    for bid in case.bufs:
        if not check_bufs:
            break
        now = built.read_buffer(bid)
        after[bid] = now
        before = built.host[bid]
        keep = np.ones(before.shape, dtype=bool)
        if case.out is not None and bid == case.out.buf:
            keep[written] = False
        same = (now == before) | (np.isnan(now) & np.isnan(before))
        bad = np.flatnonzero(keep & ~same)
        if bad.size:
            who = "out's buffer outside out" if case.out is not None and bid == case.out.buf and \
                bid not in (case.a.buf, case.b.buf) else ("an input (a)" if bid == case.a.buf else "an input (b)")
            return Result("wrong", reason=f"{bad.size} element(s) of {who} changed, first at buffer index {bad[0]}: "
                                          f"{before[bad[0]]!r} -> {now[bad[0]]!r}")

    # the values
    if case.out is not None:
        if case.kind == "numba" and not env.gpu:
            C = _to_host64(built.out, "numba")
        else:
            C = after.get(case.out.buf, built.read_buffer(case.out.buf))[index_map(case.out)]
    else:
        C = _to_host64(r, case.kind)
    C = C.reshape(ref.shape)
    finite_ref = np.isfinite(ref)
    if not np.all(np.isfinite(C)[finite_ref]):
        n = int(np.sum(~np.isfinite(C) & finite_ref))
        why = " (NaN leaked from the poisoned out)" if case.out is not None and beta == 0.0 and \
            np.isnan(C0).any() else ""
        return Result("wrong", err=math.inf, reason=f"{n} non-finite element(s) where the reference is finite{why}")
    diff = float(np.linalg.norm((C - ref).ravel()))
    scale = max(float(np.linalg.norm(ref.ravel())), float(np.linalg.norm(mag.ravel())) / math.sqrt(max(case.K, 1)))
    if scale == 0.0:
        err = 0.0 if diff == 0.0 else math.inf
    else:
        err = diff / scale
    tol = tolerance(case)
    if not err <= tol:
        i = int(np.argmax(np.abs(C - ref))) if C.size else 0
        return Result("wrong", err=err, reason=f"rel err {err:.3g} > tol {tol:.3g} (worst element {i}: "
                                              f"{C.ravel()[i]!r} vs ref {ref.ravel()[i]!r})")
    return Result("ok", err=err)


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------

@dataclass
class Summary:
    seed: int
    cases: int = 0
    elapsed_s: float = 0.0
    rows: dict = field(default_factory=dict)        # (kernel, dtype) -> counts
    failures: list = field(default_factory=list)    # non-ok cases
    by_design: list = field(default_factory=list)
    stopped: str = ""

    def add(self, case: Case, res: Result) -> None:
        entry = None
        if res.category != "ok":
            entry = {"seed": case.seed, "case": case.index, "category": res.category,
                     "description": case.describe(), "reason": res.reason,
                     "repro": f"python3 scripts/fuzz.py --seed {case.seed} --only {case.index} -v"}
        self.add_record(case.label(), case.dlabel(), res.category, res.err, bool(case.invalid), entry, res.seconds)

    def add_record(self, label: str, dlabel: str, category: str, err: float, invalid: bool, entry,
                   seconds: float = 0.0) -> None:
        row = self.rows.setdefault((label, dlabel), {"cases": 0, **{c: 0 for c in CATEGORIES}, "max_rel_err": 0.0,
                                                     "seconds": 0.0})
        row["cases"] += 1
        row["seconds"] += seconds
        row[category] += 1
        if category in ("ok", "wrong") and not invalid:
            row["max_rel_err"] = max(row["max_rel_err"], err)
        self.cases += 1
        if entry is not None:
            (self.by_design if category == "by_design" else self.failures).append(entry)

    def totals(self) -> dict:
        t = {"cases": 0, **{c: 0 for c in CATEGORIES}, "max_rel_err": 0.0, "seconds": 0.0}
        for row in self.rows.values():
            for k in t:
                t[k] = max(t[k], row[k]) if k == "max_rel_err" else t[k] + row[k]
        return t

    def bad(self) -> int:
        t = self.totals()
        return t["wrong"] + t["refused"] + t["crash"]

    def table(self) -> str:
        head = f"{'kernel':<28} {'dtype':<16} {'cases':>6} {'ok':>6} {'wrong':>6} {'refused':>8} " \
               f"{'by-design':>9} {'crash':>6} {'max rel err':>12} {'seconds':>8}"
        lines = [head, "-" * len(head)]

        def fmt(k, d, r):
            e = r["max_rel_err"]
            es = "inf" if e == math.inf else f"{e:.2e}"
            return f"{k:<28} {d:<16} {r['cases']:>6} {r['ok']:>6} {r['wrong']:>6} {r['refused']:>8} " \
                   f"{r['by_design']:>9} {r['crash']:>6} {es:>12} {r.get('seconds', 0.0):>8.1f}"
        for (k, d), r in sorted(self.rows.items()):
            lines.append(fmt(k, d, r))
        lines.append("-" * len(head))
        lines.append(fmt("total", "", self.totals()))
        lines.append("seconds: time in the cases (compiles included; summed over the worker processes)")
        lines.append(f"elapsed {self.elapsed_s:.1f} s, seed {self.seed}"
                     + (f"; STOPPED EARLY: {self.stopped}" if self.stopped else ""))
        return "\n".join(lines)

    def to_json(self) -> dict:
        rows = [{"kernel": k, "dtype": d, **{x: (None if v == math.inf else v) for x, v in r.items()}}
                for (k, d), r in sorted(self.rows.items())]
        tot = {x: (None if v == math.inf else v) for x, v in self.totals().items()}
        return {"seed": self.seed, "cases": self.cases, "elapsed_s": round(self.elapsed_s, 2), "rows": rows,
                "totals": tot, "failures": self.failures, "refused_by_design": self.by_design,
                "stopped": self.stopped}


def run(env: Env, seed: int, indices, *, verbose: bool = False, time_limit: float | None = None,
        log=print, records: list | None = None) -> Summary:
    """Cases ``indices`` of run ``seed`` in this process. ``records``: also append one plain tuple a
    case (for a parent process to merge)."""
    s = Summary(seed)
    from tiledmm.harness import cuda_alive
    t0 = time.perf_counter()
    for i in indices:
        try:
            case = draw_case(env, seed, i)
        except Exception as e:   # noqa: BLE001  (the generator's own bug: say so, go on)
            log(f"case {i}: drawing failed: {type(e).__name__}: {e}")
            continue
        t1 = time.perf_counter()
        res = run_case(env, case)
        res.seconds = time.perf_counter() - t1
        s.add(case, res)
        if records is not None:
            entry = None if res.category == "ok" else (s.by_design if res.category == "by_design" else s.failures)[-1]
            records.append((case.label(), case.dlabel(), res.category, res.err, bool(case.invalid), entry,
                            res.seconds))
        if verbose or res.category not in ("ok", "by_design"):
            log(f"[{res.category}] seed={seed} case={i} ({time.perf_counter() - t1:.2f} s): {case.describe()}"
                + (f"\n    {res.reason}" if res.reason else "") + (f"  err={res.err:.3g}" if verbose else "")
                + (f"\n{res.tb}" if verbose and res.tb else ""))
        if env.gpu and res.category == "crash" and not cuda_alive():
            s.stopped = f"the CUDA context is broken after case {i} (an illegal access?): nothing after it can run"
            break
        if time_limit and time.perf_counter() - t0 > time_limit:
            s.stopped = f"time limit {time_limit} s reached after case {i}"
            break
    s.elapsed_s = time.perf_counter() - t0
    return s


# -- several processes on one GPU: Triton and numba compile on the CPU, one kernel at a time per
#    process, and a first run meets hundreds of specialisations; N processes compile N at a time

_WORKER: dict = {}


def _worker_init(tune: bool, max_dim: int | None, templates: int | None) -> None:
    _setup_env(tune)
    _WORKER["env"] = Env.detect(max_dim, templates)
    import torch
    torch.set_num_threads(2)


def _worker_chunk(seed: int, indices: list, verbose: bool, deadline: float | None):
    env = _WORKER["env"]
    records: list = []
    left = None if deadline is None else max(0.0, deadline - time.time())
    if left == 0.0:
        return records, f"time limit reached before case {indices[0]}"
    s = run(env, seed, indices, verbose=verbose, time_limit=left, records=records,
            log=lambda m: print(m, flush=True))
    return records, s.stopped


def _affinity(env: Env, seed: int, i: int, jobs: int) -> int:
    """The worker for case ``i``: a SIMT kernel's cases (numba compiles per process, with no shared
    cache) all go to one worker per (kernel, dtype); the rest round-robin (Triton's compiled kernels
    are shared through its on-disk cache)."""
    try:
        c = draw_case(env, seed, i)
    except Exception:   # noqa: BLE001
        return i % jobs
    spec = env.specs.get(c.resolved)
    if spec is not None and spec.family == "simt" and not c.invalid:
        import zlib
        return zlib.crc32(f"{c.resolved}/{c.dtype}".encode()) % jobs
    return i % jobs


def run_parallel(env: Env, seed: int, indices: list, jobs: int, *, tune: bool, max_dim: int | None,
                 verbose: bool, time_limit: float | None, chunk: int = 20) -> Summary:
    """``run`` spread over ``jobs`` worker processes (spawned: CUDA does not survive a fork), one
    GPU; the cases are the same, only the order differs."""
    import concurrent.futures as cf
    import multiprocessing as mp
    s = Summary(seed)
    t0 = time.perf_counter()
    deadline = None if time_limit is None else time.time() + time_limit
    mine: list[list[int]] = [[] for _ in range(jobs)]
    for i in indices:
        mine[_affinity(env, seed, i, jobs)].append(i)
    stopped = []
    ctx = mp.get_context("spawn")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):   # many processes: few threads each
        os.environ.setdefault(var, "2")
    pools = [cf.ProcessPoolExecutor(1, mp_context=ctx, initializer=_worker_init,
                                    initargs=(tune, max_dim, env.templates)) for _ in range(jobs)]
    try:
        futures = {}
        for pool, idx in zip(pools, mine):
            for k in range(0, len(idx), chunk):
                c = idx[k:k + chunk]
                futures[pool.submit(_worker_chunk, seed, c, verbose, deadline)] = c
        for f in cf.as_completed(futures):
            c = futures[f]
            try:
                records, why = f.result()
            except Exception as e:   # noqa: BLE001  (a worker died: a segfault, the CUDA context, ...)
                stopped.append(f"cases {c[0]}..{c[-1]}: worker failed: {type(e).__name__}: {e}")
                continue
            for r in records:
                s.add_record(*r)
            if why:
                stopped.append(why)
    finally:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)
    s.failures.sort(key=lambda e: e["case"])
    s.by_design.sort(key=lambda e: e["case"])
    broken = [w for w in stopped if "CUDA context" in w or "worker failed" in w]
    limit = [w for w in stopped if "time limit" in w]
    s.stopped = "; ".join(broken[:3] + ([f"time limit {time_limit} s reached"] if limit else []))
    s.elapsed_s = time.perf_counter() - t0
    return s


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="folder for fuzz.json (the table, every non-ok case)")
    p.add_argument("--max-dim", type=int, default=None, help="largest size of the rare big cases "
                   "(default 2048 on a GPU, 24 in emulation)")
    p.add_argument("--only", help="comma-separated case indices to run (repro)")
    p.add_argument("--start", type=int, default=0, help="first case index")
    p.add_argument("--time-limit", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--tune", action="store_true", help="keep first-call tuning on (slow: times candidates)")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: on a GPU min(12, CPUs - 4), "
                   "in emulation 1); they share the GPU and compile kernels side by side")
    p.add_argument("--templates", type=int, default=None, help="structures per run (default: "
                   f"{DEFAULT_TEMPLATES} on a GPU, 0 in emulation; 0 = every case its own, slower on a GPU)")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    args = p.parse_args(argv)
    _setup_env(args.tune)
    env = Env.detect(args.max_dim, args.templates)
    indices = [int(x) for x in args.only.split(",")] if args.only else range(args.start, args.start + args.cases)
    print(f"tiledmm fuzz: {'GPU' if env.gpu else 'emulation'}, seed {args.seed}, "
          f"{len(indices)} cases, kinds {[k for k, _ in env.kinds]}, max dim {env.max_dim}, "
          f"templates {env.templates or 'off (every case its own structure)'}", flush=True)
    jobs = args.jobs if args.jobs is not None else (min(12, max(1, (os.cpu_count() or 2) - 4)) if env.gpu else 1)
    if len(indices) < 50:
        jobs = 1
    print(f"{jobs} process(es)", flush=True)
    if jobs > 1:
        s = run_parallel(env, args.seed, list(indices), jobs, tune=args.tune, max_dim=args.max_dim,
                         verbose=args.verbose, time_limit=args.time_limit)
    else:
        s = run(env, args.seed, indices, verbose=args.verbose, time_limit=args.time_limit,
                log=lambda m: print(m, flush=True))
    if s.by_design:
        print(f"\nrefused by design (a forced variant that cannot run the call): {len(s.by_design)} cases")
    if s.failures:
        print(f"\n{len(s.failures)} failing case(s) (repro: --seed {args.seed} --only INDEX -v):")
        for f in s.failures[:50]:
            print(f"  [{f['category']}] case {f['case']}: {f['description']}\n      {f['reason']}")
    print()
    print(s.table())
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "fuzz.json"), "w") as fh:
            json.dump(s.to_json(), fh, indent=1, default=str)
        print(f"wrote {os.path.join(args.out, 'fuzz.json')}")
    return 1 if s.bad() or s.stopped.startswith("the CUDA") else 0


if __name__ == "__main__":
    sys.exit(main())
