"""DRAM bursts and coalescing: which fraction of the bytes a burst brings is used.

DRAM is read in bursts of ``burst`` consecutive bytes; bytes of a burst that no
thread asked for are transferred and discarded. For an access pattern (the byte
ranges each thread reads) the useful fraction of the touched bursts, times the
peak bandwidth, is the most useful data rate one can hope for."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Iterable


@dataclass
class BurstResult:
    burst_bytes: int
    peak_gbs: float
    useful_bytes: int
    transferred_bytes: int
    useful_fraction: float
    effective_gbs: float

    def as_dict(self) -> dict:
        return asdict(self)


def burst_efficiency(accesses: Iterable[tuple[int, int]], burst: int, peak_gbs: float) -> BurstResult:
    """accesses: (byte offset, byte count) pairs; ``burst`` bytes per DRAM burst (> 0)."""
    if burst <= 0:
        from .._arrays import TiledmmError
        raise TiledmmError(f"burst size must be > 0 bytes, got {burst}")
    used: set[int] = set()
    for off, n in accesses:
        used.update(range(off, off + n))
    bursts = {b // burst for b in used}
    useful, moved = len(used), len(bursts) * burst
    frac = useful / moved if moved else 0.0
    return BurstResult(burst, peak_gbs, useful, moved, frac, frac * peak_gbs)


def pattern(index_fns: list[Callable[[int], int]], threads: int, itemsize: int = 4):
    """Byte ranges read by ``threads`` threads, each reading element f(i) for every f."""
    return [(f(i) * itemsize, itemsize) for i in range(threads) for f in index_fns]


def parse_index(expr: str) -> Callable[[int], int]:
    """'4*i+1' -> lambda i: 4*i+1 (digits, i, + - * only; a well-formed expression)."""
    from .._arrays import TiledmmError
    allowed = set("0123456789i+-* ")
    bad = f"index expression {expr!r}: use i, integers, + - * only (e.g. 4*i+1)"
    if not expr or not expr.strip() or set(expr) - allowed or "**" in expr.replace(" ", ""):
        raise TiledmmError(bad)
    try:
        code = compile(expr, "<index>", "eval")
        eval(code, {"__builtins__": {}}, {"i": 0})  # noqa: S307 (validated above)
    except SyntaxError:
        raise TiledmmError(bad + " -- it does not parse") from None
    return lambda i: eval(code, {"__builtins__": {}}, {"i": i})  # noqa: S307 (validated above)


__all__ = ["BurstResult", "burst_efficiency", "pattern", "parse_index"]
