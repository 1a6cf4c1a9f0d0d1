"""Importing this package registers every kernel family."""
from . import library, simt  # noqa: F401
