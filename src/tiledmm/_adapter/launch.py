"""The adapter's part for launching compiled Triton kernels: Triton's Python launcher called positionally
(``run_compiled``), its C launch bound once per compiled kernel (``BoundLaunch``, ``bind_compiled``), and
the rules Triton specialises a kernel's runtime arguments by (``int_key``, ``arg_key``). Every launch of a
compiled kernel outside the adapter goes through these. See the package's docstring for the versions
checked and the fallback."""
from __future__ import annotations

import inspect

from .. import _adapter as A


def run_compiled(ck, g0: int, g1: int, g2: int, stream: int, args) -> None:
    """Triton's Python launcher of a CompiledKernel, called positionally (no launch hooks):
    ``args`` every kernel parameter in signature order, constexprs included."""
    ck.run(g0, g1, g2, stream, ck.function, ck.packed_metadata, None, None, None, *args)


# The body of Triton's Python launcher (``CudaLauncher.__call__``, Triton 3.6) allocates the scratch
# buffers (None where the kernel needs none) and ends in this call, so a bound launch can call the
# compiled C ``launch`` itself (~3 us a call less, and no allocation). Any other body: Triton's call.
_KNOWN_TAIL = ("self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, "
               "self.launch_pdl, global_scratch, profile_scratch, *args)")
_known: dict[type, bool] = {}


def _c_launch(ck, checked: bool = True):
    """(C launch, cooperative flag, PDL flag, global scratch bytes per program) of a CompiledKernel
    whose Python launcher has the body described above and needs no profiling scratch; else None
    (also where direct launches are off, unless ``checked`` is False: the self-test itself)."""
    if checked and not A.triton_direct():
        return None
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


class BoundLaunch:
    """One compiled kernel's C launch, bound to what Triton's convention passes beside the kernel's own
    arguments: its function handle, packed metadata, cooperative and PDL flags (``bind_compiled``).
    Immutable.

    ``bl(gridX, gridY, gridZ, stream, scratch, *args)`` launches, ``args`` every kernel parameter in
    signature order (constexprs included), ``scratch`` the global scratch buffer or None.
    ``bl.launch(gridX, gridY, gridZ, stream, *bl.head, *args)`` is the same call without a Python frame
    of its own (the per-call paths), ``bl.head_with(scratch)`` in place of ``bl.head`` where the kernel
    takes scratch. ``scratch_bytes``: the global scratch the kernel needs per program (0: none);
    launches may share one buffer only where they cannot overlap -- not where ``pdl`` (programmatic
    dependent launch starts a launch before its predecessor ends).

    The C launch takes (gridX, gridY, gridZ, stream, function, cooperative, pdl, global scratch,
    profile scratch, packed metadata, launch metadata, enter hook, exit hook, *args) (Triton 3.6):
    ``head`` is the part between the stream and the kernel's arguments."""

    __slots__ = ("launch", "cooperative", "pdl", "function", "packed", "scratch_bytes", "head")

    def __init__(self, launch, cooperative: bool, pdl: bool, function, packed, scratch_bytes: int = 0):
        for name, value in (("launch", launch), ("cooperative", cooperative), ("pdl", pdl), ("function", function),
                            ("packed", packed), ("scratch_bytes", scratch_bytes)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "head", self.head_with(None))

    def head_with(self, scratch) -> tuple:
        """``head`` with ``scratch`` as the kernel's global scratch buffer."""
        return (self.function, self.cooperative, self.pdl, scratch, None, self.packed, None, None, None)

    def __call__(self, g0: int, g1: int, g2: int, stream: int, scratch, *args) -> None:
        self.launch(g0, g1, g2, stream, *(self.head if scratch is None else self.head_with(scratch)), *args)

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(cooperative={self.cooperative}, pdl={self.pdl}, "
                f"scratch_bytes={self.scratch_bytes})")


def bind_compiled(ck, checked: bool = True) -> BoundLaunch | None:
    """The ``BoundLaunch`` of CompiledKernel ``ck``, or None: where direct launches are off (unless
    ``checked`` is False: the self-test itself), Triton's Python launcher has another body than the
    one checked, the kernel needs profiling scratch, or its global scratch an alignment past torch's
    (the caller launches through ``run_compiled`` or ``kernel[grid](...)``)."""
    direct = _c_launch(ck, checked)
    if direct is None:
        return None
    launch, coop, pdl, scratch = direct
    return BoundLaunch(launch, coop, pdl, ck.function, ck.packed_metadata, scratch)


# -- Triton's specialisation of a kernel on its runtime arguments ------------------------------------------
#
# Triton's private rules, mirrored: a cache keyed on these never reuses a compiled kernel where Triton
# would have compiled another one.

def int_key(v: int) -> int:
    """What Triton specialises an integer parameter on: 64-bit, == 1, divisible by 16."""
    return (0 if -2 ** 31 <= v < 2 ** 31 else 4) + (1 if v == 1 else (2 if v % 16 == 0 else 0))


def arg_key(a):
    """What Triton specialises an argument on: an int's size, ==1, %16; a pointer's dtype and
    16-byte alignment; a host TensorDescriptor's dtype and block shape."""
    if type(a) is int:
        return int_key(a)
    if hasattr(a, "data_ptr"):
        return (a.dtype, a.data_ptr() % 16 == 0)
    if type(a) is float or type(a) is bool or a is None:
        return None
    base = getattr(a, "base", None)
    if base is not None and hasattr(a, "block_shape"):
        return ("desc", base.dtype, tuple(a.block_shape))
    return type(a)
