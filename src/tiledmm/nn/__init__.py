"""Drop-in layers on tiledmm's operators: ``tiledmm.nn.Linear`` and ``tiledmm.nn.functional.linear``."""
from . import functional
from .functional import ACTIVATIONS
from .grouped import GroupedLinear
from .modules import Linear

__all__ = ["Linear", "GroupedLinear", "functional", "ACTIVATIONS"]
