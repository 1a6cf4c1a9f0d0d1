"""Variant 'gluon-ws': a warp-specialised Hopper GEMM written in Gluon, host side.

Gluon is Triton's lower-level language (``triton.experimental.gluon``): the kernel says
itself what Triton's ``tl`` compiler decides, following Triton's Gluon tutorials
(05-wgmma, 07-persistence, 08-warp-specialization). The device code is in ``gluon_kernel.py``,
imported on the first launch (importing Gluon costs ~0.12 s); everything the dispatcher needs
without launching -- NAME, CONFIGS, RATE, heuristic, why_not, applicable, smem_bytes,
descriptor_plan -- is in ``gluon_model.py`` (re-exported here) and imports no Gluon. This module
launches: the scratch and workspaces, the bound launch and the class launch.

* persistent: one program per SM walks the output tiles in grouped (L2-swizzled) order;
* warp specialisation: a 1-warp *loader* partition issues TMA loads into a STAGES-deep
  shared-memory ring; the default partition (4 or 8 warps = 1 or 2 consumer warpgroups)
  waits on each stage's ``ready`` mbarrier, issues ``warpgroup_mma`` asynchronously, keeps
  one wgmma in flight and hands the stage back on its ``empty`` mbarrier. The loader runs
  ahead into the next tile while the consumers run the epilogue. The loader asks for
  LOADER_REGS registers (``setmaxnreg``), leaving the rest to the consumers;
* fused epilogue: ``act(alpha * acc + beta * C + bias)`` in fp32 (``bias_mode`` 1: one value per
  column, 2: one per row, a 1-D tensor of C's dtype or float32 read with masked loads; ``act``
  "none", "relu", "gelu", "gelu_tanh", "silu" with ``kernels._activation``'s formulas), written
  through shared memory and a TMA store whose completion is awaited only before the next tile's
  store (overlapped with its main loop); EPI_SPLIT=2 stores the tile in two halves through a
  half-size staging buffer, which frees room for a 4th stage. With beta != 0, C is read with
  ordinary loads in the epilogue (exposed, not ahead; the 128x256 tile spills registers there);
* split-K in one kernel (config SPLIT_K): SPLIT_K adjacent work units per tile; each leaves an
  fp32 partial in a workspace and counts itself in on the tile's counter; the last to arrive adds
  the others, runs the epilogue and resets the counter (so the counters stay zero between
  launches; they are kept per device and stream, so launches on two streams never share them, and so
  is the workspace: ``_workspace``, no allocation a call);
* the tail split (config TAIL): the tiles of whole waves run whole; each tile of the last, partial
  wave is split along K (``tail_plan``), and once its units have all arrived each adds up and
  stores its own share of the tile's rows; a launch with nothing to split runs the plain build;
* operands in the layout they have: a transposed A or B (unit stride along M or N) is
  described by a TMA descriptor of its transpose and fed to wgmma through a permuted
  shared-memory view -- no copy. Ragged edges are the copy engine's: out-of-bounds loads
  read zeros, out-of-bounds stores are dropped;
* tiles whose width is not a power of two (config PARTS): register tensors must have
  power-of-two shapes, so a 128x192 tile is three accumulators of 128x64, one wgmma each per
  K-step on B's three 64-column slices (three TMA loads into three buffers of a stage), stored
  one slice after another (64x192 likewise, one consumer warpgroup). They fill waves that the
  power-of-two tiles leave part empty (256 x 11008: 116 tiles of 128x192 where 128x256 has 86, on
  132 SMs) -- cuBLAS's own choice there is a 192-wide tile. 16-bit only, never split.

tf32 (float32 operands): wgmma reads 32-bit operands from shared memory only K-major, but its
first operand may come from registers in any layout. A row-major and B column-major: both from
shared memory; A column-major: A loaded into registers; B row-major (``x @ W`` with W as stored):
the tile is computed transposed, C^T = B^T A^T, B^T loaded into registers. No per-call copy.
A column-major with B row-major is not applicable (both would have to come from registers).

Batched products (a, b, c of 3-D, batch 1 broadcasting): one launch over all products' tiles. Each
operand's matrices are stacked along its rows in one 2-D descriptor (product p's rows start at p x
its rows; a 2-D or broadcast operand: at 0), which needs each operand's batch stride to be one
matrix (``_stacked``) and every tile to stay inside its product: M a multiple of BLOCK_M and K of
BLOCK_K (a stacked tile past the end would read the next product's rows, not zeros); a bias (per
column or per row) is every product's. Not done here: stream-K, swap-AB,
C read ahead, ping-pong consumers.

Host cost of a call: the first call of each specialisation (config, dtypes, epilogue flags,
layout) goes through Gluon's launcher (``kernel[grid](...)``: ~100-150 us, it compiles on first
use) and remembers the CompiledKernel; later calls call its C launch directly
(``_adapter.tensordesc_launch``) with the descriptors' tensor maps kept per (pointer, shape,
strides) in a bounded cache: 12-24 us of host time a call on the H100 (torch.matmul: 13-21 us;
docs/history.md). M, N and K are not specialised, so one compiled kernel serves
every size. Where the adapter declines (another Triton, a failed self-test), every call takes
Gluon's launcher (one warning).
"""
from __future__ import annotations

import functools
import threading
import warnings

from ... import _adapter, _device
from ..._adapter import int_key
from ..._arrays import TiledmmError
from .fastlaunch import _scratch as side_scratch, current_stream, keep
from .gluon_model import (  # noqa: F401  (the kernel's model, re-exported: gluon_gemm is its one door)
    NAME, LOADER_REGS, SMEM_LIMIT, _DTYPES, ACTS, cdiv, _c, parts, check_parts, MAX_TAIL_SPLIT, tail_plan, _units,
    CONFIGS, RATE, RATE_TF32, RATE_TF32_REG, SPLIT_COST, NEAR, TAIL_ROUND, smem_bytes, heuristic, _order,
    _order_of, _stack, _stacked, batch_fits, why_not, applicable, descriptor_plan, operand_mode, _step
)

# -- launching ------------------------------------------------------------------------------------

def _num_sms(dev: int | None = None) -> int:
    """SMs the kernel's persistent grid fills on device ``dev`` (None: the current one): ``tiledmm._device``'s,
    after ``TILEDMM_SM_MARGIN``."""
    return _device.num_sms(dev)


def _is_hopper(dev: int | None = None) -> bool:
    return _device.is_hopper(dev)


def _smem(dev: int) -> int:
    """The model's shared-memory bound on device ``dev``: its opt-in limit less SMEM_LIMIT's slack."""
    return _device.properties(dev).smem_per_block_optin - (232448 - SMEM_LIMIT)


_pick = functools.lru_cache(maxsize=4096)(heuristic)    # launch's no-timing pick (a shared dict: read only)
_FULL = frozenset(_c(0, 0, 0, 0, 0))
_kernel_module = None


def _kernel():
    """gluon_kernel (the device code), imported on first use (not for a kernel found in the index)."""
    global _kernel_module
    if _kernel_module is None:
        from . import gluon_kernel
        _kernel_module = gluon_kernel
    return _kernel_module


# gluon_ws_kernel's parameters in order, as compiled (a CPU test holds them to the kernel's signature): the bound
# launch builds its arguments by them, known without importing Gluon
PARAMS = ("a_desc", "b_desc", "c_desc", "c_ptr", "stride_cm", "bias_ptr", "stride_bias", "ws_ptr", "cnt_ptr",
          "M", "N", "K", "batch", "a_step", "b_step", "c_step", "tail_at", "tail_split", "alpha", "beta",
          "STAGES", "A_T", "B_T", "GROUP_M", "NUM_SMS", "HAS_BETA", "ALPHA_ONE", "EPI_SPLIT", "SPLIT_K",
          "TAIL", "PARTS", "LOADER_REGS", "BIAS", "ACT", "num_warps")


@functools.lru_cache(maxsize=None)
def _source_key() -> str:
    """The kernel index's stand-in for ``gluon_ws_kernel.cache_key``: a hash of gluon_kernel.py, the file
    that holds the kernel and every function it calls but Triton's (which the index key's Triton
    fingerprint covers; a CPU test keeps the file free of imports from tiledmm) -- read, not imported."""
    import hashlib
    from pathlib import Path
    return "gluon_kernel.py:" + hashlib.sha256(Path(__file__).with_name("gluon_kernel.py").read_bytes()).hexdigest()


def _check_epilogue(bias, bias_mode, act, M: int, N: int, c) -> None:
    if act not in ACTS:
        raise TiledmmError(f"gluon-ws: activation {act!r} is not one of {list(ACTS)}")
    if bias_mode not in (0, 1, 2):
        raise TiledmmError(f"gluon-ws: bias_mode {bias_mode!r} is not 0 (none), 1 (per column) or 2 (per row)")
    if bias_mode:
        want = N if bias_mode == 1 else M
        if bias is None or bias.dim() != 1 or bias.shape[0] != want or \
                str(bias.dtype) not in (str(c.dtype), "torch.float32") or bias.device != c.device:
            got = "None" if bias is None else f"shape {tuple(bias.shape)} {bias.dtype} on {bias.device}"
            raise TiledmmError(f"gluon-ws: bias_mode {bias_mode} needs a 1-D bias of {want} elements, "
                               f"{c.dtype} or float32, on {c.device}; got {got}")


# device index -> (1-element fp32 stand-in workspace, int32 counters), and (device, stream) -> the
# same for the split launches of that stream
_SCRATCH: dict = {}
_OUTGROWN: list = []      # counters replaced by larger ones, never freed (their memory is not stream-ordered)
_scratch_lock = threading.Lock()


def _scratch(dev: int, counters: int, workspace: int, stream: int | None = None):
    """(fp32 workspace, int32 arrival counters) on device ``dev``. The counters are kept per device and
    stream (``stream``: the launch's; zero between launches: the last arrival resets them), so split
    launches on two streams never share them -- a tail tile's units wait on its counter; the
    workspace is a fresh tensor of ``workspace`` elements (Gluon's own launch; ``_workspace`` keeps one
    per stream for the bound launches) and a kept 1-element stand-in otherwise (never read)."""
    import torch
    key = dev if stream is None else (dev, stream)
    kept = _SCRATCH.get(key)
    if kept is None or kept[1].numel() < counters:
        with _scratch_lock:
            kept = _SCRATCH.get(key)
            if kept is None or kept[1].numel() < counters:
                if kept is not None:       # outgrown: a launch queued before may still count in it
                    _OUTGROWN.append(kept)
                kept = _SCRATCH[key] = _kept_scratch(dev, max(counters, 1024))
    if workspace:
        return torch.empty(workspace, dtype=torch.float32, device=kept[1].device), kept[1]
    return kept


def _kept_scratch(dev: int, counters: int) -> tuple:
    """(a 1-element fp32 stand-in, ``counters`` zeroed int32 counters) on device ``dev``, to keep: made by
    fastlaunch's keeper, on a thread and stream of its own (not in a CUDA graph's pool: inductor's
    cudagraph trees refuse a kept tensor there, and the first Gluon launch of a process may come inside a
    compiled model's warm-up); while a capture is under way, as any of the capture's allocations."""
    import torch
    with torch.cuda.device(dev):
        ws, cnt = side_scratch(4), side_scratch(4 * counters, zeroed=True)
        if ws is None or cnt is None:
            where = torch.device("cuda", dev)
            return (torch.empty(1, dtype=torch.float32, device=where),
                    torch.zeros(counters, dtype=torch.int32, device=where))
        return ws.view(torch.float32), cnt.view(torch.int32)


MAX_WS_BYTES = 32 << 20     # a stream's kept split workspace at most (a larger one is made for its call)
_WS: dict = {}              # (device, stream) -> the fp32 workspace kept for that stream's split launches


def _workspace(dev: int, stream: int, n: int, where) -> tuple:
    """(an fp32 workspace of >= ``n`` elements for a split launch on ``stream``, None or the tensor the caller
    must hold until the launch is queued). Launches on one stream run one after another, so each stream
    keeps one workspace, doubled when a launch needs more (an outgrown one is never freed: a launch queued
    before may still write it; ``fastlaunch.keep`` counts them against its cap) -- no allocation on the
    call path. A fresh one, held by the caller (its address alone is in the arguments: freed before the
    launch is queued, its memory could go to another tensor first), where the kept one would pass
    MAX_WS_BYTES or cannot be kept (a CUDA graph capture under way: it takes the graph's memory; the kept
    total full). ``where``: the torch device of ``dev``."""
    ws = _WS.get((dev, stream))
    if ws is not None and ws.numel() >= n:
        return ws, None
    import torch
    if 4 * n <= MAX_WS_BYTES:
        with _scratch_lock:
            ws = _WS.get((dev, stream))
            if ws is not None and ws.numel() >= n:
                return ws, None
            size = min(max(n, 2 * ws.numel() if ws is not None else 0), MAX_WS_BYTES // 4)
            kept = keep(4 * size, dev)
            if kept is not None:
                ws = _WS[(dev, stream)] = kept.view(torch.float32)
                return ws, None
    fresh = torch.empty(n, dtype=torch.float32, device=where)
    return fresh, fresh


def _public(a, b, c, M, N, K, config, sms, dev, bias, sbias, alpha, beta, bias_mode, act):
    """Gluon's own launch (compiles on first use): (CompiledKernel, the three descriptors)."""
    kmod = _kernel()
    plan = descriptor_plan(a, b, c, config, sms)
    descs = [kmod.descriptor(*plan[x]) for x in "abc"]
    ws, cnt = _scratch(dev, plan["counters"], plan["workspace"], current_stream() if plan["counters"] else None)
    ck = kmod.gluon_ws_kernel[(plan["grid"],)](
        *descs, c, c.stride(-2), bias, sbias, ws, cnt, M, N, K, plan["batch"], *plan["steps"], plan["tail_at"],
        plan["tail_split"], alpha, beta,
        STAGES=config["num_stages"], A_T=plan["A_T"], B_T=plan["B_T"], GROUP_M=config["GROUP_M"],
        NUM_SMS=sms, HAS_BETA=beta != 0.0, ALPHA_ONE=alpha == 1.0, EPI_SPLIT=config.get("EPI_SPLIT", 1),
        SPLIT_K=plan["split"], TAIL=config.get("TAIL", 0), PARTS=parts(config), LOADER_REGS=LOADER_REGS,
        BIAS=bias_mode, ACT=act, num_warps=config["num_warps"])
    return ck, descs


MAX_DESCS = 1024        # expanded descriptors kept (then the cache starts again)
_descs: dict = {}       # (tensor-map metadata, pointer, shape, strides, device) -> the C launch's arguments
_bound: dict = {}       # specialisation -> _Bound, or _PUBLIC (Gluon's launcher for good)
_PUBLIC = "public"
_bind_lock = threading.Lock()
_warned = False


class _Bound:
    """One specialisation's CompiledKernel, launched through its C launch (``td``: the adapter's
    ``TensorDescLaunch``): the descriptors' arguments from ``_descs``, sizes, pointers and the grid
    from the call. Immutable."""

    def __init__(self, td, config: dict, sms: int, a_t: bool, b_t: bool, consts: tuple):
        self.td, self.expand = td, td.expand
        self.bm, self.bn, self.split = config["BLOCK_M"], config["BLOCK_N"], config.get("SPLIT_K", 1)
        self.bk, self.tail = config["BLOCK_K"], config.get("TAIL", 0)
        self.sms, self.a_t, self.b_t, self.consts = sms, a_t, b_t, consts
        self.mkeys = [repr(sorted(m.items())) for m in td.metadata]   # one tensor-map kind per descriptor

    def desc(self, i: int, ptr: int, shape: tuple, strides: tuple, dev: int) -> tuple:
        global _descs
        key = (self.mkeys[i], ptr, shape, strides, dev)
        hit = _descs.get(key)
        if hit is None:
            try:
                hit = tuple(self.expand(i, ptr, shape, strides))
            except RuntimeError:        # a thread new to CUDA: no current context to fill a tensor map in
                if not _adapter.ensure_context(dev):
                    raise
                hit = tuple(self.expand(i, ptr, shape, strides))
            cache = _descs
            if len(cache) >= MAX_DESCS:
                cache = _descs = {}
            cache[key] = hit
        return hit

    def __call__(self, a, b, c, M, N, K, sa, sb, sc, bias, sbias, alpha, beta, dev, batch=1, steps=(0, 0, 0)) -> None:
        """(a, b, c): the 2-D views (stacked for a batch: ``_stacked``; sa, sb, sc their strides)."""
        stream = current_stream()
        grid, args, hold, _ = self.args(a.data_ptr(), b.data_ptr(), c.data_ptr(), M, N, K, sa, sb, sc,
                                        bias.data_ptr(), sbias, alpha, beta, dev, stream, batch, steps)
        td = self.td
        td.launch(grid, 1, 1, stream, *td.head, *args)
        del hold        # a fresh workspace: held until its launch is queued (args has its address only)

    def args(self, pa: int, pb: int, pc: int, M, N, K, sa, sb, sc, pbias: int, sbias, alpha, beta, dev,
             stream: int | None = None, batch: int = 1, steps: tuple = (0, 0, 0)) -> tuple:
        """(grid, the kernel's arguments (descriptors expanded), a tensor to hold or None, the stream they
        are bound to or None) of one call. A split launch (SPLIT_K, or TAIL with a partial wave to split) takes
        ``stream``'s counters and its workspace (``_workspace``: the stream's kept one, or a fresh one returned
        for the caller to hold until the launch is queued), so its arguments are the stream's; the others'
        depend on nothing but the call's values (a class launch may keep either: ``_ClassLaunch``).
        A batch: ``batch`` products, the descriptors' row ``steps`` between them (``_stacked``)."""
        ra = steps[0] * batch or (K if self.a_t else M)     # the descriptors' rows (a batch's stacked)
        rb = steps[1] * batch or (N if self.b_t else K)
        ea = self.desc(0, pa, (ra, M) if self.a_t else (ra, K), (sa[1] if self.a_t else sa[0], 1), dev)
        eb = self.desc(1, pb, (rb, K) if self.b_t else (rb, N), (sb[1] if self.b_t else sb[0], 1), dev)
        ec = self.desc(2, pc, (steps[2] * batch or M, N), (sc[0], 1), dev)
        tiles = cdiv(M, self.bm) * cdiv(N, self.bn) * batch
        tail_at, tail_split, units = _units(tiles, cdiv(K, self.bk), self.sms, self.split, self.tail)
        hold = on = None
        if tail_split > 1 or self.split > 1:     # the split tiles' counters, their units' partials
            split_tiles, split_units = (tiles - tail_at, units - tail_at) if tail_split > 1 else (tiles, units)
            cnt = _scratch(dev, split_tiles, 0, stream)[1]
            ws, hold = _workspace(dev, stream, split_units * self.bm * self.bn, cnt.device)
            on = stream
        else:
            ws, cnt = _SCRATCH.get(dev) or _scratch(dev, 0, 0)
        return min(self.sms, units), (*ea, *eb, *ec, pc, sc[0], pbias, sbias, ws.data_ptr(), cnt.data_ptr(),
                                      M, N, K, batch, *steps, tail_at, tail_split, alpha, beta, *self.consts), \
            hold, on


MAX_SHAPES = 4096        # sizes a by-shape class launch remembers (then it starts again)
MAX_READY = 1024         # calls' launch arguments a class launch keeps (then it starts again)


class _ClassLaunch:
    """A bound specialisation serving a whole shape class of the short path (``fastlaunch.bind``'s
    class-launch protocol, ``__call__(stream, env) -> bool`` with ``env`` from ``fastlaunch.env``):
    a plain product (no bias or activation) whose sizes, strides and pointers come from each call.
    Returns False, launching nothing, where the call is not this specialisation's (another layout,
    a C row stride Triton would specialise otherwise, sizes past 32 bits, a batch that cannot be
    stacked or whose tiles would cross its products: ``_stacked``, ``batch_fits``): the caller then
    runs the variant, which binds that one.

    ``by_shape`` (where the class's config is the kernel's own model's, not a stored or timed one):
    each call's config is the model's for its own M, N and K (``heuristic``: a class spans up to 2x in
    each), remembered per size; a config not yet bound there returns False too, and the variant's
    launch (which then picks the same) binds it. A launch's arguments are kept per call values (``env``):
    a repeat of those values goes straight to the C launch (a split launch's: on the stream they are bound
    to, whose counters and workspace they name; not where the workspace was made for the call)."""

    def __init__(self, bound: _Bound, a_t: bool, b_t: bool, c_key: int, flags: tuple, dev: int,
                 specs: tuple = (), by_shape: tuple | None = None):
        self.bound, self.a, self.b, self.c_key, self.flags, self.dev = bound, "t" if a_t else "n", \
            "t" if b_t else "n", c_key, flags, dev
        self.specs = specs      # a TAIL config's two specialisations: (split, plain twin)
        self.by_shape = by_shape    # (kind, output element size, reg, the specs' part after the config)
        self.sizes: dict = {}       # by_shape: (M, N, K, batch) -> its _Bound
        self.ready: dict = {}       # env -> (C launch, grid, its arguments after the stream, stream or None)

    def __call__(self, stream: int, env: tuple) -> bool:
        ready = self.ready.get(env)
        if ready is not None and (ready[3] is None or ready[3] == stream):   # these values launched before (a
            ready[0](ready[1], 1, 1, stream, *ready[2])                      # split launch: on this stream)
            return True
        pa, pb, pc, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn, alpha, beta, batch = env
        if scn != 1 or int_key(scm) != self.c_key or (beta != 0.0, alpha == 1.0) != self.flags \
                or max(M, N, K) >= 2 ** 31 or _order_of((M, K), (sam, sak)) != self.a \
                or _order_of((K, N), (sbk, sbn)) != self.b:
            return False
        steps = (0, 0, 0)
        if batch > 1:       # the products stacked along each operand's rows (_stack's rule), or not at all
            steps = (_step(sab, self.a, M, K, sam, sak), _step(sbb, self.b, K, N, sbk, sbn),
                     _step(scb, "n", M, N, scm, 1))
            if None in steps or not steps[2] or batch * max(M, N, K) >= 2 ** 31:
                return False
        if self.by_shape is not None:
            bound = self.sizes.get((M, N, K, batch)) or self._sized(M, N, K, batch)
            if bound is None:
                return False        # that config's first call here: the variant's launch binds it
        else:
            bound = self.bound
            if len(self.specs) == 2:     # a TAIL config: the call's wave decides which build runs (_plain_unless_split)
                split = _tail_splits(M, N, K, bound.bm, bound.bn, bound.bk, bound.sms, batch)
                bound = _bound.get(self.specs[0 if split else 1])
                if not isinstance(bound, _Bound):
                    return False        # that build's first call: the variant's launch binds it
        if batch > 1 and not batch_fits({"BLOCK_M": bound.bm, "BLOCK_K": bound.bk}, M, K):
            return False
        grid, args, hold, on = bound.args(pa, pb, pc, M, N, K, (sam, sak), (sbk, sbn), (scm, scn), pc, 0, alpha,
                                          beta, self.dev, stream, batch, steps)
        td = bound.td
        if hold is None:    # (not a fresh workspace, made for this call only)
            if len(self.ready) >= MAX_READY:
                self.ready = {}
            self.ready[env] = (td.launch, grid, td.head + args, on)
        td.launch(grid, 1, 1, stream, *td.head, *args)
        return True

    def _sized(self, M: int, N: int, K: int, batch: int = 1) -> _Bound | None:
        """The bound specialisation of the model's config for (M, N, K, batch) -- what ``launch`` picks for
        it (``_full_config``, ``_plain_unless_split``) -- remembered; None where it is not bound yet."""
        kind, out_esize, reg, rest = self.by_shape
        sms = self.bound.sms
        config = _plain_unless_split(_pick(M, N, K, kind, sms, out_esize, reg, batch, _smem(self.dev)), M, N, K,
                                     sms, batch)
        bound = _bound.get((tuple(config.items()), *rest))
        if not isinstance(bound, _Bound):
            return None
        if len(self.sizes) >= MAX_SHAPES:
            self.sizes = {}
        self.sizes[(M, N, K, batch)] = bound
        return bound


def _bind(spec, ck, descs, config: dict, sms: int, a_t: bool, b_t: bool, flags: tuple) -> None:
    """Remember how later calls of ``spec`` launch: a _Bound where the adapter gives the C launch
    and the compiled signature is the kernel's, else _PUBLIC (one warning where direct launches
    are on but this kernel's launcher is not the known one). Nothing while undecided (a capture)."""
    global _warned
    td = _adapter.tensordesc_launch(ck, descs) if ck is not None else None
    if td is not None:
        if td.params == PARAMS:
            has_beta, alpha_one, bias_mode, act = flags      # the constexprs (passed, not read, by the C launch)
            consts = (config["num_stages"], a_t, b_t, config["GROUP_M"], sms, has_beta, alpha_one,
                      config.get("EPI_SPLIT", 1), config.get("SPLIT_K", 1), config.get("TAIL", 0), parts(config),
                      LOADER_REGS, bias_mode, act, config["num_warps"])
            _bound[spec] = _Bound(td, config, sms, a_t, b_t, consts)
            return
    if not _adapter.decided():
        return
    if _adapter.triton_direct() and not _warned:
        _warned = True
        warnings.warn("tiledmm: the Gluon kernel's launcher is not the one checked (Triton "
                      f"{'/'.join(_adapter.TRITON_CHECKED)}); gluon-ws launches through kernel[grid](...) "
                      "(correct, ~100 us of host time a call)", RuntimeWarning, stacklevel=4)
    _bound[spec] = _PUBLIC


def _index_key(spec: tuple, config: dict):
    """tiledmm's kernel-index key of a specialisation (``_adapter.index_key``): ``spec`` but the
    device index (the GPU target stands for it), with the loader's registers; the kernel's source
    by ``_source_key`` (no Gluon import)."""
    return _adapter.index_key(_source_key(), {"LOADER_REGS": LOADER_REGS}, config["num_warps"],
                              config["num_stages"], spec[:-2] + (spec[-1],))


def _from_index(spec, a, b, c, config, sms, a_t, b_t, flags):
    """A specialisation compiled and bound by an earlier process, found through tiledmm's kernel index
    and bound again: no Gluon import, no JIT, no ``triton_key``. Its _Bound, or None (not there, or
    not bindable: then Gluon's own launch compiles or finds it)."""
    ck = _adapter.load_compiled(_index_key(spec, config), _adapter.SourceStub("gluon_ws_kernel", PARAMS),
                                require={"bound": True})
    if ck is None:
        return None
    plan = descriptor_plan(a, b, c, config, sms)
    _scratch(c.get_device(), plan["counters"], 0)      # the kept stand-ins and counters the bound launch reads
    _bind(spec, ck, None, config, sms, a_t, b_t, flags)
    bound = _bound.get(spec)
    if isinstance(bound, _Bound):
        return bound
    _bound.pop(spec, None)
    return None


def _full_config(config, M: int, N: int, K: int, a, c, sms: int, reg: bool = False, batch: int = 1) -> dict:
    """``config`` completed from the model's pick where it names only some meta-parameters (a tile width
    given without PARTS is one accumulator wide), checked where it names PARTS."""
    if not config or not _FULL <= config.keys():
        pick = _pick(M, N, K, _DTYPES[str(a.dtype)], sms, c.element_size(), reg, batch, _smem(c.get_device()))
        if config and "BLOCK_N" in config:
            pick = {k: v for k, v in pick.items() if k != "PARTS"}
        config = {**pick, **(config or {})}
    check_parts(config, _DTYPES[str(a.dtype)])
    return config


def _tail_splits(M: int, N: int, K: int, bm: int, bn: int, bk: int, sms: int, batch: int = 1) -> bool:
    """Whether a TAIL launch of this call (``batch`` products) splits its last wave (``tail_plan`` over all
    the launch's tiles, as ``_units`` counts them)."""
    return tail_plan(cdiv(M, bm) * cdiv(N, bn) * batch, cdiv(K, bk), sms)[1] > 1


def _plain_unless_split(config: dict, M: int, N: int, K: int, sms: int, batch: int = 1) -> dict:
    """A TAIL config where this call has no partial wave to split (``_tail_splits``): its plain twin
    (TAIL = 0), a specialisation of its own -- the TAIL build runs a few % slower with nothing to split."""
    if config.get("TAIL") and not _tail_splits(M, N, K, config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"],
                                               sms, batch):
        return dict(config, TAIL=0)
    return config


def _spec(config, a, c, bias, bias_mode, act, alpha, beta, a_t, b_t, stride_cm, sbias, biggest, dev, sms) -> tuple:
    """What one compiled and bound specialisation stands for (the key of ``_bound``)."""
    return (tuple(config.items()), a.dtype, c.dtype, bias.dtype, bias.data_ptr() % 16 == 0, bias_mode, act,
            beta != 0.0, alpha == 1.0, a_t, b_t, int_key(stride_cm), int_key(sbias), biggest >= 2 ** 31, dev, sms)


def class_launch(a, b, c, alpha=1.0, beta=0.0, *, precision, config=None):
    """After a plain launch of (a, b, c) (no bias or activation): its bound specialisation as a
    class launch for the short path (``_ClassLaunch``), or None where it was not bound (Gluon's own
    launcher, an undecided adapter). Without a ``config`` (the dispatcher's plan leaves it to this
    kernel's model) the class launch takes the model's config for each call's own size."""
    st = _stacked(a, b, c)
    if isinstance(st, str):
        return None
    batch, M, N, K, (a, b, c), _ = st
    sms = _num_sms(c.get_device())
    reg = operand_mode(a, b) != 0
    by_shape = not config
    config = _full_config(config, M, N, K, a, c, sms, reg, batch)
    alpha, beta = float(alpha), float(beta)
    a_t, b_t = _order(a) == "t", _order(b) == "t"
    dev = c.get_device()
    specs = [_spec(dict(config, TAIL=t), a, c, c, 0, "none", alpha, beta, a_t, b_t, c.stride(0), 0,
                   max(*a.shape, *b.shape, *c.shape), dev, sms) for t in ((1, 0) if config.get("TAIL") else (0,))]
    bound = _bound.get(specs[0] if _plain_unless_split(config, M, N, K, sms, batch) is config else specs[-1])
    if not isinstance(bound, _Bound):
        return None
    sized = (_DTYPES[str(a.dtype)], c.element_size(), reg, specs[0][1:]) if by_shape else None
    return _ClassLaunch(bound, a_t, b_t, int_key(c.stride(0)), (beta != 0.0, alpha == 1.0), dev, tuple(specs),
                        sized)


def launch(a, b, c, *, precision, alpha=1.0, beta=0.0, config=None, bias=None, bias_mode=0, act="none") -> None:
    """Enqueue c = act(alpha * a @ b + beta * c + bias) on torch's current stream (no host sync).
    A partial ``config`` is completed from ``heuristic``'s; ``bias_mode`` 1: ``bias`` has one value
    per column (N), 2: one per row (M); ``act`` one of ``ACTS``. a (M, K) or (B, M, K), b (K, N) or (B, K, N),
    c (M, N) or (B, M, N): a batch runs in one launch where ``why_not`` allows it."""
    given = (a, b, c)       # what the descriptors' plan reads (descriptor_plan stacks a batch itself)
    batch, M, N, K, (a, b, c), steps = _stacked(a, b, c)
    sms = _num_sms(c.get_device())
    config = _plain_unless_split(_full_config(config, M, N, K, a, c, sms, operand_mode(a, b) != 0, batch),
                                 M, N, K, sms, batch)
    if batch > 1 and not batch_fits(config, M, K):
        raise TiledmmError(f"gluon-ws: a batch of {batch} products {M}x{K} @ {K}x{N} needs M a multiple of "
                           f"BLOCK_M and K of BLOCK_K (config {config['BLOCK_M']}x{config['BLOCK_N']}x"
                           f"{config['BLOCK_K']})")
    if bias_mode or act != "none":
        _check_epilogue(bias, bias_mode, act, M, N, c)
    alpha, beta = float(alpha), float(beta)
    sa, sb, sc = a.stride(), b.stride(), c.stride()
    a_t, b_t = _order_of(a.shape, sa) == "t", _order_of(b.shape, sb) == "t"
    if not bias_mode:
        bias, sbias = c, 0          # never read: C stands in for the pointer
    else:
        sbias = bias.stride(0)
    dev = c.get_device()
    spec = _spec(config, a, c, bias, bias_mode, act, alpha, beta, a_t, b_t, sc[0], sbias, max(*a.shape, *b.shape,
                 *c.shape), dev, sms)
    bound = _bound.get(spec)
    if bound is None:
        with _bind_lock:        # one thread compiles and binds a specialisation; the others wait
            bound = _bound.get(spec)
            if bound is None:
                flags = (beta != 0.0, alpha == 1.0, bias_mode, act)
                bound = _from_index(spec, *given, config, sms, a_t, b_t, flags)
                if bound is None:
                    ck, descs = _public(*given, M, N, K, config, sms, dev, bias, sbias, alpha, beta, bias_mode, act)
                    _bind(spec, ck, descs, config, sms, a_t, b_t, flags)
                    _adapter.remember_compiled(_index_key(spec, config), ck,
                                               bound=isinstance(_bound.get(spec), _Bound))
                    return
    if bound is _PUBLIC:
        _public(*given, M, N, K, config, sms, dev, bias, sbias, alpha, beta, bias_mode, act)
        return
    try:
        bound(a, b, c, M, N, K, sa, sb, sc, bias, sbias, alpha, beta, dev, batch, steps)
    except (TypeError, AttributeError, SystemError):   # a launcher of another shape: Gluon's, for good
        _bound[spec] = _PUBLIC
        _public(*given, M, N, K, config, sms, dev, bias, sbias, alpha, beta, bias_mode, act)
