"""Tuned choices shipped with tiledmm: one table per GPU model, looked up by nearest shape class.

The no-timing default (``heuristics.py``) ranks candidates with a model; on the GPUs we could
measure, a table of *timed* choices ships inside the package (``tables/<gpu>.json``), the way
serving libraries ship per-GPU configs for their Triton kernels. A call whose plan key has no
choice in the tuning store takes the table's entry for the same layout key (dtypes, precision,
strides, alignment, alpha/beta form) and the nearest shape class -- at most one log2 bucket away
in each of M, N and K -- where that entry's variant can run the call and its config fits the
device; else the model picks. Precedence (``dispatch.SOURCES``): the tuning store (your own
``tiledmm tune`` / ``TILEDMM_TUNE=on`` choices) > timing (``TILEDMM_TUNE=on``) > the rules (calls a
variant owns, ``rules.RULES``: large 16-bit products the Gluon kernel takes) > this table > the
model. An entry whose variant's operand policy copies nothing for the call (``tma-copy`` on operands
the TMA kernel takes as given) is taken as its kernel's as-given variant (``tma``).
``TILEDMM_TABLE=off`` turns the table off (the model alone).

A table is written by ``tiledmm tune --table PATH`` (``scripts/build_tables.py`` runs the sweep on
a GPU): each entry holds the layout key, the class, the variant and config the tuner timed fastest,
its time, and the model's pick with its time in the same tuning (for the record).
"""
from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

from ..._cachefile import need, read_json, write_atomic

TABLES = Path(__file__).with_name("tables")
FORMAT = 1
MAX_STEP = 1          # the farthest a neighbour class may be, in log2 buckets, along each of M, N, K
COMPUTE = 512         # a class with M, N and K all at least this is compute-bound (see ``trusted``)


def enabled() -> bool:
    return os.environ.get("TILEDMM_TABLE", "").lower() not in ("0", "off", "false", "no")


def slug(gpu_name: str) -> str:
    """A GPU's name as a file name: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")


def split_key(key: tuple) -> tuple[str, tuple]:
    """A plan key (``dispatch.plan_key``) as (layout key, shape class): every field but the class
    (index 10) and the device index (last) joined as text, and the class."""
    return "|".join(str(x) for i, x in enumerate(key[:-1]) if i != 10), tuple(key[10])


def _int(x) -> bool:
    return type(x) is int


def _number(x) -> bool:
    return x is None or type(x) in (int, float)


def _entry_form(i: int, e) -> None:
    """Entry ``i`` of a table is of the form ``entry`` writes (what the lookup reads of it), else Damaged."""
    need(isinstance(e, dict), f"entry {i} is not an object")
    need(isinstance(e.get("layout"), str) and isinstance(e.get("variant"), str), f"entry {i}: layout or variant")
    need(isinstance(e.get("class"), list) and len(e["class"]) == 3 and all(map(_int, e["class"])),
         f"entry {i}: class is not 3 integers")
    cfg = e.get("config")
    need(isinstance(cfg, dict) and all(type(v) in (int, bool) for v in cfg.values()),
         f"entry {i}: config is not an object of integers")
    need(_number(e.get("timed_ms")) and _number(e.get("model_ms")) and isinstance(e.get("rotated", False), bool),
         f"entry {i}: times or rotated")


def _table(doc) -> dict:
    """A table's document as ``write`` leaves it (format FORMAT), else Damaged."""
    need(isinstance(doc, dict), "not a JSON object")
    need(doc.get("format") == FORMAT, f"format {doc.get('format')!r}, not {FORMAT} (another version's table)")
    need(isinstance(doc.get("gpu"), str) and (doc.get("sms") is None or _int(doc.get("sms"))), "gpu or sms")
    need(isinstance(doc.get("entries"), list), "no list of entries")
    for i, e in enumerate(doc["entries"]):
        _entry_form(i, e)
    return doc


@functools.lru_cache(maxsize=None)
def _load(path: str) -> dict | None:
    """The table at ``path`` indexed by layout; None where there is none or it cannot be used (one
    warning: ``_cachefile``)."""
    doc = read_json(path, "GPU table", _table, then="ignored (the model picks)", rewritten=False)
    if doc is None:
        return None
    index: dict[str, list] = {}
    for e in doc["entries"]:
        index.setdefault(e["layout"], []).append(e)
    about = doc.get("about") if isinstance(doc.get("about"), dict) else {}
    return {"gpu": doc["gpu"], "sms": doc.get("sms"), "index": index, "target": about.get("target")}


def target(capability: tuple) -> str:
    """A GPU's compile target as a table's ``about.target`` records it ("sm_90" for capability (9, 0)): the
    tune CLI writes it and the store build matches other GPUs' tables by it (one cubin serves a target)."""
    return f"sm_{capability[0]}{capability[1]}"


def tables(folder: Path | None = None) -> list[dict]:
    """Every usable table in ``folder`` (the package's), by file name."""
    return [t for f in sorted((folder or TABLES).glob("*.json")) if (t := _load(str(f))) is not None]


def table_for(gpu_name: str, sms: int, folder: Path | None = None) -> dict | None:
    """The shipped table of this GPU model (name and SM count must match), or None."""
    t = _load(str((folder or TABLES) / f"{slug(gpu_name)}.json"))
    if t is None or t["gpu"] != gpu_name or (t["sms"] and t["sms"] != sms):
        return None
    return t


def trusted(e: dict, esize: int, l2_bytes: int) -> bool:
    """Whether an entry's timing stands for a user's calls: timed on rotated operand sets (tables
    written since the tuner rotates them), or -- entries timed on one operand set -- a class whose
    smallest member's operands exceed L2 or which is compute-bound (M, N and K all >= COMPUTE):
    a memory-bound product whose operands stayed in L2 timed the cache (H100: 32x5120x5120 bf16
    timed 23 us there, 45 us through the API with operands rotated)."""
    if e.get("rotated"):
        return True
    m, n, k = (2 ** x for x in e["class"])
    return (m * k + k * n) * esize > l2_bytes or min(m, n, k) >= COMPUTE


def nearest(table: dict, key: tuple, esize: int = 2, l2_bytes: int = 50 * 2 ** 20) -> list[dict]:
    """The table's trusted entries for ``key``'s layout within MAX_STEP buckets of its class, nearest
    first (sum of bucket distances, then the distance in M, then the larger class)."""
    layout, cls = split_key(key)
    out = []
    for e in table["index"].get(layout, ()):
        d = [abs(x - y) for x, y in zip(e["class"], cls)]
        if max(d) <= MAX_STEP and trusted(e, esize, l2_bytes):
            out.append(((sum(d), d[0], -sum(e["class"])), e))
    return [e for _, e in sorted(out, key=lambda x: x[0])]


def entry(layout: str, cls: tuple, variant: str, config: dict, timed_ms: float | None,
          model: str | None, model_ms: float | None, rotated: bool = False) -> dict:
    """One table entry; ``rotated``: timed on operand sets rotated past L2 (``trusted``)."""
    return {"layout": layout, "class": list(cls), "variant": variant, "config": dict(config),
            "timed_ms": timed_ms, "model": model, "model_ms": model_ms, "rotated": rotated}


def write(path: Path, gpu_name: str, sms: int, entries: list[dict], about: dict) -> int:
    """Merge ``entries`` into the table at ``path`` (an entry replaces one of the same layout and
    class); returns the number of entries written. Raises ``Damaged`` (the file left as it was) where an
    entry is not of the form the lookup reads."""
    doc = read_json(path, "GPU table", _table, then="replaced by a new table", rewritten=False)
    if doc is not None and doc["gpu"] != gpu_name:
        doc = None          # another GPU's table: replaced
    doc = doc or {"format": FORMAT, "gpu": gpu_name, "sms": sms, "entries": []}
    doc["about"] = about
    keep = {(e["layout"], tuple(e["class"])): e for e in doc["entries"]}
    for e in entries:
        keep[(e["layout"], tuple(e["class"]))] = e
    doc["entries"] = sorted(keep.values(), key=lambda e: (e["layout"], e["class"]))
    # the reader drops a whole table with one entry not of its form: such an entry is refused here, before
    # it can cost the entries already written
    _table(doc)
    write_atomic(path, json.dumps(doc, indent=0, sort_keys=True) + "\n")
    _load.cache_clear()
    return len(doc["entries"])
