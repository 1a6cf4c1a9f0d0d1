"""Triton's compile-cache key, remembered across processes.

Triton finds a compiled kernel in its on-disk cache by a key that starts with ``triton_key()``:
a SHA-256 over Triton's own compiler, backend and language sources and over ``libtriton.so``
(about 400 MB), computed once per process. In a fresh process whose kernels are all in the
cache that hash is most of the first call (0.45 s of 0.95 s on the H100, issue 10). Its value
changes only when those files do, so tiledmm keeps it in its cache folder under a stamp of
every such file's path, size and modification time, and where the stamp matches hands Triton
the stored value -- the way Triton's own compile-warmup pool hands a known key to its workers.
Where anything differs Triton computes the key as always and the new value is stored.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sysconfig

_FILE = "triton-key.json"


def stamp(root: str) -> str:
    """Path, size and mtime of every file ``triton_key`` reads (a superset: every ``.py`` under
    compiler/, backends/ and language/), hashed."""
    ext = sysconfig.get_config_var("EXT_SUFFIX").split(".")[-1]
    files = [os.path.join(root, "runtime", "cache.py"), os.path.join(root, "_C", f"libtriton.{ext}")]
    for sub in ("compiler", "backends", "language"):
        for dirpath, dirs, names in os.walk(os.path.join(root, sub)):
            dirs.sort()
            files += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".py")]
    h = hashlib.sha256()
    for f in files:
        st = os.stat(f)
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def install(folder=None) -> str:
    """Give Triton the remembered key (or remember the one it computes). Returns what was done:
    "stored" (the remembered key is in use), "computing" (Triton computes, tiledmm stores),
    "kept" (already installed) or "off" (no stamp could be made)."""
    import triton
    from triton.runtime import cache
    if getattr(cache.triton_key, "tiledmm", False):
        return "kept"
    if folder is None:
        from ... import tuning
        folder = tuning.cache_dir()
    root = os.path.dirname(os.path.dirname(os.path.abspath(cache.__file__)))
    try:
        mark = stamp(root)
    except OSError:
        return "off"
    path = os.path.join(str(folder), _FILE)
    try:
        with open(path) as f:
            known = json.load(f)
    except (OSError, ValueError):
        known = {}
    value = known.get(mark) if isinstance(known, dict) else None
    original = cache.triton_key
    if isinstance(value, str) and value.startswith(triton.__version__):
        def key() -> str:
            return value
        how = "stored"
    else:
        @functools.lru_cache()
        def key() -> str:
            v = original()
            _store(path, mark, v)
            return v
        how = "computing"
    key.tiledmm = True
    cache.triton_key = key
    return how


def _store(path: str, mark: str, value: str) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({mark: value}, f)      # one Triton install at a time: the latest only
        os.replace(tmp, path)
    except OSError:
        pass
