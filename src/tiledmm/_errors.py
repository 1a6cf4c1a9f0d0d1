"""``TiledmmError``: bad input to tiledmm. Its own module, below everything else, so that any module
can raise it (the backend's choice of GPU or emulation included) without importing the array helpers."""


class TiledmmError(ValueError):
    """Bad input to tiledmm: the message names the shapes, dtypes or choices involved."""


TiledmmError.__module__ = "tiledmm"   # as users name it (tracebacks, repr, pickle): tiledmm.TiledmmError


__all__ = ["TiledmmError"]
