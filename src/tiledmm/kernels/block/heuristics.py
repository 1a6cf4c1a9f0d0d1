"""The Triton family's choice without timing: an analytic model of one GEMM on one GPU.

The default pick (``TILEDMM_TUNE`` unset) costs microseconds: each candidate (variant,
config) gets an estimated run time and the cheapest is kept. The estimate, per candidate:

* **programs and waves** -- output tiles (times the split for split-K); a wave is the SMs
  times the programs one SM holds at once (its shared-memory and register budget); the
  time is the number of waves times one program's time, so a 133rd tile on 132 SMs costs
  a whole wave (quantisation). A persistent kernel runs one program per SM over the tiles.
* **one program's time** -- its multiply-adds at the SM's peak for the precision, scaled by
  the tile's operand traffic: a BLOCK_M x BLOCK_N tile reads (BLOCK_M + BLOCK_N) x K
  operands for BLOCK_M x BLOCK_N x K products, and below 128 x 256's ratio the tensor
  cores wait on shared memory. The variant's own ``speed`` (pointer loads vs the copy
  engine, a row-major B in tf32) scales it.
* **memory** -- A, B and C once from HBM (grouped tile order: L2 serves the repeats), plus
  split-K's fp32 partials: a floor under the compute time (few rows, a GEMV-like product,
  is bound by reading B once), at a bandwidth that falls when few programs are resident.
* **copies and fixed costs** -- the copies a ``-kmajor`` or ``tma-copy`` variant makes
  first, at full bandwidth; a second launch (split-K's reduction, a copy kernel).

Calibrated against the tuner's choices on the H100 (tests/data/
h100_tuner_choices.json; tests/test_heuristics.py replays them): split-K
when the output has fewer tiles than SMs and K is long, the swapped few-row configs or
small tiles for M <= 32, the persistent TMA kernel with 128 x 256 tiles once the tiles fill
the SMs. The Gluon kernel (``gluon_speed``) only for large 16-bit products with 128-byte rows,
from its own H100 measurements. Timing (``TILEDMM_TUNE=on``, ``tiledmm tune``) can still
overrule it; the store's entries always do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from . import gluon_gemm as _gluon     # host side only: imports no Gluon

# per-SM peak multiply-adds per microsecond on the H100 (dense): bf16/fp16 989 TFLOP/s,
# tf32 495, IEEE fp32 FMAs 67, over 132 SMs; only ratios between candidates matter
_MACS_PER_US = {"16bit": 3.75e6, "tf32": 1.87e6, "ieee": 0.25e6}
_BEST_INTENSITY = 128 * 256 / (128 + 256)   # operand reuse of the largest tile the tables hold
_LAUNCH_US = 2.5                           # one extra kernel launch on the stream


@dataclass(frozen=True)
class Device:
    """What the model needs of a GPU: SMs (less any margin), capability, shared memory one
    block may opt in to (bytes), HBM bandwidth (bytes per microsecond)."""
    sms: int
    capability: tuple = (9, 0)
    smem: int = 232448 - 1024
    bandwidth: float = 3.0e6


H100 = Device(132, (9, 0), 232448 - 1024, 3.0e6)


@dataclass(frozen=True)
class Traits:
    """How a variant runs, for the model (a Variant carries one; no names are tested).

    persistent: one program per SM walks the tiles.
    tma_store: the C tile is staged in shared memory for the copy engine.
    split: (M, N, K, batch, config, sms) -> (S, K per split), for variants that split K.
    speed: (problem, config) -> throughput relative to the persistent TMA kernel.
    copies: (a, b, c, precision) -> bytes the variant copies before its kernel runs.
    modelled: False for a variant only timing may choose.
    capability: the least compute capability it runs on (the copy engine and wgmma: 9.0).
    host_us: its host time a call where repeat calls are not one bound launch (the short
        path binds only FastKernel launches): a floor under the call's time, as the tuner's
        max(GPU, host) is. H100 probe: an unbound blocked launch 48 us, tma-copy 200 us,
        gluon-ws 25-27 us through the plan
        (its own bound C launch; 95-153 us through Gluon's JIT launcher).
    compiles_per_process: its kernels are compiled on a process's first call unless already on disk
        (rung 11's numba kernels: about 4.5 s on an H100's first call; kept on disk by
        kernels/simt_cache.py), where Triton's come from its disk cache in ~0.1 s. The no-timing default
        (the shipped table) picks such a variant only where its kernel is on disk (``Variant.on_disk``)
        -- else its first call would wait for seconds; timing (TILEDMM_TUNE=on, whose user accepts a
        wait), the store and a forced ``variant=`` still may.
    own_config_by_shape: its config is its own model's for the call's size (it offers the dispatcher
        one config, the one its model picks): where the shipped table names the variant, that config
        is taken, not the one the table recorded at its class's representative size; and where the
        choice is untimed (the model's or the table's), each call takes its model's config for the
        call's own size (the plan binds no config)."""
    persistent: bool = False
    tma_store: bool = False
    split: Callable[..., tuple] | None = None
    speed: Callable[..., float] = lambda p, cfg: 1.0
    copies: Callable[..., int] | None = None
    modelled: bool = True
    capability: tuple = (0, 0)
    host_us: float = 50.0
    compiles_per_process: bool = False
    own_config_by_shape: bool = False


@dataclass(frozen=True)
class Problem:
    """One call's sizes: M, N, K, batch, config kind, input and output element sizes,
    whether B is stored K-major, whether every row is 16-byte aligned (vector loads), whether
    every row stride is a multiple of 128 bytes (the Gluon kernel's TMA loads are slower without)."""
    M: int
    N: int
    K: int
    batch: int = 1
    kind: str = "16bit"
    esize: int = 2
    out_esize: int = 2
    b_kmajor: bool = False
    aligned: bool = True
    rows128: bool = True


def smem_bytes(c: dict, esize: int, out_esize: int, tma_store: bool) -> int:
    """Shared memory a config asks for: ``num_stages`` A and B tiles, and (TMA store) the C
    tile staged for the copy engine (``EPI_SPLIT`` halves it). Measured on the H100: 128x256x32
    tf32, 3 stages, a whole C tile staged needs 278,552 bytes = 147,456 + 131,072 + barriers."""
    pipe = c.get("num_stages", 1) * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * esize
    staged = c["BLOCK_M"] * c["BLOCK_N"] // c.get("EPI_SPLIT", 1) * out_esize if tma_store else 0
    return pipe + staged + 1024


def fits(c: dict, esize: int, out_esize: int, tma_store: bool, limit: int) -> bool:
    return smem_bytes(c, esize, out_esize, tma_store) <= limit


def reuse(c: dict) -> float:
    """A tile's operand reuse, BLOCK_M x BLOCK_N products per (BLOCK_M + BLOCK_N) operands, relative to
    128 x 256's (the largest tile the tables hold), at most 1: below it the tensor cores wait on shared memory."""
    return min(1.0, c["BLOCK_M"] * c["BLOCK_N"] / (c["BLOCK_M"] + c["BLOCK_N"]) / _BEST_INTENSITY)


def _per_sm(c: dict, p: Problem, t: Traits, dev: Device) -> int:
    """Programs one SM holds at once: its shared memory, 64 warps, and 64K registers (the fp32
    accumulator spread over the block's threads plus about 64 for addresses and operands)."""
    if t.persistent:
        return 1
    warps = c.get("num_warps", 4)
    regs = min(255, c["BLOCK_M"] * c["BLOCK_N"] // (32 * warps) + 64)
    smem = dev.smem // smem_bytes(c, p.esize, p.out_esize, t.tma_store)
    return max(1, min(smem, 64 // warps, 65536 // (regs * 32 * warps)))


def estimate_us(c: dict, p: Problem, t: Traits, dev: Device, copy_bytes: int = 0) -> tuple[float, float]:
    """The model's (run time, compute time) of ``c`` on ``p`` in microseconds (relative: only
    their order matters)."""
    bm, bn = c["BLOCK_M"], c["BLOCK_N"]
    tiles = p.batch * math.ceil(p.M / bm) * math.ceil(p.N / bn)
    S, k_per = t.split(p.M, p.N, p.K, p.batch, c, dev.sms) if t.split else (1, p.K)
    programs = tiles * S
    spills = c["BLOCK_M"] * c["BLOCK_N"] // (32 * c.get("num_warps", 4)) + 64 > 255
    speed = t.speed(p, c) * reuse(c) * (0.5 if spills else 1.0)
    # each program fills its pipeline once (a persistent program once for all its tiles)
    k_eff = max(k_per, 1) + (0 if t.persistent else c.get("num_stages", 1) * c["BLOCK_K"])
    compute = math.ceil(programs / dev.sms) * bm * bn * k_eff / (_MACS_PER_US[p.kind] * speed)
    batch_ab = p.batch if p.batch > 1 else 1
    traffic = (p.M * p.K + p.K * p.N) * p.esize * batch_ab + p.batch * p.M * p.N * p.out_esize
    fixed = 0.0
    if S > 1:
        traffic += 2 * S * p.batch * p.M * p.N * 4
        fixed += _LAUNCH_US
    # loads in flight: fewer resident programs than SMs leave HBM's bandwidth partly idle
    # (H100: 64 x 128 tiles on 108 of 132 SMs moved 2.3 TB/s; 2 programs on every SM, 2.8)
    resident = min(programs, dev.sms * _per_sm(c, p, t, dev)) / dev.sms
    bandwidth = dev.bandwidth * min(1.0, 0.8 * math.sqrt(resident))
    time = max(compute, traffic / bandwidth) + fixed
    if copy_bytes:   # a copy kernel before: read and write the bytes at the full bandwidth
        time += 2 * copy_bytes / dev.bandwidth + _LAUNCH_US
    return time, compute


# -- the Gluon kernel (gluon_gemm, variant 'gluon-ws'), as measured (docs/history.md) ---------
# 16-bit, CUDA graphs on the H100: 4096^3 bf16 768-780 TFLOP/s (1.02-1.04x torch) where the persistent
# TMA kernel measured 0.97-0.98x through tiledmm.matmul (docs/history.md); 8192^3 1.00-1.02x against
# 0.99-1.03x: a tie. The model reads this as the Triton kernel's exposed epilogue (the Gluon kernel
# overlaps it with the next tile's main loop): worth GLUON_EPI_K steps of K a tile, counted only beyond
# the ratios' run-to-run spread (GLUON_TIE) and never above what was measured (GLUON_CAP). Rows that are
# not a multiple of 128 bytes: 5000^3 0.68-0.73x against 5056^3 1.01x (GLUON_UNALIGNED).
# tf32 (A row-major, B K-major only): 128x256 347-355, 128x128 315-318, 64x128 266-283 TFLOP/s at
# 4096^3-8192^3, where the persistent TMA kernel on a K-major B measured 378 (4096^3, docs/history.md)
# and the model gives it 0.75 of its full speed (128x128's operand reuse): no case where it wins.
GLUON_EPI_K = 256
GLUON_TIE = 0.035
GLUON_CAP = 0.03
GLUON_UNALIGNED = 0.70
GLUON_TF32_RATE = {(128, 256): 351, (128, 128): 316, (64, 128): 274}
# tf32 with a row-major B: the kernel computes C^T = B^T A^T with B^T loaded into registers (no copy of
# B), 4096^3-8192^3 TFLOP/s (docs/history.md); the Triton variants copy B K-major first
# (copy_bytes), which the model charges at full bandwidth: the Gluon kernel wins where B is large
# against the product (few rows), the copying kernels where the product is large against B.
GLUON_TF32_REG_RATE = {(bm, bn): r for (bm, bn, _), r in _gluon.RATE_TF32_REG.items()}   # the kernel's own table
_TMA_TF32 = (378, 0.75)   # the persistent TMA kernel, tf32 128x128: measured TFLOP/s, the model's speed


def gluon_speed(p: Problem, c: dict) -> float:
    """The Gluon kernel's throughput relative to the persistent TMA kernel (Traits.speed)."""
    bm, bn = c["BLOCK_M"], c["BLOCK_N"]
    if p.kind == "tf32":
        rates = GLUON_TF32_RATE if p.b_kmajor else GLUON_TF32_REG_RATE
        return rates.get((bm, bn), min(rates.values())) / _TMA_TF32[0] * _TMA_TF32[1] / reuse(c)
    return (1.0 + min(GLUON_CAP, max(0.0, GLUON_EPI_K / max(p.K, 1) - GLUON_TIE))) * \
        (1.0 if p.rows128 else GLUON_UNALIGNED)


@dataclass(frozen=True)
class Candidate:
    """One (variant, config) the dispatcher may launch: its name ("variant:config"), the
    config, the variant's traits, the bytes it would copy for this call, the variant, and
    whether repeat calls are one bound launch (else its traits' host time is a floor)."""
    name: str
    config: dict
    traits: Traits
    copy_bytes: int = 0
    variant: object = None
    bound: bool = True


def _floored(est: tuple[float, float], c: Candidate) -> tuple[float, float]:
    return (est[0] if c.bound else max(est[0], c.traits.host_us)), est[1]


def rank(cands: Sequence[Candidate], p: Problem, dev: Device) -> list[tuple[float, Candidate]]:
    """Every modelled candidate the device can run, with its estimate, cheapest first (ties: the less compute,
    then the larger tile: a memory-bound product still prefers the faster kernel)."""
    scored = [(_floored(estimate_us(c.config, p, c.traits, dev, c.copy_bytes), c), c) for c in cands
              if c.traits.modelled and dev.capability >= c.traits.capability]
    scored.sort(key=lambda sc: (round(sc[0][0], 2), round(sc[0][1], 2),
                                -sc[1].config["BLOCK_M"] * sc[1].config["BLOCK_N"]))
    return [(est[0], c) for est, c in scored]


def pick(cands: Sequence[Candidate], p: Problem, dev: Device) -> Candidate:
    """The model's choice (the first candidate where none is modelled)."""
    ranked = rank(cands, p, dev)
    return ranked[0][1] if ranked else cands[0]


def best_config(configs: Sequence[dict], p: Problem, t: Traits, dev: Device) -> dict:
    """The model's config among one variant's ``configs``."""
    return pick([Candidate(str(i), c, t) for i, c in enumerate(configs)], p, dev).config
