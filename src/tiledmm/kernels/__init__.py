"""Importing this package registers every kernel family."""
from . import block, library, simt  # noqa: F401
