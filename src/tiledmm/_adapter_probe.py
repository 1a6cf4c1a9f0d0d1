"""The probe kernel of ``_adapter``'s self-test: x[i] = value + i for i < n. Imported only on a GPU,
after the emulation decision (so Triton is imported in the right mode)."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def probe_kernel(x_ptr, n, value, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, value + offs, mask=offs < n)
