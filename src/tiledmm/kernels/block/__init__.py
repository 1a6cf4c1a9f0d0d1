"""Block kernels in Triton: the fast path."""
from . import matmul  # noqa: F401
