"""Tuned choices, made once and remembered -- in this process and on disk.

Every autotuner in tiledmm (the Triton variant and config per shape class, the SIMT
rung-10 tile shapes) goes through ``choose``. By default nothing is timed: a choice in
the store is used where there is one, else the tuner's model picks (microseconds; the
Triton family's is ``kernels/block/heuristics.py``). With ``TILEDMM_TUNE=on`` (or
``tiledmm.tuning.set_mode("on")``, or ``tiledmm tune SHAPES``) the first call for a key
the store lacks times each candidate and keeps the fastest; later calls, in this process
or a new one, read the choice back. Choices are stored as JSON in the
user's cache folder (``$TILEDMM_CACHE_DIR``, else ``$XDG_CACHE_HOME/tiledmm``, else
``~/.cache/tiledmm``), one file per GPU model and library versions, so a driver or
Triton upgrade tunes afresh. A store that cannot be used (damaged, of another form, a folder in its
place) is ignored with one warning and replaced by the next choice stored; where none can be
written, choices live in the process (one warning) -- ``_cachefile``.

Inside CUDA graph capture nothing is timed whatever the mode (timing is impossible there).
First-call tuning holds a lock, so concurrent threads tune a key once; the steady state
takes no lock.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Callable, Hashable

from . import _backend
from ._cachefile import need, read_json, warn_unwritable, write_atomic

_lock = threading.RLock()
_memory: dict[str, object] = {}
_timings: dict[str, dict] = {}      # key -> {candidate: ms} of the keys timed in this process (reports)
_disk: dict[str, object] | None = None
_mode: str | None = None


def mode() -> str:
    """"off" (the default: the store's choice, else the model's pick; nothing timed) or "on"
    (``TILEDMM_TUNE`` = on/1/true/yes: time the candidates of a key the store lacks)."""
    global _mode
    if _mode is None:
        _mode = "on" if os.environ.get("TILEDMM_TUNE", "").lower() in ("1", "on", "true", "yes") else "off"
    return _mode


_listeners: list[Callable[[], object]] = []


def on_mode_change(fn: Callable[[], object]) -> None:
    """Call ``fn`` whenever ``set_mode`` changes the mode: the caches of choices made under the old
    mode (model picks with tuning off) are dropped, so the next call chooses again."""
    _listeners.append(fn)


def set_mode(value: str) -> None:
    global _mode
    if value not in ("on", "off"):
        raise ValueError(f"tuning mode is 'on' or 'off', not {value!r}")
    changed = value != mode()
    _mode = value
    if changed:
        for fn in _listeners:
            fn()


def cache_dir() -> Path:
    d = os.environ.get("TILEDMM_CACHE_DIR")
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tiledmm"


def _identity() -> str:
    """GPU model and library versions: a choice is valid only where it was measured."""
    from importlib import metadata
    parts = []
    if _backend.emulating():
        parts.append("emulation")
    else:
        import torch
        parts.append(torch.cuda.get_device_name(torch.cuda.current_device()))
        parts.append(f"cuda{torch.version.cuda}")
    for pkg in ("tiledmm", "triton", "numba-cuda", "torch"):
        try:
            parts.append(f"{pkg}{metadata.version(pkg)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{pkg}-none")
    return "-".join("".join(ch if ch.isalnum() or ch in ".+" else "_" for ch in p) for p in parts)


def store_path() -> Path:
    return cache_dir() / f"tuning-{_identity()}.json"


def parse_store(doc) -> dict:
    """The store's form: a JSON object of choices, each a candidate's name."""
    need(isinstance(doc, dict), "not a JSON object")
    bad = next((k for k, v in doc.items() if not isinstance(v, str)), None)
    need(bad is None, f"the choice stored for {bad!r} is not a name")
    return doc


def _read(path: Path) -> dict:
    """The store at ``path``; empty where there is none or it cannot be used (``_cachefile``: one
    warning, and the next choice stored replaces it)."""
    return read_json(path, "tuning store", parse_store, then="ignored as if empty") or {}


def _load() -> dict:
    global _disk
    if _disk is None:
        _disk = _read(store_path())
    return _disk


def _save(key: str, value) -> None:
    """Merge one choice into the file (atomic rename; another process's choices are kept)."""
    path = store_path()
    on_disk = dict(_read(path))
    on_disk[key] = value
    try:
        write_atomic(path, json.dumps(on_disk, indent=1, sort_keys=True))
    except OSError as e:    # a read-only or full disk: the choice still lives in this process
        warn_unwritable(path, "tuning store", e, "tuned choices are kept in this process only "
                                                 "(TILEDMM_CACHE_DIR names another folder)")


def key_of(*parts: Hashable) -> str:
    return "|".join(str(p) for p in parts)


def lookup(key: str):
    """A remembered choice (this process, else the file), or None."""
    v = _memory.get(key)
    if v is None:
        v = _load().get(key)
        if v is not None:
            _memory[key] = v
    return v


def choose(key: str, candidates: dict[str, Callable[[], float]], model_pick: str, *,
           timeable: bool = True) -> str:
    """The name of the fastest candidate for ``key``.

    candidates: name -> a function returning that candidate's time in ms (it runs it).
    model_pick: the name to use without timing (tuning off, or ``timeable`` False,
        e.g. during CUDA-graph capture; such picks are not remembered on disk).
    """
    v = _memory.get(key)
    if v is not None and v in candidates:
        return v
    with _lock:
        v = lookup(key)
        if v is not None and v in candidates:
            return v
        if mode() == "off" or not timeable or len(candidates) == 1:
            return model_pick
        times, failed = {}, {}
        for name, run in candidates.items():
            try:
                times[name] = run()
            except Exception as e:   # noqa: BLE001  a config that does not compile or run here is no candidate
                failed[name] = f"{type(e).__name__}: {str(e)[:200]}"
                continue
        if os.environ.get("TILEDMM_TUNING_DEBUG"):
            _report(key, times, failed)
        if not times:
            return model_pick
        best = min(times, key=times.get)
        _timings[key] = dict(times)
        _memory[key] = best
        _save(key, best)
        return best


def _report(key: str, times: dict, failed: dict) -> None:
    """TILEDMM_TUNING_DEBUG=1: each choice's candidates and their times (or why they failed), on stderr."""
    import sys
    lines = [f"tiledmm tuning {key}:"] + [f"  {t:9.4f} ms  {n}" for n, t in sorted(times.items(), key=lambda x: x[1])]
    lines += [f"  failed     {n}: {why}" for n, why in failed.items()]
    print("\n".join(lines), file=sys.stderr, flush=True)


def timings(key: str) -> dict | None:
    """{candidate: ms} of ``key``'s tuning in this process, or None where it was not timed here."""
    return _timings.get(key)


def remembered() -> dict:
    """Every choice known to this process (for reports)."""
    out = dict(_load())
    out.update(_memory)
    return out


def forget() -> None:
    """Drop the in-process memory (tests; the file is left alone)."""
    global _disk
    with _lock:
        _memory.clear()
        _timings.clear()
        _disk = None
