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
    m, k, n = shape
    grid = grid or Grid.make(group)
    gemm = gemm or tiledmm_gemm()
    blk = grid.blocks(m, k, n)
    (ar0, ar1), (ac0, ac1) = blk["a"]
    (br0, br1), (bc0, bc1) = blk["b"]
    mr, nc = ar1 - ar0, bc1 - bc0
    _check_local("a_local", a_local, (mr, ac1 - ac0))
    _check_local("b_local", b_local, (br1 - br0, nc), a_local.dtype)
    if out is None:
        out = torch.empty(mr, nc, dtype=a_local.dtype, device=a_local.device)
    else:
        _check_local("out", out, (mr, nc))
    st = _Streams(a_local.device, stats is not None)
    # K panels: cut at A's column splits (pc) and B's row splits (pr), then at most `panel` wide
    cuts = sorted({block_range(k, grid.pc, c)[0] for c in range(grid.pc)} |
                  {block_range(k, grid.pr, r)[0] for r in range(grid.pr)} | {k})
    panels = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        step = panel or (hi - lo)
        for p0 in range(lo, hi, max(step, 1)):
            p1 = min(hi, p0 + step)
            oc = next(c for c in range(grid.pc) if block_range(k, grid.pc, c)[0] <= p0 < block_range(k, grid.pc, c)[1])
            orow = next(r for r in range(grid.pr) if block_range(k, grid.pr, r)[0] <= p0 < block_range(k, grid.pr, r)[1])
            panels.append((p0, p1, oc, orow))
    wmax = max([p1 - p0 for p0, p1, *_ in panels] + [1])
    depth = max(1, depth)
    a_bufs = [torch.empty(mr * wmax, dtype=a_local.dtype, device=a_local.device) for _ in range(depth)] \
        if grid.pc > 1 else []
    b_bufs = [torch.empty(wmax * nc, dtype=b_local.dtype, device=b_local.device) for _ in range(depth)] \
        if grid.pr > 1 else []
    free_slots = list(range(depth))
    slot_ev = [None] * depth     # event: the GEMM that last read the slot's buffers
    issued = []                  # (panel index, a, b, remote handles, slot or None)
    own_handles = []
    nxt = 0
    done_first = False

    def remote_of(idx):
        """(A's panel comes from another rank, B's panel does)."""
        p0, p1, oc, orow = panels[idx]
        return grid.pc > 1 and mr * (p1 - p0) > 0 and oc != grid.col, \
            grid.pr > 1 and (p1 - p0) * nc > 0 and orow != grid.row

    def operands(idx, slot):
        """Panel idx's operands of the local product: the receive buffers of ``slot`` for a panel
        another rank owns, else views of this rank's blocks."""
        p0, p1, _, _ = panels[idx]
        w = p1 - p0
        a_remote, b_remote = remote_of(idx)
        return (a_bufs[slot][:mr * w].view(mr, w) if a_remote else a_local[:, p0 - ac0:p1 - ac0],
                b_bufs[slot][:w * nc].view(w, nc) if b_remote else b_local[p0 - br0:p1 - br0])

    def issue(idx):
        p0, p1, oc, orow = panels[idx]
        w = p1 - p0
        a_remote, b_remote = remote_of(idx)
        slot = free_slots.pop(0) if (a_remote or b_remote) else None
        after = [slot_ev[slot]] if slot is not None and slot_ev[slot] is not None else []
        remote = []
        a_t, b_t = operands(idx, slot)
        a_own = a_local[:, p0 - ac0:p1 - ac0]
        if grid.pc > 1 and mr * w > 0:
            src = grid.global_rank(grid.row, oc)
            if a_remote:
                fn = (lambda t=a_t, s_=src: dist.broadcast(t, src=s_, group=grid.row_group, async_op=True))
            else:     # the owner sends its panel (a contiguous copy, made on the comm stream, if it is a slice)
                fn = (lambda t=a_own, s_=src: dist.broadcast(t if t.is_contiguous() else t.contiguous(), src=s_,
                                                             group=grid.row_group, async_op=True))
            h = _comm(st, f"bcast A[{p0}:{p1}]", fn, after if a_remote else None)
            (remote if a_remote else own_handles).append(h)
        if grid.pr > 1 and w * nc > 0:
            src = grid.global_rank(orow, grid.col)
            h = _comm(st, f"bcast B[{p0}:{p1}]",
                      lambda t=b_t, s_=src: dist.broadcast(t, src=s_, group=grid.col_group, async_op=True),
                      after if b_remote else None)
            (remote if b_remote else own_handles).append(h)
        issued.append((idx, a_t, b_t, remote, slot))

    with st.on(st.compute):
        if beta == 0 and (not panels or mr * nc == 0):
            out.zero_()
        if st.gpu and mr * nc > 0:
            _prepare_local(gemm, [(*operands(i, 0), beta if i == 0 else 1.0) for i in range(len(panels))],
                           out, alpha)
        while nxt < len(panels) and nxt < depth:
            issue(nxt)
            nxt += 1
        while issued:
            # a panel this rank already holds needs no wait: multiply it first
            pick = next((x for x in issued if not x[3]), issued[0])
            issued.remove(pick)
            idx, a_t, b_t, remote, slot = pick
            for h in remote:
                _land(st, h)
            ev = None
            if mr * nc > 0:
                b_eff = beta if not done_first else 1.0
                ev = _gemm_call(st, gemm, a_t, b_t, out, alpha, b_eff, f"gemm K[{panels[idx][0]}:{panels[idx][1]}]")
                done_first = True
            if slot is not None:
                slot_ev[slot] = ev
                free_slots.append(slot)
            if nxt < len(panels):
                issue(nxt)
                nxt += 1
        if not done_first and mr * nc > 0:        # K == 0
            out.mul_(beta) if beta != 0 else out.zero_()
        if not st.gpu:
            for h in own_handles:                 # sends from this rank's blocks have finished
                _land(st, h)
        st.finish(stats)
    if stats is not None:
        stats.update({"algo": "summa", "grid": (grid.pr, grid.pc), "panels": len(panels)})
    return out

