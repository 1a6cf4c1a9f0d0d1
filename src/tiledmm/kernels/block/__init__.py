"""Block kernels in Triton: the fast path.

Importing the family registers the ``triton`` kernel (``matmul.py``) and then its hooks: the
precision check, the short path (``shortpath.py``) and, in emulation, operands at distinct
addresses (Triton's interpreter keys its copies by address: two storages at one address clash)
and IEEE arithmetic without numpy's warnings (NaN and Inf inputs are legal: they propagate).
"""
import numpy as np

from ... import registry
from ..._backend import emulating
from . import matmul, shortpath


def _distinct_operands(launch):
    def run(a, b, c, **kw):
        if a.data_ptr() == b.data_ptr() and a.numel():
            b = b.clone()
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):   # the interpreter runs numpy here
            launch(a, b, c, **kw)
    return run


registry.amend(
    "triton", casts_out=True, fast_plan=shortpath.fast_plan,
    check_options=lambda dtype, opts: matmul.check_precision(dtype, opts.get("precision")),
    **({"launch": _distinct_operands(matmul.SPEC.launch)} if emulating() else {}))
