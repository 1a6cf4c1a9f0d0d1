"""The randomized contract checker's checks (``tiledmm.testing``): a case's arrays built over flat
buffers, the call, and every promise checked after it (kind, device, shape, dtype, out returned,
inputs and out's buffer untouched, no poisoned NaN, the error against float64); ``run`` over many
cases with a ``Summary`` per (kernel, dtype)."""
from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from .cases import BASE_TOL, BITS, CATEGORIES, Case, Env, View, draw_case

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
            if not self.env.gpu:                       # the simulator: its device array over the numpy view
                from tiledmm import _adapter
                return _adapter.numba_sim_array(_apply(buf, v, "numpy"))
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
        from tiledmm import _adapter
        return _adapter.numba_sim_array(x)
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
