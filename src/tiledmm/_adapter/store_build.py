"""The adapter's part that writes the package's store of compiled kernels (``scripts/build_kernels.py`` on a
GPU): this machine's kernel index copied into ``kernels/block/prebuilt/``. The store's reading side is in the
package's ``__init__``."""
from __future__ import annotations

from .. import _adapter as A

def export_compiled(out=None, index=None, fresh: bool = False) -> dict:
    """Copy every kernel this machine's index recorded (``index``: its folder, default
    ``<Triton's cache>/tiledmm-index``) into the store (``out``, default ``A.prebuilt_dir()``) for this
    Triton version: its metadata and binary (the other stages of Triton's output are left out), each
    distinct file once. Entries already there are kept (``fresh``: this version's are dropped first);
    blobs no version's index names are removed. Returns a report: kernels, distinct files, their bytes
    raw and stored, per kernel name."""
    import gzip
    import hashlib
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
            blob = f"{hashlib.sha256(data).hexdigest()[:32]}{Path(fname).suffix}.gz"
            if not (out / "blobs" / blob).exists():
                (out / "blobs" / blob).write_bytes(gzip.compress(data, 9, mtime=0))
            files[fname] = blob
        shipped = entry.pop("shipped")
        added += shipped not in doc["kernels"]
        doc["kernels"][shipped] = {**entry, "signature": [[k, v] for k, v in entry["signature"].items()],
                                   "files": files}
    doc["kernels"] = dict(sorted(doc["kernels"].items()))
    doc_path.write_text(json.dumps(doc, indent=0, sort_keys=True) + "\n")
    named = set()
    for p in out.glob("triton-*.json"):
        try:
            named |= {b for e in json.loads(p.read_text())["kernels"].values() for b in e["files"].values()}
        except (OSError, ValueError, KeyError):
            continue
    for b in (out / "blobs").glob("*.gz"):
        if b.name not in named:
            b.unlink()
    A._prebuilt_store.cache_clear()
    A._other_versions.cache_clear()
    blobs = {b for e in doc["kernels"].values() for b in e["files"].values()}
    raw = sum(len(gzip.decompress((out / "blobs" / b).read_bytes())) for b in blobs)
    by_name: dict = {}
    for e in doc["kernels"].values():
        by_name[e["name"]] = by_name.get(e["name"], 0) + 1
    return {"triton": triton.__version__, "kernels": len(doc["kernels"]), "added": added, "files": len(blobs),
            "cubins": sum(b.split(".")[1] == "cubin" for b in blobs), "raw_bytes": raw,
            "stored_bytes": sum((out / "blobs" / b).stat().st_size for b in blobs) + doc_path.stat().st_size,
            "targets": doc["targets"], "by_name": by_name}
