"""The kernel index's entries: their JSON form (constants encoded, the shape ``load_compiled`` accepts) and
the stand-in for a JIT function whose module need not be imported (``SourceStub``)."""
from __future__ import annotations

from .. import _cachefile

def _encode(v):
    """A constant's JSON form: plain values as they are, Triton dtypes by name; else TypeError."""
    if v is None or type(v) in (bool, int, float, str):
        return {"v": v}
    if type(v).__name__ == "dtype":
        return {"dtype": str(v)}
    if type(v).__name__ == "constexpr" and (v.value is None or type(v.value) in (bool, int, float, str)):
        return {"constexpr": v.value}
    raise TypeError(f"constant of type {type(v).__name__}")


def _decode(d):
    if "dtype" in d:
        import triton.language as tl
        return tl.dtype(d["dtype"])
    if "constexpr" in d:
        import triton.language as tl
        return tl.constexpr(d["constexpr"])
    return d["v"]


class SourceStub:
    """What a CompiledKernel built from the index reads of its JIT function -- its name, its parameters'
    names, no launch-metadata hook -- standing in for the function, so that the module defining it
    need not be imported (Gluon's import: ~0.14 s of a first call). ``load_compiled`` then builds a
    plain ``ASTSource`` (the launch reads only the signature and constants of its source)."""
    launch_metadata = None

    def __init__(self, name: str, arg_names):
        self.__name__, self.arg_names = name, list(arg_names)


def _index_entry(entry) -> dict:
    """An index entry of the form ``remember_compiled`` writes, else ``_cachefile.Damaged``."""
    need = _cachefile.need
    need(isinstance(entry, dict), "not a JSON object")
    need(isinstance(entry.get("hash"), str) and isinstance(entry.get("name"), str), "hash or name")
    src = entry.get("source")
    need(isinstance(src, list) and len(src) == 2 and all(isinstance(x, str) for x in src), "source")
    sig = entry.get("signature")
    need(isinstance(sig, dict) and all(isinstance(v, str) for v in sig.values()), "signature")
    for part in ("constants", "attrs"):
        need(isinstance(entry.get(part), list) and all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], list)
                                                       for x in entry[part]), part)
    need(all(isinstance(v, dict) and len(v.keys() & {"v", "dtype", "constexpr"}) == 1
             for _, v in entry["constants"]), "constants")
    entry.setdefault("notes", {})
    need(isinstance(entry["notes"], dict), "notes")
    return entry
