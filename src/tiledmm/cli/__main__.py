"""``python -m tiledmm.cli``: the ``tiledmm`` command (as ``python -m tiledmm``)."""
from . import main

main()
