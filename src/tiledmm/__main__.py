"""``python -m tiledmm``: the ``tiledmm`` command."""
from .cli import main

main()
