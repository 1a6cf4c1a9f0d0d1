"""The adapter's part for emulation in a process that imported Triton or numba before tiledmm (the private
interfaces ``tiledmm._backend.after_earlier_imports`` is handed)."""
from __future__ import annotations

# -- emulation after an earlier import of Triton or numba ---------------------------------------------

def interpret_imported_triton() -> int:
    """Make a Triton that was imported before tiledmm chose emulation run kernels in its interpreter;
    the number of triton.language functions rewrapped.

    ``@triton.jit`` reads TRITON_INTERPRET when it decorates, so an import of Triton before tiledmm set
    it left triton.language's own jit functions (``tl.zeros``, ``tl.cdiv``, ...) as compiled-only
    ``JITFunction`` objects, which raise "Cannot call @triton.jit'd outside of the scope of a kernel" when an
    interpreted kernel calls them. The knob is switched on for this process (the kernels tiledmm
    decorates later become interpreted ones) and each of those functions is replaced, in every
    triton.language module that holds it, by the ``InterpretedFunction`` the decorator would have made."""
    import sys

    import triton
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        knobs.runtime.interpret = True
    made: dict = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "triton.language" or name.startswith("triton.language.")):
            continue
        for attr, value in list(vars(module).items()):
            if type(value) is JITFunction:     # (Gluon's subclass has no interpreter: left alone)
                if id(value) not in made:
                    made[id(value)] = InterpretedFunction(value.fn)
                setattr(module, attr, made[id(value)])
    return len(made)


def numba_simulator_ready() -> bool:
    """Make numba's CUDA simulator what ``numba.cuda`` gives in this process (NUMBA_ENABLE_CUDASIM=1
    is set); False where that cannot be had. numba.cuda takes its mode from numba's config
    (``numba.cuda.core.config`` is ``numba.core.config``), which numba reads from the environment at its
    own import: after ``import numba`` alone it is read again (``reload_config``, as numba's compiler
    does), and numba.cuda, imported later, is the simulator; a numba.cuda imported already keeps the
    mode it was imported in."""
    import sys
    config = sys.modules.get("numba.core.config")
    if config is None:
        return True
    if "numba.cuda" in sys.modules:
        return bool(getattr(config, "ENABLE_CUDASIM", False))
    config.reload_config()
    return bool(config.ENABLE_CUDASIM)
