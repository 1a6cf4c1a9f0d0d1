"""Launching a compiled Triton kernel without Triton's per-call Python work.

``kernel[grid](*args, **meta)`` binds every argument, computes the specialisation key,
looks the compiled kernel up, builds launch metadata and calls the hooks: tens of
microseconds, which is the whole run time of a small GEMM. ``FastKernel`` does the
first launch of each specialisation that way, remembers the ``CompiledKernel`` it
returned, and afterwards calls its launcher directly. A specialisation compiled by an
earlier process is found in tiledmm's kernel index (``_adapter.load_compiled``) and
launched directly from its first call, without Triton's JIT and its ``triton_key``.

Triton specialises a kernel on its runtime arguments: integers equal to 1, integers
divisible by 16, 32- or 64-bit integers, and tensors' dtypes and 16-byte alignment.
``FastKernel`` keys its cache on exactly those properties (``_adapter.arg_key``), so a kernel
is never reused where Triton would have compiled another one. The direct calls are Triton's
private interface (``tiledmm._adapter``: checked versions, a self-test on first use; its
``BoundLaunch`` is the one form of a compiled kernel's C launch); where the adapter turns them
off, or a direct call fails, the ordinary launch is used for good.

Bound launches for the short path (``kernels/block/shortpath.py``): ``bind`` runs a variant
once and returns a ``ClassLaunch`` -- for a variant that is one plain kernel launch, the
compiled kernel launched with each call's sizes, strides and grid -- or ``replay``'s launch
bound to one exact signature (several launches with private buffers, other parameters).
"""
from __future__ import annotations

import inspect
import threading
from typing import Any

from ... import _adapter
from ..._adapter import arg_key, int_key
from ..._backend import emulating


class FastKernel:
    """One JIT function with its meta-parameters (constexprs, num_warps, num_stages) fixed.

    Thread-safe: everything set in ``__init__`` is never changed; the first launch of each
    specialisation (which compiles) runs under the kernel's lock, and ``cache`` only grows.

    ``cache`` is keyed by (device index, specialisation): a CompiledKernel's function handle belongs
    to the CUDA context it was loaded in, so each device loads (or compiles) its own."""

    def __init__(self, fn, meta: dict, num_warps: int, num_stages: int):
        _adapter.triton_cache_ready()       # before any compile of it (also one inside a graph capture)
        self.fn = fn
        self.meta = dict(meta)
        self.num_warps, self.num_stages = num_warps, num_stages
        params = list(inspect.signature(fn.fn).parameters.values())
        self.names = [p.name for p in params if p.name not in self.meta]
        self.constexpr_at = {i: p.name for i, p in enumerate(params) if p.name in self.meta}
        self.defaults = {p.name: p.default for p in params}
        self.n_params = len(params)
        self.cache: dict[tuple, Any] = {}     # (device index, specialisation) -> CompiledKernel
        self.direct = not emulating()
        # both built before the object is shared: a thread can never see one without the other
        self._template = tuple(self.meta.get(self.constexpr_at.get(i)) for i in range(self.n_params))
        self._slots = tuple(i for i in range(self.n_params) if i not in self.constexpr_at)
        self._lock = threading.Lock()

    def _full(self, args: tuple) -> list:
        """Every parameter in signature order: the runtime ``args`` with the constexprs between."""
        full = list(self._template)
        for i, v in zip(self._slots, args):
            full[i] = v
        return full

    def __call__(self, grid: tuple, *args):
        """Launch on torch's current stream; ``args`` are the runtime arguments in order.
        Returns the CompiledKernel where known (for reports)."""
        if not self.direct:
            if emulating():
                with _interpreter_lock:     # Triton's interpreter patches module state per launch
                    return self._slow(grid, args)
            return self._slow(grid, args)
        key = tuple(map(arg_key, args))
        dev = current_device()
        rec = getattr(_tls, "launches", None)
        if rec is not None:
            rec.append((self, grid, args, key, dev))
        ck = self.cache.get((dev, key))
        if ck is None:
            with self._lock:                # one thread compiles a specialisation; the others wait for it
                ck = self.cache.get((dev, key))
                if ck is None:
                    ikey = self._index_key(key)
                    ck = _adapter.load_compiled(ikey, self.fn)     # compiled by an earlier process?
                    if ck is None:
                        ck = self._slow(grid, args)
                        self.cache[(dev, key)] = ck
                        _adapter.remember_compiled(ikey, ck)
                        return ck
                    self.cache[(dev, key)] = ck
        if not _adapter.triton_direct():
            self._slow(grid, args)
            return ck
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        try:
            ensure_allocator()
            _adapter.run_compiled(ck, grid[0], g1, g2, current_stream(), self._full(args))
        except (TypeError, AttributeError, SystemError):   # a launcher of another shape: never again
            self.direct = False
            self._slow(grid, args)
        return ck

    def _index_key(self, key: tuple):
        """tiledmm's kernel-index key of specialisation ``key`` (``_adapter.index_key``; None where
        direct launches are off: the index only serves them)."""
        if not _adapter.triton_direct():
            return None
        return _adapter.index_key(self.fn, self.meta, self.num_warps, self.num_stages, key)

    def _slow(self, grid: tuple, args: tuple):
        """Triton's own launch (compiles on first use); returns the CompiledKernel."""
        ensure_allocator()
        return self.fn[grid](*self._full(args), num_warps=self.num_warps, num_stages=self.num_stages)


class Launcher:
    """``fn[grid](*args, **meta, num_warps=, num_stages=)`` for kernels whose meta-parameters
    vary per call: one FastKernel per distinct meta."""

    def __init__(self, fn):
        self.fn = fn
        self.kernels: dict[tuple, FastKernel] = {}

    def __call__(self, grid: tuple, args: tuple, meta: dict, num_warps: int, num_stages: int):
        key = (tuple(meta.items()), num_warps, num_stages)
        fk = self.kernels.get(key)
        if fk is None:      # two threads may both build one: setdefault keeps the first for both
            fk = self.kernels.setdefault(key, FastKernel(self.fn, meta, num_warps, num_stages))
        return fk(grid, *args)


_interpreter_lock = threading.Lock()
_tls = threading.local()


WORKSPACE = "workspace"   # a variant's replayable mode: several FastKernel launches and private buffers
MAX_KEPT_BYTES = 256 << 20   # private buffers kept by bound launches, all together
_kept: list = []
_kept_bytes = 0
_kept_lock = threading.Lock()


def _record(fn, a, b, c, kw) -> tuple:
    """Run ``fn(a, b, c, **kw)`` once: (its replayable mode, the FastKernel launches it made)."""
    mode = getattr(fn, "replayable", False)
    if callable(mode):
        mode = mode(a, b, c)
    if not mode:
        fn(a, b, c, **kw)
        return mode, []
    _tls.launches = launches = []
    try:
        fn(a, b, c, **kw)
    finally:
        _tls.launches = None
    return mode, launches


def _plain(launches: list, a, b, c):
    """(kernel, grid, args, key, compiled) of a single direct launch whose first three arguments
    are a, b, c and whose other arguments hold no tensor; else None."""
    if len(launches) != 1:
        return None
    fk, grid, args, key, dev = launches[0]
    ck = fk.cache.get((dev, key))
    if ck is None or not fk.direct or len(args) < 3 or args[0] is not a or args[1] is not b or args[2] is not c:
        return None
    if any(hasattr(v, "data_ptr") for v in args[3:]):
        return None
    return fk, grid, args, key, ck, dev


def replay(fn, a, b, c, **kw):
    """Run ``fn(a, b, c, **kw)`` once, and return a *bound launch* for later calls of the same
    signature -- same shapes, strides, 16-byte alignment of each pointer, and ``kw`` --
    ``go(stream, pa, pb, pc)``, taking only a raw stream and the three data pointers: the
    compiled kernel, grid and every other argument fixed. ``fn.replayable`` (or its value for
    (a, b, c) where it is a function) says what ``fn`` does: True -- one direct launch of a
    FastKernel whose only tensors are ``a``, ``b``, ``c`` as its first three arguments;
    WORKSPACE -- FastKernel launches and private buffers (``_replay_steps``). None where ``fn``
    is otherwise, or where direct launches are off (``_adapter``): the caller keeps calling ``fn``."""
    return _exact(*_record(fn, a, b, c, kw), a, b, c)


def _exact(mode, launches: list, a, b, c):
    if not mode or not _adapter.triton_direct():
        return None
    if mode == WORKSPACE:
        return _replay_steps(launches, a, b, c)
    plain = _plain(launches, a, b, c)
    if plain is None:
        return None
    fk, grid, args, _, ck, _ = plain
    rest = tuple(fk._full(args)[3:])
    g0, g1, g2 = (tuple(grid) + (1, 1))[:3]
    bound = _adapter.bind_compiled(ck)
    if bound is not None and not bound.scratch_bytes:
        launch, head = bound.launch, bound.head

        def go(stream: int, pa: int, pb: int, pc: int) -> None:
            launch(g0, g1, g2, stream, *head, pa, pb, pc, *rest)
        return go
    if bound is not None and not bound.pdl:
        # a kernel with global scratch (device-side TMA descriptors): Triton's launcher allocates it on
        # every call; here one buffer serves the stream the signature was bound on (launches on one
        # stream run one after another -- not with programmatic dependent launch, hence not pdl --
        # so they can share it) and any other stream takes Triton's path
        home, scratch = current_stream(), _scratch(g0 * g1 * g2 * bound.scratch_bytes)
        if scratch is None:          # a capture under way: Triton's launcher allocates it per call
            def go(stream: int, pa: int, pb: int, pc: int) -> None:
                ensure_allocator()
                _adapter.run_compiled(ck, g0, g1, g2, stream, (pa, pb, pc) + rest)
            return go
        launch, head = bound.launch, bound.head_with(scratch)

        def go(stream: int, pa: int, pb: int, pc: int) -> None:
            if stream == home:
                launch(g0, g1, g2, stream, *head, pa, pb, pc, *rest)
            else:
                ensure_allocator()
                _adapter.run_compiled(ck, g0, g1, g2, stream, (pa, pb, pc) + rest)
        return go

    def go(stream: int, pa: int, pb: int, pc: int) -> None:
        _adapter.run_compiled(ck, g0, g1, g2, stream, (pa, pb, pc) + rest)
    return go


def bind(fn, a, b, c, alpha: float, beta: float) -> tuple:
    """Run ``fn(a, b, c, alpha=, beta=)`` once and return what repeats it without the dispatcher:
    (``ClassLaunch`` or None, ``replay``'s exact bound launch or None); for a variant with its own
    ``class_launch`` (``fn.class_launch``), that one's or none. The class launch serves
    every later call of the same shape class and layout (the caller keys it); the exact one only
    calls of this very signature."""
    mode, launches = _record(fn, a, b, c, {"alpha": alpha, "beta": beta})
    own = getattr(fn, "class_launch", None)
    if own is not None:                 # a variant that binds its own launches (the Gluon kernel)
        return own(a, b, c, alpha, beta), None
    if _adapter.triton_direct() and mode is True:          # (decides direct launches on first use)
        plain = _plain(launches, a, b, c)
        cls = ClassLaunch.of(plain, a, b, c, alpha, beta) if plain is not None else None
        if cls is not None:
            return cls, None
    return None, _exact(mode, launches, a, b, c)


# the runtime parameters a class launch computes per call, by name: the variants' kernels name
# them so (kernels.py); a kernel with any other runtime parameter is bound per exact signature
_ENV = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_ab", "stride_am", "stride_ak", "stride_bb",
        "stride_bk", "stride_bn", "stride_cb", "stride_cm", "stride_cn", "alpha", "beta")
MAX_GRID_YZ = 65535


def env(sa, sb, st_a, st_b, st_c, pa: int, pb: int, pc: int, alpha: float, beta: float) -> tuple:
    """The values of ``_ENV`` for one call, and the batch last, from the operands' shapes, strides
    and pointers (batch strides 0 for a 2-D or broadcast operand; a, b, c of one rank)."""
    if len(sa) == 3:
        batch = sa[0]
        return (pa, pb, pc, sa[1], sb[2], sa[2], st_a[0] if batch > 1 else 0, st_a[1], st_a[2],
                st_b[0] if sb[0] > 1 else 0, st_b[1], st_b[2], st_c[0], st_c[1], st_c[2], alpha, beta, batch)
    return (pa, pb, pc, sa[0], sb[1], sa[1], 0, st_a[0], st_a[1], 0, st_b[0], st_b[1], 0, st_c[0], st_c[1],
            alpha, beta, 1)


def _env(a, b, c, alpha, beta) -> tuple:
    return env(a.shape, b.shape, a.stride(), b.stride(), c.stride(), a.data_ptr(), b.data_ptr(), c.data_ptr(),
               alpha, beta)


class ClassLaunch:
    """A bound launch for a whole shape class: one FastKernel (meta fixed) whose runtime
    parameters are all in ``_ENV``, launched with sizes, strides and pointers read from each
    call (``env(...)``) and the grid computed per call (host cdiv): the variants' plain launch
    (``replayable is True``) without their Python. ``__call__(stream, env)`` returns False
    where it launched nothing (a specialisation not compiled yet, a batch over the grid limit,
    a kernel with scratch on a stream other than its own): the caller runs the variant, which
    compiles, and later calls take the bound path.

    Immutable once built but for two caches that only fill (and ``_memo`` starts again when
    full): specialisation -> its ``BoundLaunch``, and sizes -> (``BoundLaunch``, grid)."""

    MEMO = 4096

    def __init__(self, fk, pick, ints, where: tuple, fixed_key: tuple, persistent: int, bm: int, bn: int,
                 batched: bool, dev: int):
        self.fk, self.pick, self.ints, self.where, self.fixed_key = fk, pick, ints, where, fixed_key
        self.dev = dev          # the device it serves (the short path keys class launches by device)
        self.persistent, self.bm, self.bn, self.batched = persistent, bm, bn, batched
        self.tail = tuple(fk._template[len(fk._slots):])
        self.home = current_stream()
        self._known: dict[tuple, tuple] = {}
        self._memo: dict[tuple, tuple] = {}
        self._buffer = None
        self._scratch_lock = threading.Lock()

    @classmethod
    def of(cls, plain, a, b, c, alpha, beta):
        """The class launch of a recorded plain launch, or None where its arguments or grid are not
        what ``_env`` and ``grid`` compute from the call (checked on the recorded call itself)."""
        import operator
        fk, grid, args, key, _, dev = plain
        names = fk.names
        if any(n not in _ENV for n in names) or fk._slots != tuple(range(len(fk._slots))):
            return None                      # an unknown parameter, or constexprs between runtime ones
        bm, bn = fk.meta.get("BLOCK_M"), fk.meta.get("BLOCK_N")
        if not isinstance(bm, int) or not isinstance(bn, int):
            return None
        idx = [_ENV.index(n) for n in names]
        pick = operator.itemgetter(*idx) if len(idx) > 1 else (lambda env: (env[idx[0]],))
        where = tuple(i for i, n in enumerate(names) if 3 <= _ENV.index(n) <= 14)
        ints = operator.itemgetter(*(idx[i] for i in where), len(_ENV))    # the sizes, strides and batch
        fixed_key = tuple(k for i, k in enumerate(key) if i not in where)
        persistent = fk.meta.get("NUM_SMS", 0)
        self = cls(fk, pick, ints, where, fixed_key, persistent if isinstance(persistent, int) else 0, bm, bn,
                   len(grid) > 1, dev)
        env = _env(a, b, c, float(alpha), float(beta))
        want = tuple(v.data_ptr() if hasattr(v, "data_ptr") else v for v in args)
        if tuple(pick(env)) != want or tuple(grid) != self.grid(env[3], env[4], env[-1]):
            return None
        if self._learn(ints(env), env) is None:      # no C launch for the compiled kernel itself
            return None
        return self

    def grid(self, M: int, N: int, batch: int) -> tuple:
        tiles = -(-M // self.bm) * -(-N // self.bn)
        if self.persistent:
            tiles = min(self.persistent, tiles)
        return (tiles, batch) if self.batched else (tiles,)

    def __call__(self, stream: int, env: tuple) -> bool:
        sizes = self.ints(env)
        hit = self._memo.get(sizes)
        if hit is None:
            hit = self._learn(sizes, env)
            if hit is None:
                return False
        bound, g0, g1 = hit
        head = bound.head
        if bound.scratch_bytes:
            if stream != self.home:
                return False
            scratch = self._scratch(g0 * g1 * bound.scratch_bytes)
            if scratch is None:
                return False
            head = bound.head_with(scratch)
        bound.launch(g0, g1, 1, stream, *head, *self.pick(env), *self.tail)
        return True

    def _learn(self, sizes: tuple, env: tuple):
        """(``BoundLaunch``, grid) for these sizes where the kernel has compiled their specialisation
        and the grid is launchable; else None."""
        ikey = tuple(map(int_key, sizes[:-1]))
        known = self._known.get(ikey)
        if known is None:
            full, it, rest = [], iter(ikey), iter(self.fixed_key)
            for i in range(len(self.fk._slots)):
                full.append(next(it) if i in self.where else next(rest))
            ck = self.fk.cache.get((self.dev, tuple(full)))
            bound = _adapter.bind_compiled(ck) if ck is not None else None
            if bound is None or (bound.scratch_bytes and bound.pdl):      # scratch shared under PDL: not bound
                return None
            known = self._known[ikey] = bound
        g = self.grid(env[3], env[4], env[-1])
        g1 = g[1] if self.batched else 1
        if g1 > MAX_GRID_YZ:
            return None
        if len(self._memo) >= self.MEMO:
            self._memo.clear()
        hit = self._memo[sizes] = (known, g[0], g1)
        return hit

    def _scratch(self, nbytes: int):
        """Global scratch of at least ``nbytes`` on the home stream, kept for good (graph-safe)."""
        have = self._buffer
        if have is not None and have.numel() >= nbytes:
            return have
        with self._scratch_lock:
            have = self._buffer
            if have is None or have.numel() < nbytes:
                have = keep(max(nbytes, 2 * (have.numel() if have is not None else 0)))
                if have is None:
                    return None
                self._buffer = have
        return have


def _replay_steps(launches: list, a, b, c):
    """The bound launch of a variant that is a sequence of FastKernel launches (``fn.replayable
    == WORKSPACE``: nothing else runs on the device -- no torch op -- and every tensor a launch
    takes is a view of a, b or c at its base address, or a private buffer the variant allocated
    for the call: split-K's partial sums, a K-major copy of B). The private buffers of the
    first call are kept (never freed, so a CUDA graph that captured a replay stays valid; at
    most MAX_KEPT_BYTES in all) and reused by every replay on the stream the signature was
    bound on -- launches on one stream run one after another; on any other stream ``go``
    returns False and launches nothing (the caller runs the variant itself). A kernel's global
    scratch (device-side TMA descriptors) is kept the same way. None where the launches are not
    all direct C launches without programmatic dependent launch, or a, b, c share a base address."""
    global _kept_bytes
    roles = {a.data_ptr(): 0, b.data_ptr(): 1, c.data_ptr(): 2}
    if len(roles) != 3 or not launches:
        return None
    owners = {t.untyped_storage().data_ptr() for t in (a, b, c)}
    steps, private = [], {}
    for fk, grid, args, key, dev in launches:
        ck = fk.cache.get((dev, key))
        bound = _adapter.bind_compiled(ck) if ck is not None and fk.direct else None
        if bound is None or bound.pdl:
            return None
        full = fk._full(args)
        slots = []
        for i, v in enumerate(full):
            if hasattr(v, "data_ptr"):
                p = v.data_ptr()
                if p in roles and v.untyped_storage().data_ptr() in owners:
                    slots.append((i, roles[p]))
                    full[i] = 0
                elif v.untyped_storage().data_ptr() in owners:
                    return None            # an offset view of an operand: not a role, not private
                else:                      # the variant's workspace: a kept buffer of its size stands in
                    base = v.untyped_storage().data_ptr()
                    if base not in private:
                        private[base] = _scratch(v.untyped_storage().nbytes())
                        if private[base] is None:
                            return None
                    full[i] = private[base].data_ptr() + (p - base)
            elif v is not None and not isinstance(v, (int, float, bool, str)):
                return None                # a host-side descriptor or another object: not replayable
        g0, g1, g2 = (tuple(grid) + (1, 1))[:3]
        per_program = bound.scratch_bytes
        scratch = _scratch(g0 * g1 * g2 * per_program) if per_program else None   # device-side descriptors
        if per_program and scratch is None:
            return None
        if scratch is not None:
            private[scratch.data_ptr()] = scratch
        steps.append((bound.launch, bound.head_with(scratch), g0, g1, g2, full, tuple(slots)))
    nbytes = sum(t.untyped_storage().nbytes() for t in private.values())
    with _kept_lock:                   # check and add at once: threads binding together stay under the cap
        if _kept_bytes + nbytes > MAX_KEPT_BYTES:
            return None
        _kept.extend(private.values())
        _kept_bytes += nbytes
    home = current_stream()

    def go(stream: int, pa: int, pb: int, pc: int):
        if stream != home:
            return False
        ptr = (pa, pb, pc)
        for launch, head, g0, g1, g2, full, slots in steps:
            args = full[:]             # a copy: threads may replay one signature at once
            for i, role in slots:
                args[i] = ptr[role]
            launch(g0, g1, g2, stream, *head, *args)
        return True
    return go


_tls_allocator = threading.local()


def ensure_allocator() -> None:
    """Device-side descriptors and some pipelined kernels need scratch memory from the caller:
    torch.empty on the current stream (graph-capturable). Triton keeps its allocator per thread
    (a context variable), so every thread that launches sets it once."""
    if not getattr(_tls_allocator, "set", False):
        import torch
        import triton
        triton.set_allocator(lambda size, align, stream: torch.empty(size, device="cuda", dtype=torch.int8))
        _tls_allocator.set = True


_keep_streams: dict = {}


def _scratch(nbytes: int, zeroed: bool = False):
    """Device memory kept for good (global scratch, a bound sequence's workspace, counters): allocated
    by a thread and on a stream of their own, so never from a CUDA graph's private pool (torch.cuda.graph
    routes the allocations of the stream it captures there, inductor's cudagraph trees every allocation
    of the thread that warms up or records, and a kept tensor in that pool breaks their bookkeeping);
    None while a capture is under way (the caller then leaves the launch to Triton's own allocator, per
    call). ``zeroed``: filled with zeros there, and the current stream waits for it."""
    import torch
    if torch.cuda.is_current_stream_capturing():
        return None
    dev = torch.cuda.current_device()
    side = _keep_streams.get(dev) or _keep_streams.setdefault(dev, torch.cuda.Stream(dev))
    made: list = []

    def allocate():
        try:
            with torch.cuda.device(dev), torch.cuda.stream(side):
                t = torch.empty(nbytes, device=torch.device("cuda", dev), dtype=torch.int8)
                made.append(t.zero_() if zeroed else t)
        except BaseException as e:  # noqa: BLE001  (raised again in the caller's thread)
            made.append(e)
    worker = threading.Thread(target=allocate, name="tiledmm-keep")
    worker.start()
    worker.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    if zeroed:
        torch.cuda.current_stream(dev).wait_stream(side)
    return made[0]


def keep(nbytes: int, dev: int | None = None):
    """``_scratch`` on device ``dev`` (default: the current one), kept for good and counted against
    MAX_KEPT_BYTES with the bound launches' buffers: None where that total would pass the cap or a capture
    is under way."""
    global _kept_bytes
    import torch
    with _kept_lock:
        if _kept_bytes + nbytes > MAX_KEPT_BYTES:
            return None
        if dev is None:
            have = _scratch(nbytes)
        else:
            with torch.cuda.device(dev):
                have = _scratch(nbytes)
        if have is not None:
            _kept.append(have)
            _kept_bytes += nbytes
    return have


_raw_stream = None
_raw_device = None


def current_device() -> int:
    """torch's current CUDA device index (cheap: no Python wrapper; 0 on a CPU build of torch)."""
    global _raw_device
    if _raw_device is None:
        _raw_device = _adapter.device_getter()
    return _raw_device()


def current_stream() -> int:
    """torch's current raw CUDA stream on the current device (cheap: no Stream object)."""
    global _raw_stream
    if _raw_stream is None:
        get, dev = _adapter.raw_stream_getter(), _adapter.device_getter()
        _raw_stream = lambda: get(dev())  # noqa: E731
    return _raw_stream()
