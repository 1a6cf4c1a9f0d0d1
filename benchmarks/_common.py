"""What every benchmark here shares: where it ran, checking before timing, the timing itself (tiledmm.timing,
re-exported), fresh child processes, and the table each prints last.

* ``environment()``: the device and the versions (torch, Triton, numba-cuda, tiledmm, Python), the checkout's
  commit and the date -- the provenance every number in docs/performance.md carries;
* ``check(got, a, b, dtype)``: ||got - ref|| / ||ref|| against a float64 product of the same inputs, over the
  harness's bound (``tiledmm.harness.tolerance``) an error: nothing unchecked is timed;
* ``time_calls`` / ``wall_us_per_call`` / ``device_and_host``: the one timing method (CUDA events around
  queued batches, inputs rotated, median of batches; host wall time per queued call);
* ``child(...)``: one fresh process with default settings and an empty tiledmm cache (first calls, default
  against timed picks), its ``emit``-ted rows read back;
* ``table(...)``: the short fixed-width table a benchmark ends with; ``write_json`` the full record.

Run a benchmark from the repository root (``PYTHONPATH=src python3 benchmarks/NAME.py``); a checkout without
``PYTHONPATH`` works too (src/ is put on the path here).
"""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "src" / "tiledmm").is_dir() and str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))



# the one timing method, tiledmm.timing's, imported when first used: a child that measures its own import
# time (dispatch.py's first call) must not have imported tiledmm with this module
def time_calls(*args, **kw) -> float:
    from tiledmm.timing import time_calls as f
    return f(*args, **kw)


def wall_us_per_call(*args, **kw) -> float:
    from tiledmm.timing import wall_us_per_call as f
    return f(*args, **kw)


def device_and_host(*args, **kw) -> tuple[float, float]:
    from tiledmm.timing import device_and_host as f
    return f(*args, **kw)

__all__ = ["ROOT", "environment", "header", "check", "CheckFailed", "geomean", "table", "write_json", "emit",
           "child", "compile_bytecode", "time_calls", "wall_us_per_call", "device_and_host", "log"]


def log(*x) -> None:
    print(*x, flush=True)


def commit() -> str | None:
    """The checkout's commit, '+dirty' with local changes (to tell a before from an after)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (sha + ("+dirty" if dirty else "")) or None


def environment() -> dict:
    """Device, versions, commit and date: what a number needs beside it."""
    import torch

    import tiledmm
    env = {"date": datetime.date.today().isoformat(), "python": platform.python_version(),
           "torch": torch.__version__, "tiledmm": tiledmm.__version__, "emulated": tiledmm.emulating(),
           "commit": commit()}
    for mod in ("triton", "numba_cuda"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:   # noqa: BLE001  (absent or versionless: not part of the numbers)
            env[mod] = None
    if tiledmm.emulating() or not torch.cuda.is_available():
        env["device"] = "cpu (emulation)"
    else:
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        env["device"] = torch.cuda.get_device_name()
        env["sms"] = p.multi_processor_count
        env["cuda"] = torch.version.cuda
    return env


def header(env: dict) -> str:
    return (f"== {env.get('device')}  torch {env.get('torch')}  triton {env.get('triton')}  "
            f"numba-cuda {env.get('numba_cuda')}  tiledmm {env.get('tiledmm')} ({env.get('commit')})  {env.get('date')}")


class CheckFailed(AssertionError):
    """A result off its float64 reference: it is not timed."""


def check(got, a, b, dtype: str, *, precision: str | None = None, alpha: float = 1.0, beta: float = 0.0,
          c0=None, bound: float | None = None) -> float:
    """||got - ref|| / ||ref|| for ref = alpha * a @ b (+ beta * c0) in float64 (torch tensors); raises
    CheckFailed over ``bound`` (default: the harness's bound for ``dtype`` / ``precision``)."""
    from tiledmm.harness import tolerance
    ref = alpha * (a.double() @ b.double())
    if beta and c0 is not None:
        ref = ref + beta * c0.double()
    err = float((got.double() - ref).norm() / (ref.norm() or 1.0))
    limit = tolerance(dtype, precision) if bound is None else bound
    if not err <= limit:        # NaN (an element never written) fails too
        raise CheckFailed(f"{tuple(a.shape)} @ {tuple(b.shape)} {dtype}: rel error {err:.2e} over {limit:.0e}")
    return err


def geomean(xs) -> float | None:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def _cell(v, fmt: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, fmt) if fmt else str(v)


def table(title: str, columns: list[tuple[str, str]], rows: list[tuple]) -> str:
    """A fixed-width table: ``columns`` are (name, format spec: '' for str, '.3f', '+.1f' ...)."""
    cells = [[_cell(v, f) for v, (_, f) in zip(r, columns)] for r in rows]
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, (n, _) in enumerate(columns)]
    just = [str.ljust if not f else str.rjust for _, f in columns]
    lines = [title, "  ".join(j(n, w) for (n, _), w, j in zip(columns, widths, just))]
    lines += ["  ".join(j(c, w) for c, w, j in zip(r, widths, just)) for r in cells]
    return "\n".join(lines)


def write_json(path, doc: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=str))
    return path


def emit(tag: str, obj) -> None:
    """A child's result line (``TAG {json}``), read back by ``child``."""
    print(tag, json.dumps(obj, default=str), flush=True)


def child(script: str, args: list[str], *, timeout: float, tune: bool = False, table_on: bool = True,
          emulate: bool = False, triton_cache: str | None = None, extra_env: dict | None = None) -> dict:
    """``python3 script --child ARGS`` in a fresh process: default settings (TILEDMM_TUNE and TILEDMM_TABLE
    unset unless ``tune`` / not ``table_on``), an empty tiledmm cache; its emitted lines by tag
    ({"ROW": [...], "ENV": [...], ...}), "error" set when it failed (what it printed first is kept)."""
    env = dict(os.environ, TILEDMM_CACHE_DIR=tempfile.mkdtemp(prefix="tiledmm-bench-cache-"), TILEDMM_QUIET="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    for var in ("TILEDMM_TUNE", "TILEDMM_TABLE"):
        env.pop(var, None)
    if not table_on:
        env["TILEDMM_TABLE"] = "off"
    if tune:
        env["TILEDMM_TUNE"] = "on"
    if triton_cache:
        env["TRITON_CACHE_DIR"] = triton_cache
    if emulate:
        env["TILEDMM_EMULATE"] = "1"
    env.update(extra_env or {})
    got: dict = {"error": None}
    if timeout < 5:
        got["error"] = "not run: no time left in the budget"
        return got
    try:
        r = subprocess.run([sys.executable, script, "--child", *args], env=env, capture_output=True, text=True,
                           timeout=timeout)
        out, err, code = r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:       # keep what finished
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err, code = f"timed out after {timeout:.0f} s", -1
    for line in out.splitlines():
        tag, _, body = line.partition(" ")
        if tag.isupper() and body.startswith(("{", "[")):
            try:
                got.setdefault(tag, []).append(json.loads(body))
            except json.JSONDecodeError:
                pass
    if code:
        got["error"] = (err or "")[-3000:]
        print(f"[{' '.join(args)}] failed (exit {code}):\n{got['error']}", file=sys.stderr)
    return got


def compile_bytecode() -> None:
    """Compile tiledmm's and Triton's modules to bytecode, as ``pip install`` leaves them (a checkout or
    PYTHONDONTWRITEBYTECODE may leave it undone, and a first call then compiles ~120 modules)."""
    import compileall
    import importlib.util
    for pkg in ("tiledmm", "triton"):
        spec = importlib.util.find_spec(pkg)
        if spec and spec.submodule_search_locations:
            compileall.compile_dir(list(spec.submodule_search_locations)[0], quiet=1, workers=0)


class Budget:
    """Seconds left of a run's ``--budget-s`` (None: no limit), for its child processes."""

    def __init__(self, seconds: float | None, per_child: float = 560.0):
        self.seconds, self.per_child, self.started = seconds, per_child, time.perf_counter()

    def left(self) -> float:
        if self.seconds is None:
            return self.per_child
        return min(self.per_child, self.seconds - (time.perf_counter() - self.started))
