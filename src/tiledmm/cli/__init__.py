"""The ``tiledmm`` command: the app and its helpers in ``_app``, one module a command group
(``run``: run, bench; ``analysis``: device, occupancy, model, burst, trace, explain, roofline, claims,
kernels; ``tune``; ``outofcore``; ``dist``). Importing this package registers every command."""
from . import analysis, dist, outofcore, run, tune  # noqa: F401  (each registers its commands on app)
from ._app import app, human_bytes, main, mem_available, parse_bytes, parse_shape

__all__ = ["app", "main", "parse_shape", "parse_bytes", "human_bytes", "mem_available"]
