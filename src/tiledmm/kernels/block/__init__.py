"""Block kernels in Triton: the fast path."""
from . import tritonkey

tritonkey.install()

from . import matmul  # noqa: E402,F401
