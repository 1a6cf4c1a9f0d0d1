"""Configurations of the Triton kernels, and the wave model that prunes them for timing.

A config is a plain dict of meta-parameters: BLOCK_M x BLOCK_N output tile per
program, BLOCK_K phase width, GROUP_M tile-rows per L2 group, ``num_warps`` and
``num_stages`` (shared-memory pipeline depth). Kinds: ``16bit`` (bf16/fp16 tensor
cores), ``tf32`` (float32 on the tensor cores), ``ieee`` (exact float32 FMAs).
"""
from __future__ import annotations

import math

from ._vcommon import cfg as _cfg
from ._vcommon import kind_of  # noqa: F401  (the one kind_of, still read here by scripts/fuzz.py, benchmarks/sanitize_block.py)
from . import heuristics as H
from .heuristics import fits


def cfg(bm: int, bn: int, bk: int, g: int, warps: int, stages: int) -> dict:
    """_vcommon.cfg with GROUP_M given in place (the tables below read as tile, group, warps, stages)."""
    return _cfg(bm, bn, bk, warps, stages, GROUP_M=g)


BLOCKED = {
    "16bit": [cfg(128, 256, 64, 8, 8, 3), cfg(128, 128, 64, 8, 4, 4), cfg(128, 256, 64, 8, 8, 4),
              cfg(256, 128, 64, 8, 8, 3), cfg(128, 128, 64, 8, 8, 3), cfg(64, 128, 64, 8, 4, 4),
              cfg(64, 64, 64, 8, 4, 4), cfg(128, 64, 64, 8, 4, 4)],
    "tf32": [cfg(128, 256, 32, 8, 8, 3), cfg(128, 128, 32, 8, 4, 4), cfg(128, 128, 32, 8, 8, 3),
             cfg(128, 128, 64, 8, 8, 3), cfg(256, 128, 32, 8, 8, 4), cfg(128, 256, 32, 8, 8, 4),
             cfg(256, 128, 32, 8, 8, 3), cfg(64, 128, 32, 8, 4, 4), cfg(128, 64, 32, 8, 4, 4),
             cfg(64, 64, 32, 8, 4, 4)],
    "ieee": [cfg(128, 128, 16, 8, 8, 3), cfg(128, 128, 32, 8, 8, 2), cfg(256, 128, 16, 8, 8, 2),   # tl.dot: BLOCK_K >= 16
             cfg(128, 256, 16, 8, 8, 2), cfg(64, 128, 16, 8, 4, 3), cfg(128, 64, 16, 8, 4, 3),
             cfg(64, 64, 32, 8, 4, 3)],
}
# Few rows of A (M up to 32, a decode step's GEMV-like products): the transposed product C^T = B^T A^T
# (kernels.py, SWAP), so the tensor core's narrow side (wgmma's N, down to 8) takes the few rows
# and its 64-row side runs along N. Probe on the H100 (the tuner's candidates): 32x13824x5120 bf16
# 55.5 us, as fast as cuBLAS (54.4), where the best unswapped config took 71.9. Such products stream B
# once from HBM: the 16-row tile keeps 6 stages of B in flight (221 KB of shared memory), 4-9 % faster than 4
# (H100 bf16, GPU time: 1x11008x4096 38.7 -> 35.2 us, torch 34.8; 16x11008x4096 39.3 -> 35.9;
# 1x4096^2 17.0 -> 16.0; docs/history.md).
FEW_ROWS = 32
BLOCKED_FEW_ROWS = {
    "16bit": [dict(cfg(16, 128, 128, 8, 4, 6), SWAP=1), dict(cfg(32, 128, 128, 8, 4, 4), SWAP=1)],
    "tf32": [dict(cfg(16, 128, 64, 8, 4, 4), SWAP=2), dict(cfg(32, 128, 64, 8, 4, 4), SWAP=2)],
    "ieee": [],
}


def tma_cfg(bm: int, bn: int, bk: int, warps: int, stages: int, epi: int = 2, ws: bool = False) -> dict:
    """A config of the persistent TMA kernel: GROUP_M 8, the epilogue in ``epi`` pieces (EPI_SPLIT),
    ``ws``: the warp_specialize flag on its tile loop (WS)."""
    return _cfg(bm, bn, bk, warps, stages, GROUP_M=8, EPI_SPLIT=epi, WS=ws)


# The persistent TMA kernel (variant 'tma'), all within the H100's shared memory (heuristics.smem_bytes).
# The union of the tables of the two persistent TMA kernels it replaces, a tile, warps and stages listed
# once: with EPI_SPLIT 2 where both had it (the half-tile epilogue measured faster on the same tiles,
# tests/data/h100_tuner_choices.json); 128 x 256 x 32 tf32 with 4 stages left
# out (it does not fit). Order matters: tma_persistent.heuristic picks by position, and the wave model
# (prune) keeps the first of configs it ties.
TMA = {
    "16bit": [tma_cfg(128, 256, 64, 8, 3), tma_cfg(128, 256, 64, 8, 4), tma_cfg(256, 128, 64, 8, 3),
              tma_cfg(128, 128, 64, 8, 4), tma_cfg(128, 128, 64, 4, 4), tma_cfg(128, 128, 128, 8, 3),
              tma_cfg(64, 128, 64, 4, 4), tma_cfg(128, 256, 64, 8, 3, ws=True)],
    "tf32": [tma_cfg(128, 256, 32, 8, 3), tma_cfg(256, 128, 32, 8, 3), tma_cfg(128, 128, 32, 8, 5),
             tma_cfg(128, 128, 32, 8, 4), tma_cfg(128, 128, 64, 8, 3), tma_cfg(128, 128, 32, 4, 4),
             tma_cfg(64, 128, 32, 4, 4), tma_cfg(128, 256, 32, 8, 3, ws=True)],
    "ieee": [tma_cfg(128, 128, 32, 8, 3), tma_cfg(64, 128, 32, 4, 3), tma_cfg(128, 64, 32, 4, 4),
             tma_cfg(64, 64, 32, 4, 3, epi=1), tma_cfg(128, 128, 16, 8, 4, epi=1)],
}

EMULATION = cfg(32, 32, 16, 4, 4, 1)   # the interpreter: small tiles, warps and stages ignored
EMULATION_CHOICES = (EMULATION, cfg(16, 64, 16, 4, 4, 1))   # what the dispatcher chooses among there


def tiles(M: int, N: int, c: dict, batch: int = 1) -> int:
    return batch * math.ceil(M / c["BLOCK_M"]) * math.ceil(N / c["BLOCK_N"])


def fitting(configs: list[dict], esize: int, out_esize: int, tma_store: bool, limit: int) -> list[dict]:
    """The configs whose shared memory (heuristics.smem_bytes) fits ``limit`` bytes."""
    return [c for c in configs if fits(c, esize, out_esize, tma_store, limit)]


def prune(configs: list[dict], M: int, N: int, K: int, sms: int, batch: int = 1, keep: int = 4,
          reuse: bool = False) -> list[dict]:
    """The configs worth timing for one shape: rank by a wave model -- the time of
    ceil(tiles / sms) waves of one tile's work, penalising tiles much larger than the
    problem -- and keep the best ``keep``. Keeps first-call tuning short. ``reuse``: one tile's
    work divided by its operand reuse relative to 128 x 256's (``heuristics.reuse``, as the model
    counts it), so a smaller tile's better wave quantisation does not hide its slower tiles."""
    def cost(c):
        t = tiles(M, N, c, batch)
        waves = math.ceil(t / sms)
        work = c["BLOCK_M"] * c["BLOCK_N"] * max(K, 1)
        if reuse:
            work /= H.reuse(c)
        return waves * work, -c["BLOCK_M"] * c["BLOCK_N"]
    return sorted(configs, key=cost)[:keep]
