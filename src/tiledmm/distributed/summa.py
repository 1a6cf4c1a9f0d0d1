"""SUMMA on a pr x pc process grid: A's K panels travel along grid rows, B's along grid columns,
``depth`` panels in flight while this panel's local product runs.

How the panels travel (``engine``):

* ``"nccl"``: broadcasts, A's on the row group's communicator and stream, B's on the column group's, so
  the two run beside each other (one communicator runs its collectives one after another);
* ``"symm"``: every rank keeps its blocks in torch's symmetric memory and *reads* each panel from its
  owner with the copy engines: no SM is taken from the local products and the owner does nothing.

The panel schedule (``panel``) is the same on every rank: by default the scaling model's choice
(``model.summa_panels``: a small first panel, wider ones after it, few beta = 1 passes over C); "block"
for the blocks' own K ranges; a width; or a list of widths. A panel's transfer waits only for the
product that last read its receive buffer (an event, never the host); the products run in panel
order. ``prepare_summa`` stores this rank's blocks panel by panel once (every panel contiguous: a
broadcast or a read straight from it, no staging copy in the call), in symmetric memory for "symm".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

import torch
import torch.distributed as dist

from .._arrays import TiledmmError
from ..outofcore.gemms import Gemm, tiledmm_gemm
from . import _symm
from . import model as _model
from .layout import Grid, block_range
from .streams import _check_engine, _check_local, _comm, _gemm_call, _land, _prepare_local, _Streams

Panel = Union[None, str, int, Sequence[int]]


def summa_panels(shape: tuple, grid: Grid, panel: Panel = None, *, dtype=torch.bfloat16, depth: int = 2,
                 engine: str = "nccl", machine: Optional[_model.Machine] = None) -> list:
    """The K panels [(p0, p1), ...] SUMMA multiplies (the same on every rank of the grid): ``panel``
    None or "auto" (the model's schedule), "block" (the K ranges where A's and B's splits fall), a
    width, or a list of widths (the last repeats); every panel is also cut at those splits."""
    m, k, n = shape
    if isinstance(panel, str) and panel not in ("auto", "block"):
        raise TiledmmError(f"panel {panel!r}: 'auto', 'block', a width or a list of widths")
    if panel is None or panel == "auto":
        elem = torch.empty((), dtype=dtype).element_size()
        return _model.summa_panels(m, k, n, grid.pr, grid.pc, elem=elem, depth=depth, machine=machine, engine=engine)
    if panel == "block":
        return _model.split_panels(k, grid.pr, grid.pc, [max(k, 1)])
    widths = [panel] if isinstance(panel, int) else list(panel) if isinstance(panel, (list, tuple)) else [panel]
    if not widths or any(not isinstance(w, int) or isinstance(w, bool) or w < 1 for w in widths):
        raise TiledmmError(f"panel {panel!r}: widths must be positive integers")
    return _model.split_panels(k, grid.pr, grid.pc, widths)


@dataclass
class _Layout:
    """One rank's view of a SUMMA product: its blocks' ranges, the panels and who owns each."""
    grid: Grid
    shape: tuple
    panels: list              # (p0, p1, owner grid column of A's panel, owner grid row of B's panel)
    mr: int
    nc: int
    ac0: int
    ac1: int
    br0: int
    br1: int

    @classmethod
    def make(cls, shape, grid: Grid, panels: list) -> "_Layout":
        m, k, n = shape
        blk = grid.blocks(m, k, n)
        (ar0, ar1), (ac0, ac1) = blk["a"]
        (br0, br1), (bc0, bc1) = blk["b"]
        owned = [(p0, p1, _owner(k, grid.pc, p0), _owner(k, grid.pr, p0)) for p0, p1 in panels]
        return cls(grid, tuple(shape), owned, ar1 - ar0, bc1 - bc0, ac0, ac1, br0, br1)

    def remote(self, j) -> tuple:
        """(A's panel j comes from another rank, B's does); (travels along the row, along the column)."""
        p0, p1, oc, orow = self.panels[j]
        g, w = self.grid, p1 - p0
        a_moves, b_moves = g.pc > 1 and self.mr * w > 0, g.pr > 1 and w * self.nc > 0
        return (a_moves and oc != g.col, b_moves and orow != g.row), (a_moves, b_moves)

    def own_a(self):
        """This rank's A panels, in order: (index, p0, p1)."""
        return [(j, p0, p1) for j, (p0, p1, oc, _) in enumerate(self.panels) if oc == self.grid.col]

    def symm_bytes(self, elem: int) -> tuple:
        """(A region bytes, whole buffer bytes) of the symmetric buffer: the largest blocks of the grid."""
        m, k, n = self.shape
        g = self.grid
        a = _symm.align(-(-m // g.pr) * -(-k // g.pc) * elem)
        return a, a + _symm.align(-(-k // g.pr) * -(-n // g.pc) * elem)

    def a_offset(self, p0: int, oc: int, elem: int) -> int:
        """Byte offset of A's panel starting at p0 in the buffer of its owner (grid column oc, this
        rank's grid row: the same rows): the owner's panels are stored one after another."""
        return (p0 - block_range(self.shape[1], self.grid.pc, oc)[0]) * self.mr * elem

    def b_offset(self, p0: int, orow: int, elem: int) -> int:
        a_bytes, _ = self.symm_bytes(elem)
        return a_bytes + (p0 - block_range(self.shape[1], self.grid.pr, orow)[0]) * self.nc * elem


def _owner(k: int, parts: int, x: int) -> int:
    """The part of range(k) split into ``parts`` (block_range) that holds x."""
    return next(i for i in range(parts) if block_range(k, parts, i)[0] <= x < block_range(k, parts, i)[1])


class SummaOperands:
    """This rank's SUMMA blocks stored for one panel schedule (``prepare_summa``): A panel by panel
    (each panel a contiguous mr x w matrix), B as is; in a symmetric buffer of its own for "symm".
    Pass it to ``summa`` in place of a_local (b_local None)."""

    def __init__(self, layout: _Layout, engine: str, a_panels: dict, b: torch.Tensor, space=None):
        self.layout, self.engine, self.a_panels, self.b, self.space = layout, engine, a_panels, b, space
        self.dtype, self.device = b.dtype, b.device


def prepare_summa(a_local: torch.Tensor, b_local: torch.Tensor, shape: tuple, *, grid: Optional[Grid] = None,
                  group=None, panel: Panel = None, depth: int = 2, engine: str = "nccl",
                  machine: Optional[_model.Machine] = None) -> SummaOperands:
    """This rank's blocks stored panel-major for ``summa`` (a collective over the grid for "symm": the
    symmetric buffer is exchanged). One copy of each block, made here, so that a product's panels
    travel straight from their storage."""
    _check_engine(engine)
    grid = grid or Grid.make(group)
    lay = _Layout.make(shape, grid, summa_panels(shape, grid, panel, dtype=a_local.dtype, depth=depth,
                                                 engine=engine, machine=machine))
    _check_blocks(lay, a_local, b_local)
    elem = a_local.element_size()
    space = None
    if engine == "symm":
        _symm.check_device(a_local.device)
        _, nbytes = lay.symm_bytes(elem)
        space = _symm._Space(grid.group, nbytes, a_local.device)
    a_panels = {}
    base = None if space else torch.empty(lay.mr * (lay.ac1 - lay.ac0), dtype=a_local.dtype, device=a_local.device)
    for j, p0, p1 in lay.own_a():
        w = p1 - p0
        if space is not None:
            t = space.view(space.rank, lay.a_offset(p0, grid.col, elem), (lay.mr, w), a_local.dtype)
        else:
            off = (p0 - lay.ac0) * lay.mr
            t = base[off:off + lay.mr * w].view(lay.mr, w)
        t.copy_(a_local[:, p0 - lay.ac0:p1 - lay.ac0])
        a_panels[j] = t
    if space is not None:
        b = space.view(space.rank, lay.b_offset(lay.br0, grid.row, elem), tuple(b_local.shape), b_local.dtype)
        b.copy_(b_local)
        space.barrier(0)                        # every rank's blocks are in place before any read
    else:
        b = b_local.contiguous()
    return SummaOperands(lay, engine, a_panels, b, space)


def _check_blocks(lay: _Layout, a_local, b_local) -> None:
    _check_local("a_local", a_local, (lay.mr, lay.ac1 - lay.ac0))
    _check_local("b_local", b_local, (lay.br1 - lay.br0, lay.nc), a_local.dtype)
    if b_local.device != a_local.device:
        raise TiledmmError(f"a_local is on {a_local.device}, b_local on {b_local.device}")


def summa(a_local, b_local: Optional[torch.Tensor], shape: tuple, *, grid: Optional[Grid] = None,
          group=None, gemm: Optional[Gemm] = None, panel: Panel = None, depth: int = 2, engine: str = "nccl",
          out: Optional[torch.Tensor] = None, alpha: float = 1.0, beta: float = 0.0,
          stats: Optional[dict] = None, machine: Optional[_model.Machine] = None) -> torch.Tensor:
    """This rank's C block of C = alpha*A@B + beta*C by SUMMA on a 2-D grid.

    shape: (M, K, N) of the whole product. a_local, b_local: this rank's blocks (``Grid.blocks``
        gives their index ranges; ``scatter_summa`` makes them), or a_local = ``prepare_summa(...)``
        and b_local None.
    panel: the K panels (``summa_panels``). depth: panels in flight (receive buffers per operand).
    engine: "nccl" (broadcasts; gloo on the CPU) or "symm" (copy-engine reads of symmetric memory).
    out: this rank's C block (read when beta != 0); default a new tensor.
    stats: a dict to fill with the timeline (synchronises).
    """
    gemm = gemm or tiledmm_gemm()
    depth = max(1, int(depth))
    if isinstance(a_local, SummaOperands):
        ops = a_local
        if b_local is not None:
            raise TiledmmError("summa(prepared, b_local): the prepared operands hold B; pass None")
        if tuple(shape) != ops.layout.shape or (grid is not None and grid.ranks != ops.layout.grid.ranks):
            raise TiledmmError(f"summa: operands prepared for {ops.layout.shape}, called with {tuple(shape)}")
        if engine != ops.engine:
            engine = ops.engine
        if panel is not None and summa_panels(shape, ops.layout.grid, panel, dtype=ops.dtype, depth=depth,
                                              engine=engine, machine=machine) != \
                [(p0, p1) for p0, p1, *_ in ops.layout.panels]:
            raise TiledmmError("summa: panel differs from the one the operands were prepared for")
        lay = ops.layout
    else:
        _check_engine(engine)
        ops = None
        grid = grid or Grid.make(group)
        if not isinstance(a_local, torch.Tensor) or not isinstance(b_local, torch.Tensor):
            raise TiledmmError("summa needs a_local and b_local tensors (or prepare_summa's operands and None)")
        lay = _Layout.make(shape, grid, summa_panels(shape, grid, panel, dtype=a_local.dtype, depth=depth,
                                                     engine=engine, machine=machine))
        _check_blocks(lay, a_local, b_local)
    a_dtype = ops.dtype if ops else a_local.dtype
    device = ops.device if ops else a_local.device
    if engine == "symm":
        _symm.check_device(device)
    if out is None:
        out = torch.empty(lay.mr, lay.nc, dtype=a_dtype, device=device)
    else:
        _check_local("out", out, (lay.mr, lay.nc))
    run = _Summa(lay, ops, a_local if ops is None else None, b_local, gemm, depth, engine, out, stats is not None)
    run.run(alpha, beta, stats)
    if stats is not None:
        stats.update({"algo": "summa", "grid": (lay.grid.pr, lay.grid.pc), "engine": engine, "depth": depth,
                      "panels": [(p0, p1) for p0, p1, *_ in lay.panels], "prepared": ops is not None})
    return out


class _Summa:
    """One SUMMA product on this rank: the receive buffers (``depth`` slots per operand, a slot reused
    only after the product that read it), the panels in flight, and the products in panel order."""

    def __init__(self, lay: _Layout, ops: Optional[SummaOperands], a_local, b_local, gemm, depth, engine, out,
                 timeline: bool):
        self.lay, self.ops, self.gemm, self.depth, self.engine, self.out = lay, ops, gemm, depth, engine, out
        self.a_local, self.b_local = a_local, (ops.b if ops else b_local)
        self.dtype = ops.dtype if ops else a_local.dtype
        self.sends = {}                       # CPU: the sends in flight (gloo reads their buffers late)
        self.device = out.device
        self.elem = torch.empty((), dtype=self.dtype).element_size()
        self.st = _Streams(self.device, timeline, ("row", "col"))
        g, mr, nc = lay.grid, lay.mr, lay.nc
        wmax = max([p1 - p0 for p0, p1, *_ in lay.panels] + [1])
        self.a_slots = [torch.empty(mr * wmax, dtype=self.dtype, device=self.device) for _ in range(depth)] \
            if g.pc > 1 and mr > 0 else []
        self.b_slots = [torch.empty(wmax * nc, dtype=self.dtype, device=self.device) for _ in range(depth)] \
            if g.pr > 1 and nc > 0 else []
        self.gemm_ev = [None] * len(lay.panels)
        self.handles = [(None, None)] * len(lay.panels)
        self.space = None
        if engine == "symm":
            self.space = ops.space if ops else _symm.space(g.group, lay.symm_bytes(self.elem)[1], self.device, "summa")

    # -- operands ----------------------------------------------------------------------------------
    def own_a(self, j):
        p0, p1, _, _ = self.lay.panels[j]
        if self.ops is not None:
            return self.ops.a_panels[j]
        if self.space is not None:
            return self.space.view(self.space.rank, self.lay.a_offset(p0, self.lay.grid.col, self.elem),
                                   (self.lay.mr, p1 - p0), self.dtype)
        return self.a_local[:, p0 - self.lay.ac0:p1 - self.lay.ac0]

    def own_b(self, j):
        p0, p1, _, _ = self.lay.panels[j]
        return self.b_local[p0 - self.lay.br0:p1 - self.lay.br0]

    def operands(self, j):
        """Panel j's operands of the local product: a receive slot for what another rank sends, else
        this rank's own panel."""
        p0, p1, _, _ = self.lay.panels[j]
        w, slot = p1 - p0, j % self.depth
        (ra, rb), _ = self.lay.remote(j)
        a = self.a_slots[slot][:self.lay.mr * w].view(self.lay.mr, w) if ra else self.own_a(j)
        b = self.b_slots[slot][:w * self.lay.nc].view(w, self.lay.nc) if rb else self.own_b(j)
        return a, b

    def stage_in(self) -> None:
        """symm with plain blocks: this rank's blocks into its symmetric buffer (A panel by panel), then
        a barrier on the row stream (the reads wait for it, the products do not): every rank's blocks
        are in place before any read."""
        if self.space is None or self.ops is not None:
            return
        lay, sp = self.lay, self.space
        for j, p0, p1 in lay.own_a():
            if lay.mr * (p1 - p0):
                self.own_a(j).copy_(self.a_local[:, p0 - lay.ac0:p1 - lay.ac0])
        if self.b_local.numel():
            sp.view(sp.rank, lay.b_offset(lay.br0, lay.grid.row, self.elem), tuple(self.b_local.shape),
                    self.dtype).copy_(self.b_local)
        row, col = self.st.comms["row"], self.st.comms["col"]
        self.st.follow(row, self.st.compute)
        with self.st.on(row):
            sp.barrier(0)
        self.st.follow(col, row)
        self.b_local = sp.view(sp.rank, lay.b_offset(lay.br0, lay.grid.row, self.elem), tuple(self.b_local.shape),
                               self.dtype)

    # -- transfers ---------------------------------------------------------------------------------
    def issue(self, j) -> None:
        """Panel j's transfers: A's along the grid row (stream "row"), B's along the grid column (stream
        "col"), after the product that last read slot j % depth."""
        lay, g = self.lay, self.lay.grid
        p0, p1, oc, orow = lay.panels[j]
        w, slot = p1 - p0, j % self.depth
        (ra, rb), (a_moves, b_moves) = lay.remote(j)
        after = [self.gemm_ev[j - self.depth]] if j >= self.depth and self.gemm_ev[j - self.depth] is not None \
            else []
        ha = hb = None
        if a_moves:
            recv = self.a_slots[slot][:lay.mr * w].view(lay.mr, w) if ra else None
            ha = self._move("row", f"A[{p0}:{p1}]", j, recv, g.row * g.pc + oc, lay.a_offset(p0, oc, self.elem),
                            (lay.mr, w), g.row_group, after)
        if b_moves:
            recv = self.b_slots[slot][:w * lay.nc].view(w, lay.nc) if rb else None
            hb = self._move("col", f"B[{p0}:{p1}]", j, recv, orow * g.pc + g.col, lay.b_offset(p0, orow, self.elem),
                            (w, lay.nc), g.col_group, after)
        self.handles[j] = (ha if ra else None, hb if rb else None)

    def _move(self, stream, what, j, recv, peer, offset, shape, group, after):
        """One operand of panel j from grid position ``peer`` (group rank) into ``recv`` (None: this rank
        owns it and sends it, or with "symm" does nothing: its peers read its buffer)."""
        st = self.st
        src = self.lay.grid.ranks[peer]
        if self.engine == "symm":
            if recv is None:
                return None
            view = self.space.view(peer, offset, shape, self.dtype)

            def read(r=recv, v=view):
                r.copy_(v)
            return _comm(st, what, read, after, stream)
        if recv is not None:
            return _comm(st, what, lambda t=recv: dist.broadcast(t, src=src, group=group, async_op=True), after,
                         stream)
        own = self.own_a(j) if stream == "row" else self.own_b(j)
        if own.is_contiguous():
            h = _comm(st, what, lambda t=own: dist.broadcast(t, src=src, group=group, async_op=True), after, stream)
        else:                                # plain A block: the panel is a slice of its rows -- staged
            slot = (self.a_slots if stream == "row" else self.b_slots)[j % self.depth]
            stage = slot[:own.numel()].view(own.shape)
            if not st.gpu:                   # the send that last read this slot is done (gloo reads it late)
                _land(st, self.sends.pop((stream, j % self.depth), None))

            def send(t=own, s=stage):
                s.copy_(t)
                return dist.broadcast(s, src=src, group=group, async_op=True)
            h = _comm(st, what + " staged", send, after, stream)
        if not st.gpu:
            self.sends[(stream, j % self.depth, j)] = h
            self.sends[(stream, j % self.depth)] = h
        return h

    # -- the product -------------------------------------------------------------------------------
    def run(self, alpha: float, beta: float, stats: Optional[dict]) -> None:
        st, out, lay = self.st, self.out, self.lay
        n = len(lay.panels)
        empty = lay.mr * lay.nc == 0
        with st.on(st.compute):
            if beta == 0 and (n == 0 or empty):
                out.zero_()
            self.stage_in()
            if st.gpu and not empty:
                _prepare_local(self.gemm, [(*self.operands(j), beta if j == 0 else 1.0) for j in range(n)], out,
                               alpha)
            for j in range(min(self.depth, n)):
                self.issue(j)
            for j in range(n):
                for h in self.handles[j]:
                    _land(st, h)
                if not empty:
                    a, b = self.operands(j)
                    p0, p1 = lay.panels[j][:2]
                    self.gemm_ev[j] = _gemm_call(st, self.gemm, a, b, out, alpha, beta if j == 0 else 1.0,
                                                 f"gemm K[{p0}:{p1}]")
                elif st.gpu:
                    ev = st.event()
                    st.rec(ev, st.compute)
                    self.gemm_ev[j] = ev
                if j + self.depth < n:
                    self.issue(j + self.depth)
            if n == 0 and not empty:          # K == 0
                out.mul_(beta) if beta != 0 else out.zero_()
            if not st.gpu:                    # the sends from this rank's blocks have finished
                for key, h in list(self.sends.items()):
                    if len(key) == 3:
                        _land(st, h)
            st.finish(None)
            if self.space is not None and self.ops is None:
                self.space.barrier(0)         # every peer has read this rank's buffer: the next call may write it
            st.finish(stats)
