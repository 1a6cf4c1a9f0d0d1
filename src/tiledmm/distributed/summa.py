"""SUMMA on a pr x pc process grid: panels of A broadcast along grid rows, panels of B along grid
columns, ``depth`` panels in flight on the communication stream while this panel's GEMM runs."""
from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from ..outofcore.gemms import Gemm, tiledmm_gemm
from .layout import Grid, block_range
from .streams import _check_local, _comm, _gemm_call, _land, _prepare_local, _Streams


def summa(a_local: torch.Tensor, b_local: torch.Tensor, shape: tuple, *, grid: Optional[Grid] = None,
          group=None, gemm: Optional[Gemm] = None, panel: Optional[int] = None, depth: int = 2,
          out: Optional[torch.Tensor] = None, alpha: float = 1.0, beta: float = 0.0,
          stats: Optional[dict] = None) -> torch.Tensor:
    """This rank's C block of C = alpha*A@B + beta*C by SUMMA on a 2-D grid.

    shape: (M, K, N) of the whole product. a_local, b_local: this rank's blocks
        (``Grid.blocks`` gives their index ranges; ``scatter_summa`` makes them).
    panel: K-panel width (default: the blocks' own K ranges, cut where A's and B's
        K splits differ). depth: panels in flight (receive buffers per operand).
    out: this rank's C block (read when beta != 0); default a new tensor.
    """
    run = _Summa(a_local, b_local, shape, grid or Grid.make(group), gemm or tiledmm_gemm(), panel, depth, out,
                 stats is not None)
    run.run(alpha, beta, stats)
    if stats is not None:
        stats.update({"algo": "summa", "grid": (run.grid.pr, run.grid.pc), "panels": len(run.panels)})
    return run.out


def _panels(k: int, grid: Grid, panel: Optional[int]) -> list:
    """The K panels (p0, p1, owner grid column of A's panel, owner grid row of B's panel): cut at A's
    column splits (pc) and B's row splits (pr), then at most ``panel`` wide."""
    cuts = sorted({block_range(k, grid.pc, c)[0] for c in range(grid.pc)} |
                  {block_range(k, grid.pr, r)[0] for r in range(grid.pr)} | {k})
    panels = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        step = panel or (hi - lo)
        for p0 in range(lo, hi, max(step, 1)):
            p1 = min(hi, p0 + step)
            panels.append((p0, p1, _owner(k, grid.pc, p0), _owner(k, grid.pr, p0)))
    return panels


def _owner(k: int, parts: int, x: int) -> int:
    """The part of range(k) split into ``parts`` (block_range) that holds x."""
    return next(i for i in range(parts) if block_range(k, parts, i)[0] <= x < block_range(k, parts, i)[1])


class _Summa:
    """One SUMMA product on this rank: its blocks, the K panels, the receive buffers (``depth`` slots
    per operand, each reused only after the GEMM that read it), and the panels in flight."""

    def __init__(self, a_local, b_local, shape, grid: Grid, gemm, panel, depth: int, out, timeline: bool):
        m, k, n = shape
        self.grid, self.gemm, self.a_local, self.b_local = grid, gemm, a_local, b_local
        blk = grid.blocks(m, k, n)
        (ar0, ar1), (self.ac0, ac1) = blk["a"]
        (self.br0, br1), (bc0, bc1) = blk["b"]
        self.mr, self.nc = mr, nc = ar1 - ar0, bc1 - bc0
        _check_local("a_local", a_local, (mr, ac1 - self.ac0))
        _check_local("b_local", b_local, (br1 - self.br0, nc), a_local.dtype)
        if out is None:
            out = torch.empty(mr, nc, dtype=a_local.dtype, device=a_local.device)
        else:
            _check_local("out", out, (mr, nc))
        self.out = out
        self.st = _Streams(a_local.device, timeline)
        self.panels = _panels(k, grid, panel)
        wmax = max([p1 - p0 for p0, p1, *_ in self.panels] + [1])
        self.depth = depth = max(1, depth)
        self.a_bufs = [torch.empty(mr * wmax, dtype=a_local.dtype, device=a_local.device) for _ in range(depth)] \
            if grid.pc > 1 else []
        self.b_bufs = [torch.empty(wmax * nc, dtype=b_local.dtype, device=b_local.device) for _ in range(depth)] \
            if grid.pr > 1 else []
        self.free_slots = list(range(depth))
        self.slot_ev = [None] * depth     # event: the GEMM that last read the slot's buffers
        self.issued = []                  # (panel index, a, b, remote handles, slot or None)
        self.own_handles = []

    def remote_of(self, idx):
        """(A's panel comes from another rank, B's panel does)."""
        p0, p1, oc, orow = self.panels[idx]
        g = self.grid
        return g.pc > 1 and self.mr * (p1 - p0) > 0 and oc != g.col, \
            g.pr > 1 and (p1 - p0) * self.nc > 0 and orow != g.row

    def operands(self, idx, slot):
        """Panel idx's operands of the local product: the receive buffers of ``slot`` for a panel
        another rank owns, else views of this rank's blocks."""
        p0, p1, _, _ = self.panels[idx]
        w, mr, nc = p1 - p0, self.mr, self.nc
        a_remote, b_remote = self.remote_of(idx)
        return (self.a_bufs[slot][:mr * w].view(mr, w) if a_remote else self.a_local[:, p0 - self.ac0:p1 - self.ac0],
                self.b_bufs[slot][:w * nc].view(w, nc) if b_remote else self.b_local[p0 - self.br0:p1 - self.br0])

    def issue(self, idx):
        """Broadcast panel idx's A along the grid row and B along the grid column (on the comm stream,
        into a free slot for what another rank sends)."""
        p0, p1, oc, orow = self.panels[idx]
        g, st, w = self.grid, self.st, p1 - p0
        a_remote, b_remote = self.remote_of(idx)
        slot = self.free_slots.pop(0) if (a_remote or b_remote) else None
        after = [self.slot_ev[slot]] if slot is not None and self.slot_ev[slot] is not None else []
        remote = []
        a_t, b_t = self.operands(idx, slot)
        a_own = self.a_local[:, p0 - self.ac0:p1 - self.ac0]
        if g.pc > 1 and self.mr * w > 0:
            src = g.global_rank(g.row, oc)
            if a_remote:
                fn = (lambda t=a_t, s_=src: dist.broadcast(t, src=s_, group=g.row_group, async_op=True))
            else:     # the owner sends its panel (a contiguous copy, made on the comm stream, if it is a slice)
                fn = (lambda t=a_own, s_=src: dist.broadcast(t if t.is_contiguous() else t.contiguous(), src=s_,
                                                             group=g.row_group, async_op=True))
            h = _comm(st, f"bcast A[{p0}:{p1}]", fn, after if a_remote else None)
            (remote if a_remote else self.own_handles).append(h)
        if g.pr > 1 and w * self.nc > 0:
            src = g.global_rank(orow, g.col)
            h = _comm(st, f"bcast B[{p0}:{p1}]",
                      lambda t=b_t, s_=src: dist.broadcast(t, src=s_, group=g.col_group, async_op=True),
                      after if b_remote else None)
            (remote if b_remote else self.own_handles).append(h)
        self.issued.append((idx, a_t, b_t, remote, slot))

    def run(self, alpha: float, beta: float, stats: Optional[dict]) -> None:
        st, out, panels, empty = self.st, self.out, self.panels, self.mr * self.nc == 0
        nxt, done_first = 0, False
        with st.on(st.compute):
            if beta == 0 and (not panels or empty):
                out.zero_()
            if st.gpu and not empty:
                _prepare_local(self.gemm, [(*self.operands(i, 0), beta if i == 0 else 1.0)
                                           for i in range(len(panels))], out, alpha)
            while nxt < len(panels) and nxt < self.depth:
                self.issue(nxt)
                nxt += 1
            while self.issued:
                # a panel this rank already holds needs no wait: multiply it first
                pick = next((x for x in self.issued if not x[3]), self.issued[0])
                self.issued.remove(pick)
                idx, a_t, b_t, remote, slot = pick
                for h in remote:
                    _land(st, h)
                ev = None
                if not empty:
                    ev = _gemm_call(st, self.gemm, a_t, b_t, out, alpha, beta if not done_first else 1.0,
                                    f"gemm K[{panels[idx][0]}:{panels[idx][1]}]")
                    done_first = True
                if slot is not None:
                    self.slot_ev[slot] = ev
                    self.free_slots.append(slot)
                if nxt < len(panels):
                    self.issue(nxt)
                    nxt += 1
            if not done_first and not empty:          # K == 0
                out.mul_(beta) if beta != 0 else out.zero_()
            if not st.gpu:
                for h in self.own_handles:            # sends from this rank's blocks have finished
                    _land(st, h)
            st.finish(stats)
