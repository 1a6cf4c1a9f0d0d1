"""The randomized contract checker's cases (``tiledmm.testing``): what can run here (``Env``),
and one case -- kind, dtype, kernel, shapes, views of flat buffers, the GEMM form, or an invalid
input -- drawn from its own generator, ``numpy.random.default_rng([seed, index])``."""
from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field

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


def setup_env(tune: bool = False) -> None:
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
        setup_env()
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
        from tiledmm.kernels.block.dispatch import VARIANTS
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
