"""Every quantitative claim in the lectures, recomputed by tiledmm.

The lectures: a university course's lecture set on the tiled matrix-multiplication kernel
(UIUC ECE408 and the Kirk/Hwu textbook's G80 chapter, Bertini's and a GP-GPU course's
slides). Each claim names its lecture, the tiledmm command that computes it, the value the
slide states, and a function that computes the value from tiledmm's models, traces
and profiles. ``tiledmm claims`` prints the table; ``--markdown`` writes docs/claims.md.
Where tiledmm and a slide disagree, ``note`` says why.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

SEEDS = {"000": "UIUC ECE408 Summer 2024, lecture 6", "001": "UIUC ECE408 Fall 2024, lecture 6",
         "002": "Kirk/Hwu, tiled matrix multiplication on the G80", "003": "Bertini, tiled matrix multiplication",
         "004": "GP-GPU course, lecture 7 (bandwidth and tiling)"}
# the same lectures named short, as a table column names them
LECTURES = {"000": "ECE408 Su24 L6", "001": "ECE408 Fa24 L6", "002": "Kirk/Hwu G80", "003": "Bertini",
            "004": "GP-GPU L7"}


def lectures(seed: str) -> str:
    """A claim's lectures by name ('002/003' -> 'Kirk/Hwu G80, Bertini')."""
    return ", ".join(LECTURES[s] for s in seed.split("/"))


@dataclass
class Claim:
    id: str
    seed: str
    claim: str
    command: str
    slide: object
    compute: Callable[[], object]
    note: str = ""
    needs_emulation: bool = False

    def value(self):
        return self.compute()

    def agrees(self, v) -> bool:
        if isinstance(self.slide, float) or isinstance(v, float):
            return abs(float(v) - float(self.slide)) <= 1e-9 * max(1.0, abs(float(self.slide)))
        return v == self.slide


def _occ(profile, tile, field):
    from .device import profile as prof
    from .occupancy import occupancy, tiled_shared_bytes
    return getattr(occupancy(prof(profile), tile * tile, shared_per_block=tiled_shared_bytes(tile)), field)


def _roof(kernel, profile, tile=None, field="memory_bound_gflops"):
    from .device import profile as prof
    from .model import roofline
    return round(getattr(roofline(kernel, prof(profile), tile), field), 6)


def _trace(kernel, shape, tile):
    from .trace import trace
    return trace(kernel, shape, tile)


def _burst():
    from .burst import burst_efficiency, parse_index, pattern
    return burst_efficiency(pattern([parse_index("4*i"), parse_index("4*i+1")], 1024), 512, 240).effective_gbs


def _stores_block11():
    stores = _trace("tiled", (3, 3, 3), 2).stores_by_block()
    return [list(i) for i in stores[(1, 1, 0)]]


def _reuse_2x2():
    r = _trace("tiled", (4, 4, 4), 2).reuse()
    return (r["M"]["min"], r["M"]["max"], r["N"]["min"], r["N"]["max"])


def _coalesced():
    """A warp's 32 four-byte reads are coalesced when they fall in the fewest sectors possible (4 of
    32 B). N: the slides' launch (threadIdx.x along P's columns); M: threads along a column of M,
    i.e. the same kernel launched along P's rows (naive-uncoalesced)."""
    a = _trace("naive", (32, 32, 32), 32).coalescing()["ld N"]["sectors_per_request"]
    b = _trace("naive-uncoalesced", (32, 32, 32), 32).coalescing()["ld M"]["sectors_per_request"]
    word = lambda s: "coalesced" if s <= 4 else f"not coalesced ({s:g} sectors/request)"  # noqa: E731
    return (word(a), word(b))


def _phases():
    """Phases with tile loads in block (0,0): Width 3 and Width 4, TILE 2."""
    return tuple(len({p["phase"] for p in _trace("tiled", (w, w, w), 2).phases()
                      if p["block"][:2] == (0, 0) and (p["M"] or p["N"])}) for w in (3, 4))


def _loads_per_phase_16():
    """A TILE-16 block's global loads in one phase (traced) and the FLOP they feed (the model)."""
    t = _trace("tiled", (16, 16, 16), 16)
    loads = sum(1 for e in t.events if e.space == "global" and e.op == "ld")
    return loads, int(loads * 4 / _roof("tiled", "g80", 16, "bytes_per_flop"))


def _blocks_1024():
    from .. import registry
    grid, _ = registry.get("tiled").launch_config(16, 1024, 1024, 1024)
    return grid[0] * grid[1]


CLAIMS = [
    Claim("naive-bpf", "004", "naive kernel: 4 B of global memory per FLOP (fp32)", "tiledmm model --profile example150",
          4.0, lambda: _roof("naive", "example150", field="bytes_per_flop")),
    Claim("naive-37.5", "004", "naive kernel at 150 GB/s: 37.5 GFLOP/s", "tiledmm model --profile example150",
          37.5, lambda: _roof("naive", "example150")),
    Claim("tile16-600", "004", "16x16 tiles at 150 GB/s: (150/4)*16 = 600 GFLOP/s",
          "tiledmm model --profile example150 --tile 16", 600.0, lambda: _roof("tiled", "example150", 16)),
    Claim("tile32-1200", "004", "32x32 tiles at 150 GB/s: 1,200 GFLOP/s; memory no longer the bottleneck "
          "(on the 1,000 GFLOP/s example GPU compute binds)", "tiledmm model --profile example150 --tile 32",
          1200.0, lambda: _roof("tiled", "example150", 32)),
    Claim("g80-347.6", "002", "G80: 86.4 GB/s supports (86.4/4)*16 = 347.6 GFLOPS with 16x16 tiles",
          "tiledmm model --profile g80 --tile 16", 347.6, lambda: _roof("tiled", "g80", 16),
          note="the slide's arithmetic slips: 86.4/4*16 = 345.6, which tiledmm prints"),
    Claim("g80-256thr", "002", "TILE_WIDTH 16: 16*16 = 256 threads per block", "tiledmm occupancy --tile 16 --profile g80",
          256, lambda: _occ("g80", 16, "threads_per_block")),
    Claim("g80-4096blk", "002", "a 1024x1024 P with TILE_WIDTH 16: 64*64 = 4,096 blocks",
          "tiledmm run -s 1024x1024x1024 -k tiled -t 16 (grid 64 x 64)", 4096, _blocks_1024),
    Claim("g80-3blk", "002", "G80, TILE 16: 3 blocks (768 threads) per SM, limited by threads",
          "tiledmm occupancy --tile 16 --profile g80", (3, 768, ["threads"]),
          lambda: (_occ("g80", 16, "blocks_per_sm"), _occ("g80", 16, "active_threads"), _occ("g80", 16, "limited_by"))),
    Claim("g80-512-8192", "002", "per phase a TILE-16 block makes 2*256 = 512 loads for 256*(2*16) = 8,192 mul/add",
          "tiledmm trace -s 16x16x16 -t 16; tiledmm model --profile g80 --tile 16", (512, 8192),
          _loads_per_phase_16, needs_emulation=True,
          note="8,192 counts multiplies and adds separately: 4,096 multiply-adds"),
    Claim("smem-2k-8k", "002/003", "shared memory per block: 2 KB for TILE 16, 8 KB for TILE 32",
          "tiledmm occupancy --tile 16|32 --profile g80", (2048, 8192),
          lambda: (_occ("g80", 16, "shared_per_block"), _occ("g80", 32, "shared_per_block"))),
    Claim("smem-16k-8-2", "002/003", "16 KB shared per SM: up to 8 TILE-16 blocks, 2 TILE-32 blocks",
          "tiledmm occupancy --tile 16|32 --profile lecture1536", (8, 2),
          lambda: (_occ("lecture1536", 16, "blocks_by_shared"), _occ("lecture1536", 32, "blocks_by_shared"))),
    Claim("g80-4096-pending", "002/003", "8 blocks x 512 = 4,096 pending loads (16 KB, TILE 16)",
          "tiledmm occupancy --tile 16 --profile g80", 4096, lambda: _occ("g80", 16, "pending_loads"),
          note="the shared-memory bound allows 8 blocks, but the G80's 768 threads allow 3, so 3 x 512 = 1,536 "
               "loads are pending; on the 1536-thread GPU 6 blocks, 3,072"),
    Claim("g80-tile32", "002", "TILE 32 on G80: 8 KB per block, 2 blocks active",
          "tiledmm occupancy --tile 32 --profile g80", 2, lambda: _occ("g80", 32, "blocks_per_sm"),
          note="a 32x32 block is 1,024 threads, over the G80's 512-thread block limit: it does not launch "
               "(tiledmm prints 0 and says why); the shared-memory arithmetic alone gives 2"),
    Claim("1536-tile32-1", "003", "TILE 32 on a 1,536-thread SM: one block per SM", "tiledmm occupancy --tile 32 "
          "--profile lecture1536", 1, lambda: _occ("lecture1536", 32, "blocks_per_sm")),
    Claim("ampere-82-8", "004", "Ampere, TILE 16: shared memory limits blocks to 82; 2,048 threads limit them to 8",
          "tiledmm occupancy --tile 16 --profile ampere", (82, 8, 8),
          lambda: (_occ("ampere", 16, "slide_blocks_by_shared"), _occ("ampere", 16, "blocks_by_threads"),
                   _occ("ampere", 16, "blocks_per_sm")),
          note="82 = 164 KB / 2 KB; the CUDA rule reserves 1 KB per block on cc 8.x, giving 54 "
               "(blocks_by_shared); either way threads bind at 8"),
    Claim("ampere-20-2", "004", "Ampere, TILE 32: shared memory limits blocks to 20; threads to 2",
          "tiledmm occupancy --tile 32 --profile ampere", (20, 2, 2),
          lambda: (_occ("ampere", 32, "slide_blocks_by_shared"), _occ("ampere", 32, "blocks_by_threads"),
                   _occ("ampere", 32, "blocks_per_sm")),
          note="with the 1 KB reservation per block: 18"),
    Claim("ampere-4096", "004", "Ampere: 4,096 pending loads for TILE 16 and for TILE 32",
          "tiledmm occupancy --tile 16|32 --profile ampere", (4096, 4096),
          lambda: (_occ("ampere", 16, "pending_loads"), _occ("ampere", 32, "pending_loads"))),
    Claim("twice", "002/003", "a 2x2 tile of a 4x4 product loads every M and N element exactly twice",
          "tiledmm trace --shape 4x4x4 --tile 2", (2, 2, 2, 2), _reuse_2x2, needs_emulation=True),
    Claim("burst-120", "001", "512 B bursts, 240 GB/s, A[4i] + A[4i+1]: 120 GB/s", "tiledmm burst", 120.0, _burst),
    Claim("coalesce", "001", "naive kernel: N accesses coalesced, M accesses not (sectors per warp request)",
          "tiledmm trace -k naive -s 32x32x32 -t 32; tiledmm trace -k naive-uncoalesced -s 32x32x32 -t 32",
          ("coalesced", "not coalesced (32 sectors/request)"), _coalesced, needs_emulation=True,
          note="in the slides' launch (threadIdx.x along P's columns) a warp's M reads are one broadcast "
               "address; launched along P's rows (naive-uncoalesced) every thread's M read is its own sector"),
    Claim("block11", "000/001/003", "3x3 with TILE 2: Block(1,1) stores only P[2,2]",
          "tiledmm trace --shape 3x3x3 --tile 2", [[2, 2]], _stores_block11, needs_emulation=True),
    Claim("64warps", "004", "2 blocks of 1,024 threads = 64 warps", "tiledmm occupancy --tile 32 --profile ampere",
          64, lambda: _occ("ampere", 32, "active_warps")),
    Claim("phases", "000/001", "(Width-1)/TILE_WIDTH + 1 phases, for multiples and non-multiples",
          "tiledmm trace --shape 3x3x3 --tile 2 (phases per block)", (2, 2), _phases, needs_emulation=True),
]


def table(emulating: bool) -> list[dict]:
    rows = []
    for c in CLAIMS:
        if c.needs_emulation and not emulating:
            v, ok = "(run in emulation)", None
        else:
            v = c.value()
            ok = c.agrees(v)
        rows.append({"id": c.id, "seed": c.seed, "lecture": lectures(c.seed), "claim": c.claim,
                     "command": c.command, "slide": c.slide,
                     "tiledmm": v, "agrees": ok, "note": c.note})
    return rows


def markdown(rows: list[dict]) -> str:
    out = ["# Every number in the lectures, recomputed", "",
           "Generated by `tiledmm --emulate claims --markdown docs/claims.md`; `tests/test_claims.py` asserts each "
           "row from the code. Lectures: " + "; ".join(f"{LECTURES[k]} = {v}" for k, v in SEEDS.items()) + ".", "",
           "| claim | lecture | command | slide | tiledmm | agrees | why not |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        agree = {True: "yes", False: "**no**", None: "-"}[r["agrees"]]
        out.append(f"| {r['claim']} | {r['lecture']} | `{r['command']}` | {r['slide']} | {r['tiledmm']} | {agree} | "
                   f"{r['note']} |")
    return "\n".join(out) + "\n"
