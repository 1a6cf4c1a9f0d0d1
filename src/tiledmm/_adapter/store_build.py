"""The adapter's part for the files of the package's store of compiled kernels: writing it
(``scripts/build_kernels.py`` on a GPU: this machine's kernel index copied into ``kernels/block/prebuilt/``)
and installing a kernel's files, and Triton's compiled launchers, into Triton's cache. The store's lookup
is in the package's ``__init__`` (``_load_shipped``).

Triton (3.6) builds a small C module per kernel signature (its launcher) and one for its driver helpers with
the host's C compiler, on first use, into its cache: about half a second each on a cold cache, which the
cubins alone do not spare a first call. Its cache key is the module's C source and ``platform_key()``;
the store ships the modules the build compiled, under that key, with the platform and extension suffix
they were built for: they are installed only on a host that reports the same (a module that still fails
to load is rebuilt by Triton itself, with a warning)."""
from __future__ import annotations

import threading

from .. import _adapter as A

_modules_done = False
_modules_lock = threading.Lock()


def _host_key() -> list:
    """(Triton's platform key, the interpreter's extension suffix): what a compiled C module depends on."""
    import sysconfig

    from triton.runtime.build import platform_key
    return [platform_key(), sysconfig.get_config_var("EXT_SUFFIX")]


def _unpacked(blob: str) -> bytes | None:
    """A blob's content, or None where it is missing or damaged (its name starts with its hash)."""
    import gzip
    import hashlib
    packed = A.read_prebuilt(A.prebuilt_dir() / "blobs" / blob)
    if packed is None:
        return None
    try:
        data = gzip.decompress(packed)
    except (OSError, EOFError):
        return None
    return data if blob.startswith(hashlib.sha256(data).hexdigest()[:32]) else None


def install_entry(entry: dict) -> dict | None:
    """An entry's files in Triton's cache (where they are not yet), as Triton's group of them."""
    from triton.runtime.cache import get_cache_manager
    cache = get_cache_manager(entry["hash"])
    name = f"{entry['name']}.json"
    group = cache.get_group(name)
    if group and set(entry["files"]) <= set(group):
        return group
    group = {}
    for fname, blob in entry["files"].items():
        data = _unpacked(blob)
        if data is None:
            return None          # damaged: a miss
        group[fname] = cache.put(data, fname, binary=True)
    cache.put_group(name, group)
    return group


def install_modules(doc: dict) -> int:
    """The store's compiled launchers and driver helpers into Triton's cache where it lacks them, once a process,
    on a host whose key is the build's; returns how many were written."""
    global _modules_done
    if _modules_done:
        return 0
    with _modules_lock:
        if _modules_done:
            return 0
        _modules_done = True
        modules = doc.get("modules") or {}
        if not modules or doc.get("host") != _host_key():
            return 0
        from triton.runtime.cache import get_cache_manager
        wrote = 0
        for key, files in modules.items():
            cache = get_cache_manager(key)
            for fname, blob in files.items():
                if cache.get_file(fname) is None:
                    data = _unpacked(blob)
                    if data is not None:
                        cache.put(data, fname, binary=True)
                        wrote += 1
        return wrote


def _packed(out, data: bytes, suffix: str) -> str:
    """``data`` as a blob of the store at ``out`` (named by its hash, so each distinct file is kept once; what
    ``_unpacked`` reads back): its name."""
    import gzip
    import hashlib
    blob = f"{hashlib.sha256(data).hexdigest()[:32]}{suffix}.gz"
    if not (out / "blobs" / blob).exists():
        (out / "blobs" / blob).write_bytes(gzip.compress(data, 9, mtime=0))
    return blob


def _compiled_modules(root) -> dict:
    """{cache key: {file name: path}} of the compiled C modules in Triton's cache folder ``root`` (a folder
    there is named by its key in base32)."""
    import base64
    import binascii
    from pathlib import Path
    suffix = _host_key()[1]
    out: dict = {}
    for p in sorted(Path(root).glob(f"*/*{suffix}")):
        name = p.parent.name
        try:
            raw = base64.b32decode(name + "=" * (-len(name) % 8))
        except (binascii.Error, ValueError):
            continue
        if len(raw) == 32:
            out.setdefault(raw.hex(), {})[p.name] = p
    return out


def export_compiled(out=None, index=None, fresh: bool = False) -> dict:
    """Copy every kernel this machine's index recorded (``index``: its folder, default
    ``<Triton's cache>/tiledmm-index``) into the store (``out``, default ``A.prebuilt_dir()``) for this
    Triton version: its metadata and binary (the other stages of Triton's output are left out), each
    distinct file once. Entries already there are kept (``fresh``: this version's are dropped first);
    blobs no version's index names are removed. Returns a report: kernels, distinct files, their bytes
    raw and stored, per kernel name."""
    import gzip
    import json
    from pathlib import Path

    import triton
    from triton.runtime.cache import get_cache_manager
    out = Path(out) if out is not None else A.prebuilt_dir()
    index = Path(index) if index is not None else A._index_path("x").parent
    doc_path = out / f"triton-{triton.__version__}.json"
    try:
        doc = json.loads(doc_path.read_text())
        assert doc.get("format") == A.PREBUILT_FORMAT and not fresh
    except (OSError, ValueError, AssertionError):
        doc = {"format": A.PREBUILT_FORMAT, "triton": triton.__version__, "targets": [], "kernels": {}}
    (out / "blobs").mkdir(parents=True, exist_ok=True)
    added = 0
    for p in sorted(index.glob("*.json")):
        try:
            entry = json.loads(p.read_text())
        except (OSError, ValueError):
            continue            # (the self-test's verdicts, a damaged entry)
        if not isinstance(entry, dict) or not entry.get("shipped"):
            continue
        group = get_cache_manager(entry["hash"]).get_group(f"{entry['name']}.json") or {}
        keep = {f: path for f, path in group.items() if f.endswith((".json", ".cubin"))}
        if not any(f.endswith(".cubin") for f in keep):
            continue
        files = {}
        for fname, path in sorted(keep.items()):
            data = Path(path).read_bytes()
            if fname.endswith(".json"):
                target = json.loads(data).get("target") or {}
                t = [target.get("backend"), target.get("arch"), target.get("warp_size")]
                if t not in doc["targets"]:
                    doc["targets"].append(t)
            files[fname] = _packed(out, data, Path(fname).suffix)
        shipped = entry.pop("shipped")
        added += shipped not in doc["kernels"]
        doc["kernels"][shipped] = {**entry, "signature": [[k, v] for k, v in entry["signature"].items()],
                                   "files": files}
    doc["kernels"] = dict(sorted(doc["kernels"].items()))
    host = _host_key()
    if doc.get("host") not in (None, host):
        doc["modules"] = {}            # another host's modules: replaced by this one's
    doc["host"] = host
    for key, files in _compiled_modules(index.parent).items():
        for fname, path in files.items():
            doc.setdefault("modules", {}).setdefault(key, {})[fname] = _packed(out, Path(path).read_bytes(), ".so")
    doc_path.write_text(json.dumps(doc, indent=0, sort_keys=True) + "\n")
    named = set()
    for p in out.glob("triton-*.json"):
        try:
            d = json.loads(p.read_text())
            named |= {b for e in d["kernels"].values() for b in e["files"].values()}
            named |= {b for files in (d.get("modules") or {}).values() for b in files.values()}
        except (OSError, ValueError, KeyError):
            continue
    for b in (out / "blobs").glob("*.gz"):
        if b.name not in named:
            b.unlink()
    A._prebuilt_store.cache_clear()
    A._other_versions.cache_clear()
    blobs = {b for e in doc["kernels"].values() for b in e["files"].values()}
    mods = {b for files in (doc.get("modules") or {}).values() for b in files.values()}
    blobs |= mods
    raw = sum(len(gzip.decompress((out / "blobs" / b).read_bytes())) for b in blobs)
    by_name: dict = {}
    for e in doc["kernels"].values():
        by_name[e["name"]] = by_name.get(e["name"], 0) + 1
    return {"triton": triton.__version__, "kernels": len(doc["kernels"]), "added": added, "files": len(blobs),
            "cubins": sum(b.split(".")[1] == "cubin" for b in blobs), "modules": len(mods), "raw_bytes": raw,
            "stored_bytes": sum((out / "blobs" / b).stat().st_size for b in blobs) + doc_path.stat().st_size,
            "targets": doc["targets"], "by_name": by_name}
