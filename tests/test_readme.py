"""README.md as a test: what a new user copies from it runs, in a fresh process with a clean environment.

* every ```python block not marked ``# GPU`` on its first line runs as written (its asserts check the values);
* every ``tiledmm ...`` line of a ```bash block not marked ``# GPU`` runs as written, through the
  installed ``tiledmm`` script when there is one (CI's fresh venv), else ``python -m tiledmm``;
* the README keeps exactly two set-up commands, the ones .ci/run runs.

The environment holds none of conftest's variables (TILEDMM_QUIET, TILEDMM_TUNE, TILEDMM_CACHE_DIR): only
PATH, a throw-away HOME (caches land there, never in the user's) and PYTHONPATH to this checkout's src.
"""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import GPU

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.S)


def gpu_only(text: str) -> bool:
    """A block (its first line) or a command line marked for a GPU: a comment that starts with 'GPU'."""
    first = text.splitlines()[0] if text else ""
    return bool(re.search(r"#\s*GPU\b", first))


def snippets() -> list[tuple[str, bool]]:
    return [(b, gpu_only(b)) for b in blocks("python")]


def commands() -> list[tuple[str, bool]]:
    """Every `tiledmm ...` in the README's bash blocks (after an `&&` too), and whether it is marked GPU."""
    out = []
    for block in blocks("bash"):
        for line in block.splitlines():
            code, _, comment = line.partition("#")
            for part in code.split("&&"):
                part = part.strip()
                if part == "tiledmm" or part.startswith("tiledmm "):
                    out.append((part, comment.strip().startswith("GPU")))
    return list(dict.fromkeys(out))


def setup_commands() -> list[str]:
    """The README's set-up commands: the bash lines that install something."""
    return [ln.strip() for b in blocks("bash") for ln in b.splitlines() if ln.strip().startswith("pip install")]


def clean_env(home: Path) -> dict:
    # where packages are installed is kept (a site folder on PYTHONPATH, as on the GPU machine);
    # tiledmm's own and the test run's variables are not
    paths = [str(ROOT / "src")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                   if p and Path(p).resolve() != (ROOT / "src").resolve() and Path(p).resolve() != ROOT]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "COLUMNS": "120",
           "PYTHONPATH": os.pathsep.join(paths)}
    return env


def fresh(argv: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=clean_env(cwd), capture_output=True, text=True, timeout=timeout)


def tiledmm_argv() -> list[str]:
    script = Path(sys.executable).parent / "tiledmm"
    return [str(script)] if script.exists() else [sys.executable, "-m", "tiledmm"]


def test_readme_has_two_setup_commands_and_python_and_cpu_examples():
    assert setup_commands() == [
        "pip install torch==2.13.0 && pip install . && tiledmm run",
        'pip install torch==2.13.0 && pip install -e ".[test]" && python3 -m pytest -q -n auto',
    ]
    assert [s for s, gpu in snippets() if not gpu], "no Python example for a machine without a GPU"
    assert len([c for c, gpu in commands() if not gpu]) >= 15
    assert "../shared" not in README.read_text()


def test_ci_runs_the_readme_setup_commands_from_the_readme():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "README.md" in ci and "python3 -m venv" in ci
    assert "pip install torch==2.13.0" not in ci     # taken from the README, so that the two cannot drift


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One folder for the README's commands, in order: what one writes (bench-out), a later one reads."""
    d = tmp_path_factory.mktemp("readme")
    (d / "docs").mkdir()
    return d


def _host_memory_for(code: str) -> None:
    """A GPU example on host arrays bigger than the GPU (three of n x n float32) needs that much free host
    memory: on a machine busy with other tests (pytest -n) it cannot run beside them -- run this file alone
    (benchmarks/gpu.sh readme), where it must pass."""
    sizes = [int(s.replace("_", "")) for s in re.findall(r"\(([\d_]+), [\d_]+\)", code)]
    need = 3 * 4 * max(sizes, default=0) ** 2 * 1.1
    from tiledmm.cli import mem_available
    free = mem_available()
    if need and free is not None and free < need:
        pytest.skip(f"needs {need / 1e9:.0f} GB of free host memory, {free / 1e9:.0f} GB free: run tests/test_readme.py "
                    "alone (benchmarks/gpu.sh readme)")


@pytest.mark.parametrize("code,gpu", snippets(), ids=[f"python-{i}" for i in range(len(snippets()))])
def test_readme_python_example_runs(code, gpu, workdir):
    if gpu and not GPU:
        pytest.skip("marked '# GPU' in the README")
    if gpu:
        _host_memory_for(code)
    p = fresh([sys.executable, "-c", code], workdir)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    if "matmul(" in code:
        assert "assert " in code, "a README example that computes a product checks it"


@pytest.mark.slow
def test_readme_commands_run_in_order(workdir):
    """Every `tiledmm ...` command of the README, in the README's order, in one folder: one test,
    because a later command reads what an earlier one wrote (roofline reads bench-out/bench.json),
    and pytest-xdist spreads a parametrised test's cases over its workers. `tiledmm run`'s banner is
    checked here (a fresh process, nothing set: as a new user runs it)."""
    ran, banner = 0, False
    for command, gpu in commands():
        if gpu and not GPU:
            continue                      # marked '# GPU' in the README
        p = fresh(tiledmm_argv() + shlex.split(command)[1:], workdir)
        assert p.returncode == 0, f"{command}:\n{p.stdout}{p.stderr}"
        assert "Traceback" not in p.stdout + p.stderr, command
        assert p.stderr.count("kernels run in emulation") <= 1, f"{command}: {p.stderr}"
        if command == "tiledmm run" and not GPU:      # what a new user sees first: one banner, saying why
            assert p.stderr.count("kernels run in emulation") == 1, p.stderr
            assert p.stderr.count("no CUDA GPU found") == 1 and "asked for" not in p.stderr, p.stderr
            banner = True
        ran += 1
    assert ran >= 3, f"only {ran} README commands ran"
    assert banner or GPU, "the README runs no plain `tiledmm run`"


def test_default_matmul_in_a_fresh_process(tmp_path):
    """The issue's first failure: the default (Triton) call in a new process on a machine without a GPU."""
    code = ("import numpy as np, tiledmm; a = np.ones((4, 4), np.float32); "
            "assert (tiledmm.matmul(a, a) == 4).all(); print('ok')")
    p = fresh([sys.executable, "-c", code], tmp_path)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


def test_python_dash_m_tiledmm_runs_the_cli():
    p = fresh([sys.executable, "-m", "tiledmm", "--version"], ROOT)
    assert p.returncode == 0 and re.fullmatch(r"tiledmm \d+\.\d+\.\d+\S*\n", p.stdout), p.stdout + p.stderr
