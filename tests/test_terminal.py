"""What a student sees in a terminal: import order, tables at 80 and 120 columns, emulation output,
usage errors in one line, words and units a student knows."""
import json
import os
import re
import subprocess
import sys

import pytest

from .conftest import GPU


def fresh_env(**extra) -> dict:
    """This environment less what this process's tiledmm set for itself (a user's shell)."""
    env = dict(os.environ, **extra)
    for var in ("NUMBA_ENABLE_CUDASIM", "TRITON_INTERPRET"):
        env.pop(var, None)
    return env


def python(code: str, **extra) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter, in emulation (on a GPU machine too: TILEDMM_EMULATE)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=fresh_env(TILEDMM_EMULATE="1", **extra))


# -- 1. import order ---------------------------------------------------------------------------------
SQUARE = ("import numpy as np; a = np.ones((4, 4), np.float32); "
          "assert (tiledmm.matmul(a, a) == 4).all(); "
          "assert (tiledmm.matmul(a, a, kernel='tiled') == 4).all(); "
          "assert (tiledmm.matmul(a.astype(np.float64), a.astype(np.float64)) == 4).all(); print('ok')")


def test_triton_imported_before_tiledmm_runs_the_default_kernel_in_the_interpreter():
    p = python("import triton; import tiledmm; " + SQUARE)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


def test_numba_imported_before_tiledmm_runs_the_simt_kernels_in_the_simulator():
    p = python("import numba; import tiledmm; " + SQUARE)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr
    assert "Warning" not in p.stderr, p.stderr


def test_numba_and_triton_imported_first_both_work():
    p = python("import numba, triton; import tiledmm; " + SQUARE)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


def test_numba_cuda_imported_first_warns_at_import_and_refuses_simt_kernels_naming_the_fix():
    """numba.cuda imported in its GPU mode cannot become the simulator: said at import, with the fix;
    the Triton kernels still run, a SIMT kernel is refused with the same words (no traceback of numba)."""
    code = ("import warnings; warnings.simplefilter('always'); import numba.cuda; import tiledmm\n"
            "import numpy as np; a = np.ones((4, 4), np.float32)\n"
            "assert (tiledmm.matmul(a, a) == 4).all()\n"
            "try:\n    tiledmm.matmul(a, a, kernel='tiled')\n"
            "except tiledmm.TiledmmError as e:\n    print('refused:', e)\n")
    p = python(code)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "RuntimeWarning" in p.stderr and "import tiledmm before numba.cuda" in p.stderr, p.stderr
    assert "refused:" in p.stdout and "NUMBA_ENABLE_CUDASIM=1" in p.stdout, p.stdout


# -- 7. the error's name -----------------------------------------------------------------------------
def test_tiledmm_error_is_named_tiledmm_dot_tiledmm_error_in_a_traceback():
    p = python("import numpy as np, tiledmm; tiledmm.matmul(np.ones((2, 3)), np.ones((2, 3)))")
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("tiledmm.TiledmmError: inner dimensions differ"), last
    import pickle

    import tiledmm
    e = pickle.loads(pickle.dumps(tiledmm.TiledmmError("x")))
    assert type(e) is tiledmm.TiledmmError and repr(e) == "TiledmmError('x')"
