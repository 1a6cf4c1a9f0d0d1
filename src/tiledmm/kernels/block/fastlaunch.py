"""Launching a compiled Triton kernel without Triton's per-call Python work.

``kernel[grid](*args, **meta)`` binds every argument, computes the specialisation key,
looks the compiled kernel up, builds launch metadata and calls the hooks: tens of
microseconds, which is the whole run time of a small GEMM. ``FastKernel`` does the
first launch of each specialisation that way, remembers the ``CompiledKernel`` it
returned, and afterwards calls its launcher directly.

Triton specialises a kernel on its runtime arguments: integers equal to 1, integers
divisible by 16, 32- or 64-bit integers, and tensors' dtypes and 16-byte alignment.
``FastKernel`` keys its cache on exactly those properties, so a kernel is never reused
where Triton would have compiled another one. If the direct call fails (a Triton
version whose launcher takes other arguments) it falls back to the ordinary launch
for good.
"""
from __future__ import annotations

import inspect
import threading
from typing import Any

from ..._backend import emulating


def _int_key(v: int) -> int:
    big = 0 if -2 ** 31 <= v < 2 ** 31 else 4
    return big + (1 if v == 1 else (2 if v % 16 == 0 else 0))


def _arg_key(a):
    """What Triton specialises an argument on: an int's size, ==1, %16; a pointer's dtype and
    16-byte alignment; a host TensorDescriptor's dtype and block shape."""
    if type(a) is int:
        return _int_key(a)
    if hasattr(a, "data_ptr"):
        return (a.dtype, a.data_ptr() % 16 == 0)
    if type(a) is float or type(a) is bool or a is None:
        return None
    base = getattr(a, "base", None)
    if base is not None and hasattr(a, "block_shape"):
        return ("desc", base.dtype, tuple(a.block_shape))
    return type(a)


class FastKernel:
    """One JIT function with its meta-parameters (constexprs, num_warps, num_stages) fixed."""

    def __init__(self, fn, meta: dict, num_warps: int, num_stages: int):
        self.fn = fn
        self.meta = dict(meta)
        self.num_warps, self.num_stages = num_warps, num_stages
        params = list(inspect.signature(fn.fn).parameters.values())
        self.names = [p.name for p in params if p.name not in self.meta]
        self.constexpr_at = {i: p.name for i, p in enumerate(params) if p.name in self.meta}
        self.defaults = {p.name: p.default for p in params}
        self.n_params = len(params)
        self.cache: dict[tuple, Any] = {}
        self.direct = not emulating()
        self._template: list | None = None
        self._slots: list[int] = []

    def _full(self, args: tuple) -> list:
        """Every parameter in signature order: the runtime ``args`` with the constexprs between."""
        if self._template is None:
            self._template = [self.meta.get(self.constexpr_at.get(i)) for i in range(self.n_params)]
            self._slots = [i for i in range(self.n_params) if i not in self.constexpr_at]
        full = self._template[:]
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
        key = tuple(map(_arg_key, args))
        rec = getattr(_tls, "launches", None)
        if rec is not None:
            rec.append((self, grid, args, key))
        ck = self.cache.get(key)
        if ck is None:
            ck = self.cache[key] = self._slow(grid, args)
            return ck
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        try:
            ck.run(grid[0], g1, g2, current_stream(), ck.function, ck.packed_metadata, None, None, None,
                   *self._full(args))
        except (TypeError, AttributeError, SystemError):   # a launcher of another shape: never again
            self.direct = False
            self._slow(grid, args)
        return ck

    def _slow(self, grid: tuple, args: tuple):
        """Triton's own launch (compiles on first use); returns the CompiledKernel."""
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
        if fk is None:
            fk = self.kernels[key] = FastKernel(self.fn, meta, num_warps, num_stages)
        return fk(grid, *args)


_raw_stream = None
_interpreter_lock = threading.Lock()
_tls = threading.local()


WORKSPACE = "workspace"   # a variant's replayable mode: several FastKernel launches and private buffers
MAX_KEPT_BYTES = 256 << 20   # private buffers kept by bound launches, all together
_kept: list = []
_kept_bytes = 0


def replay(fn, a, b, c, **kw):
    """Run ``fn(a, b, c, **kw)`` once, and return a *bound launch* for later calls of the same
    signature -- same shapes, strides, 16-byte alignment of each pointer, and ``kw`` --
    ``go(stream, pa, pb, pc)``, taking only a raw stream and the three data pointers: the
    compiled kernel, grid and every other argument fixed. ``fn.replayable`` (or its value for
    (a, b, c) where it is a function) says what ``fn`` does: True -- one direct launch of a
    FastKernel whose only tensors are ``a``, ``b``, ``c`` as its first three arguments;
    WORKSPACE -- FastKernel launches and private buffers (``_replay_steps``). None where ``fn``
    is otherwise (then the caller keeps calling ``fn``)."""
    mode = getattr(fn, "replayable", False)
    if callable(mode):
        mode = mode(a, b, c)
    if not mode:
        fn(a, b, c, **kw)
        return None
    _tls.launches = launches = []
    try:
        fn(a, b, c, **kw)
    finally:
        _tls.launches = None
    if mode == WORKSPACE:
        return _replay_steps(launches, a, b, c)
    if len(launches) != 1:
        return None
    fk, grid, args, key = launches[0]
    ck = fk.cache.get(key)
    if ck is None or not fk.direct or len(args) < 3 or args[0] is not a or args[1] is not b or args[2] is not c:
        return None
    rest = tuple(fk._full(args)[3:])
    if any(hasattr(v, "data_ptr") for v in rest):
        return None
    run, function, packed = ck.run, ck.function, ck.packed_metadata
    g0, g1, g2 = (tuple(grid) + (1, 1))[:3]
    direct = c_launch(ck)
    if direct is not None and not direct[3]:
        launch, coop, pdl, _ = direct

        def go(stream: int, pa: int, pb: int, pc: int) -> None:
            launch(g0, g1, g2, stream, function, coop, pdl, None, None, packed, None, None, None, pa, pb, pc, *rest)
        return go
    if direct is not None and not direct[2]:
        # a kernel with global scratch (device-side TMA descriptors): Triton's launcher allocates it on
        # every call; here one buffer serves the stream the signature was bound on (launches on one
        # stream run one after another -- not with programmatic dependent launch, hence not direct[2] --
        # so they can share it) and any other stream takes Triton's path
        launch, coop, pdl, nbytes = direct
        home, scratch = current_stream(), _scratch(g0 * g1 * g2 * nbytes)

        def go(stream: int, pa: int, pb: int, pc: int) -> None:
            if stream == home:
                launch(g0, g1, g2, stream, function, coop, pdl, scratch, None, packed, None, None, None,
                       pa, pb, pc, *rest)
            else:
                run(g0, g1, g2, stream, function, packed, None, None, None, pa, pb, pc, *rest)
        return go

    def go(stream: int, pa: int, pb: int, pc: int) -> None:
        run(g0, g1, g2, stream, function, packed, None, None, None, pa, pb, pc, *rest)
    return go


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
    for fk, grid, args, key in launches:
        ck = fk.cache.get(key)
        direct = c_launch(ck) if ck is not None and fk.direct else None
        if direct is None or direct[2]:
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
                else:
                    private[v.untyped_storage().data_ptr()] = v
                    full[i] = p
            elif v is not None and not isinstance(v, (int, float, bool, str)):
                return None                # a host-side descriptor or another object: not replayable
        g0, g1, g2 = (tuple(grid) + (1, 1))[:3]
        scratch = _scratch(g0 * g1 * g2 * direct[3]) if direct[3] else None   # device-side descriptors
        if scratch is not None:
            private[scratch.data_ptr()] = scratch
        steps.append((direct[0], direct[1], g0, g1, g2, ck.function, ck.packed_metadata, full, tuple(slots),
                      scratch))
    nbytes = sum(t.untyped_storage().nbytes() for t in private.values())
    if _kept_bytes + nbytes > MAX_KEPT_BYTES:
        return None
    _kept.extend(private.values())
    _kept_bytes += nbytes
    home = current_stream()

    def go(stream: int, pa: int, pb: int, pc: int):
        if stream != home:
            return False
        ptr = (pa, pb, pc)
        for launch, coop, g0, g1, g2, function, packed, full, slots, scratch in steps:
            args = full[:]             # a copy: threads may replay one signature at once
            for i, role in slots:
                args[i] = ptr[role]
            launch(g0, g1, g2, stream, function, coop, False, scratch, None, packed, None, None, None, *args)
        return True
    return go


# The body of Triton's Python launcher (``CudaLauncher.__call__``, Triton 3.6) allocates the scratch
# buffers (None where the kernel needs none) and ends in this call, so the bound launch can call the
# compiled C ``launch`` itself (~3 us a call less, and no allocation). Any other body: Triton's call.
_KNOWN_TAIL = ("self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, "
               "self.launch_pdl, global_scratch, profile_scratch, *args)")
_known: dict[type, bool] = {}


def _scratch(nbytes: int):
    """Global scratch memory as tiledmm's Triton allocator gives it (``_vcommon``)."""
    import torch
    return torch.empty(nbytes, device="cuda", dtype=torch.int8)


def c_launch(ck):
    """(C launch, cooperative flag, PDL flag, global scratch bytes per program) of a CompiledKernel
    whose Python launcher is the one described above and needs no profiling scratch; else None."""
    run = ck.run
    cls = type(run)
    known = _known.get(cls)
    if known is None:
        try:
            lines = inspect.getsource(cls.__call__).split("\n")
        except (OSError, TypeError):
            lines = []
        body = " ".join(" ".join(lines).split())
        known = _known[cls] = body.endswith(_KNOWN_TAIL) and body.count("self.launch(") == 1
    if not known or getattr(run, "profile_scratch_size", 1):
        return None
    try:
        scratch = run.global_scratch_size * getattr(run, "num_ctas", 1)
        if scratch and run.global_scratch_align > 256:      # torch's blocks are 512-byte aligned
            return None
        return run.launch, run.launch_cooperative_grid, run.launch_pdl, scratch
    except AttributeError:
        return None


def current_stream() -> int:
    """torch's current raw CUDA stream on the current device (cheap: no Stream object)."""
    global _raw_stream
    if _raw_stream is None:
        import torch
        get = torch._C._cuda_getCurrentRawStream
        dev = torch.cuda.current_device
        _raw_stream = lambda: get(dev())  # noqa: E731
    return _raw_stream()
