"""The out-of-core schedule: host operands in their memory's orientation, device slots in rings,
and the run's GEMM steps in order, each with the tile pieces to copy in before it.

Built once per run from a Plan; the stream runner (runner.py) issues it. Nothing here touches a
stream: a slot's free event and ``issued`` flag are what the runner uses to order its reuse.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Optional

import torch

from .cudart import Device
from .planner import Plan


class Operand:
    """A host matrix in the orientation its memory has: ``phys`` has unit inner stride when
    possible (a transposed view is used as its transpose); device tiles copy that layout."""

    def __init__(self, x: torch.Tensor, dev: Device, two_d: bool):
        if x.dim() == 2 and x.size(1) > 1 and x.stride(1) != 1 and (x.stride(0) == 1 or x.size(0) == 1):
            self.T, self.phys = True, x.t()
        else:
            self.T, self.phys = False, x
        unit = self.phys.size(1) <= 1 or self.phys.stride(1) == 1
        pinned = dev.gpu and x.is_pinned()
        self.direct = pinned and unit      # tiles may go straight to the GPU (contiguous, or with 2-D copies)
        self.two_d = two_d
        self.esz = x.element_size()

    def tile(self, r0, r1, c0, c1) -> torch.Tensor:
        """Physical host tile for logical rows r0:r1, cols c0:c1."""
        return self.phys[c0:c1, r0:r1] if self.T else self.phys[r0:r1, c0:c1]

    def shape(self, rows, cols):
        return (cols, rows) if self.T else (rows, cols)

    def logical(self, t: torch.Tensor) -> torch.Tensor:
        return t.t() if self.T else t


class _Slot:
    def __init__(self, buf: torch.Tensor, dev: Device):
        self.buf = buf
        self.free_ev = dev.event()
        self.free_recorded = False
        self.issued = threading.Event()
        self.issued.set()

    def view(self, shape, offset=0) -> torch.Tensor:
        n = shape[0] * shape[1]
        return self.buf[offset:offset + n].view(shape)


@dataclass
class _Load:
    op: Operand
    host: torch.Tensor                 # physical host tile
    dev: torch.Tensor                  # physical device tile (contiguous)
    slot: _Slot
    pieces: list
    direct: bool
    need: int                          # first step that reads it
    loaded_ev: object = None
    recorded: bool = False


@dataclass
class _Step:
    i: int
    j: int
    p: int
    a: _Load
    b: _Load
    a_dev: torch.Tensor
    b_dev: torch.Tensor
    c_slot: _Slot
    c_dev: torch.Tensor                # physical C device tile
    c_host: torch.Tensor               # physical C host tile
    c_load: Optional[_Load]
    first: bool
    last: bool
    c_cast: Optional[torch.Tensor] = None   # c-dtype device buffer the block is cast into (else None)


def pieces(rows: int, cols: int, esz: int, piece_bytes: int) -> list:
    row_b = max(cols * esz, 1)
    if row_b <= piece_bytes:
        per = max(1, piece_bytes // row_b)
        return [(r, min(r + per, rows), 0, cols) for r in range(0, rows, per)]
    w = max(1, piece_bytes // esz)
    return [(r, r + 1, c, min(c + w, cols)) for r in range(rows) for c in range(0, cols, w)]


class Schedule:
    """The slots (``slots``), the GEMM steps (``steps``) and where each load's pieces go (``after[s]``:
    the pieces queued after GEMM s-1, before GEMM s) of one run. Tiles are cut into pieces of at
    most ``piece_bytes`` where they pass through host staging, ``direct_piece_bytes`` where they
    go straight from a pinned operand.

    The device C blocks take c's dtype when K is not split (the GEMM rounds once either way), else
    the accumulator's (``acc``), cast into a c-dtype buffer on the GPU before going back."""

    def __init__(self, plan: Plan, A: Operand, B: Operand, C: Operand, shape: tuple, dev: Device, ab_dtype,
                 acc, c_dtype, beta: float, piece_bytes: int, direct_piece_bytes: int):
        self.plan, self.dev = plan, dev
        self.M, self.N, self.K = shape
        self.A, self.B, self.C = A, B, C
        self.ab_dtype, self.acc, self.c_dtype, self.beta = ab_dtype, acc, c_dtype, beta
        self.cast = acc != c_dtype
        self.piece_bytes = piece_bytes                  # staged pieces: the size of a pinned staging buffer
        self.direct_piece_bytes = direct_piece_bytes    # straight copies: fewer, larger pieces
        self._build()

    def _make_slots(self) -> tuple:
        """Rings of device slots for A's tiles, B's tiles (or panels) and C's blocks."""
        p, dev = self.plan, self.dev
        bm, bn, bk = p.bm, p.bn, p.bk
        a_slots = [_Slot(dev.empty(bm * bk, self.ab_dtype), dev)
                   for _ in range(1 if p.n_i * p.n_k == 1 else p.ring)]
        if p.resident:
            b_slots = [_Slot(dev.empty(self.K * bn, self.ab_dtype), dev) for _ in range(2 if p.n_j > 1 else 1)]
        else:
            b_slots = [_Slot(dev.empty(bk * bn, self.ab_dtype), dev) for _ in range(p.ring)]
        c_slots = [_Slot(dev.empty(bm * bn, self.acc), dev) for _ in range(1 if p.n_i * p.n_j == 1 else 2)]
        for cs in c_slots:
            cs.cast = dev.empty(bm * bn, self.c_dtype) if self.cast else None
        self.slots = a_slots + b_slots + c_slots
        return a_slots, b_slots, c_slots

    def _build(self):
        p = self.plan
        M, N, K = self.M, self.N, self.K
        bm, bn, bk = p.bm, p.bn, p.bk
        A, B, C = self.A, self.B, self.C
        a_slots, b_slots, c_slots = self._make_slots()
        steps, loads = [], []
        a_count = b_count = blk = 0
        panel, a_once = {}, None
        for j in range(p.n_j):
            j0, j1 = j * bn, min(N, (j + 1) * bn)
            for i in range(p.n_i):
                i0, i1 = i * bm, min(M, (i + 1) * bm)
                cs = c_slots[blk % len(c_slots)]
                c_dev = cs.view(C.shape(i1 - i0, j1 - j0))
                c_cast = cs.cast[:c_dev.numel()].view(c_dev.shape) if self.cast else None
                c_host = C.tile(i0, i1, j0, j1)
                c_load = None
                if self.beta != 0:
                    c_load = self._load(C, c_host, c_dev, cs, len(steps), self.c_dtype)
                    loads.append(c_load)
                for q in range(p.n_k):
                    k0, k1 = q * bk, min(K, (q + 1) * bk)
                    s = len(steps)
                    if a_once is not None:          # A is one tile: loaded once, kept
                        al = a_once
                    else:
                        a_slot = a_slots[a_count % len(a_slots)]
                        a_count += 1
                        a_dev = a_slot.view(A.shape(i1 - i0, k1 - k0))
                        al = self._load(A, A.tile(i0, i1, k0, k1), a_dev, a_slot, s, self.ab_dtype)
                        loads.append(al)
                        if p.n_i * p.n_k == 1:
                            a_once = al
                    if p.resident:
                        key = (j, q)
                        if key not in panel:
                            bs = b_slots[j % len(b_slots)]
                            bd = bs.view(B.shape(k1 - k0, j1 - j0), offset=k0 * bn)
                            panel[key] = self._load(B, B.tile(k0, k1, j0, j1), bd, bs, s, self.ab_dtype)
                            panel[key].panel = j
                            loads.append(panel[key])
                        bl = panel[key]
                    else:
                        bs = b_slots[b_count % len(b_slots)]
                        b_count += 1
                        bl = self._load(B, B.tile(k0, k1, j0, j1), bs.view(B.shape(k1 - k0, j1 - j0)), bs, s,
                                        self.ab_dtype)
                        loads.append(bl)
                    steps.append(_Step(i, j, q, al, bl, A.logical(al.dev), B.logical(bl.dev), cs, c_dev, c_host,
                                       c_load if q == 0 else None, q == 0, q == p.n_k - 1, c_cast))
                blk += 1
        self.steps, self.after = steps, self._place(loads, len(steps))

    def _place(self, loads: list, n_steps: int) -> list:
        """Where each load's pieces go: after the GEMM before the one that needs it, except the
        resident panels of column j >= 1, spread over the GEMMs of column j-1 (prefetch); each
        load's pieces stay in order."""
        per_col = self.plan.n_i * self.plan.n_k
        after = [[] for _ in range(n_steps + 1)]     # after[s+1]: pieces placed after GEMM s
        for ld in sorted(loads, key=lambda x: x.need):
            j = getattr(ld, "panel", None)
            if j is not None and j >= 1:
                lo, hi = (j - 1) * per_col, j * per_col          # GEMMs lo..hi-1
                self._spread(after, ld, lo, hi, len(ld.pieces))
            else:
                for pc in ld.pieces:
                    after[max(ld.need, 0)].append((ld, pc))
        return after

    def _spread(self, after, ld, lo, hi, total):
        n = hi - lo
        for idx, pc in enumerate(ld.pieces):
            # chunk (j, q) of the panel: spread across the column's GEMMs by piece index
            pos = lo + 1 + min(n - 1, (idx * n) // max(total, 1))
            pos = min(pos, ld.need)
            after[pos].append((ld, pc))

    def _load(self, op, host, dev_tile, slot, need, host_dtype):
        rows, cols = host.shape
        direct = op.direct and dev_tile.dtype == host_dtype and (op.two_d or host.is_contiguous())
        pb = self.direct_piece_bytes if direct else self.piece_bytes
        ld = _Load(op, host, dev_tile, slot, pieces(rows, cols, host.element_size(), pb), direct, need)
        ld.loaded_ev = self.dev.event()
        return ld
