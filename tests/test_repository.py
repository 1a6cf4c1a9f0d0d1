"""The repository's own rules, checked on its files (CPU, no kernels):

* the code says why, not when: no session or issue numbers anywhere in src/ (history lives in
  commit messages and docs/history.md);
* the tests depend on code only: nothing under tests/ reads scripts/ or docs/measurements/ (no path into
  either in a test's source);
* every link in README.md, docs/*.md and benchmarks/README.md resolves, and every scripts/ or
  benchmarks/ path the README, docs/performance.md or benchmarks/README.md names exists.
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# "session 22", "sessions 5", "issue 11", "issue #47", "session18_gemv_h100.txt", "issue11_..."; and a bare
# "#47" as GitHub writes an issue (a colour such as "#7fb3ff" in quotes is not one)
CITATION = re.compile(r"\b(?:sessions?|issues?)[ _-]?#?\d|(?<![\w\"'&#])#\d{1,3}\b", re.I)


def _citations(text: str) -> list[str]:
    return [m.group(0) for m in CITATION.finditer(text)]


def test_the_citation_pattern_finds_what_it_should():
    assert _citations("measured in session 22; issue 11's probe; issue #47; (session18_gemv_h100.txt)") == \
        ["session 2", "issue 1", "issue #4", "session1"]
    assert _citations("see #47 and sessions 5 and 7") == ["#47", "sessions 5"]
    assert _citations('C = "#7fb3ff"; issued twice; session state; issue phases 0 .. S-2; tissue 3') == []


def test_no_session_or_issue_numbers_in_src():
    found = []
    for path in sorted((ROOT / "src").rglob("*")):
        if not path.is_file() or path.suffix in (".pyc", ".so", ".gz") or "__pycache__" in path.parts:
            continue
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if _citations(line):
                found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "say why, not when (history goes in commit messages):\n" + "\n".join(found)


def test_tests_read_no_scripts_or_measurements():
    """A test that reads a script or a raw measurement depends on files that are not code: a script
    moves, a measurement is retired, and the test breaks (or skips) for no fault of the library."""
    bad = re.compile(r"""["']scripts(?:/|["'])|docs/measurements|["']measurements["']""")   # a path into them
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.name == Path(__file__).name:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if bad.search(line):
                found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_read_pattern_finds_paths_into_scripts_and_measurements():
    bad = re.compile(r"""["']scripts(?:/|["'])|docs/measurements|["']measurements["']""")
    assert all(bad.search(s) for s in ('ROOT / "scripts" / "x.py"', "open('scripts/x.py')",
                                       'root / "docs/measurements/x.txt"', 'Path("docs") / "measurements"'))
    assert not bad.search('reason="the GPU runs scripts/bench_distributed.py"')


def test_benchmarks_compile(tmp_path):
    """Every benchmark is valid Python (they run on a GPU machine, not here)."""
    import py_compile
    paths = sorted((ROOT / "benchmarks").glob("*.py"))
    assert paths
    for path in paths:
        py_compile.compile(str(path), doraise=True, cfile=str(tmp_path / (path.stem + ".pyc")))


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set:
    return {_slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", path.read_text(), re.M)}


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|<img[^>]*\bsrc=\"([^\"]+)\"")


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(doc):
    assert doc.exists(), doc
    broken = []
    for m in LINK.finditer(doc.read_text()):
        target = m.group(1) or m.group(2)
        if re.match(r"[a-z]+:", target):          # http(s), mailto: not checked here (no network)
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor.lower() not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)}: links that do not resolve: {broken}"


@pytest.mark.parametrize("doc", ["README.md", "docs/performance.md", "benchmarks/README.md"])
def test_named_scripts_and_benchmarks_exist(doc):
    """A path under scripts/ or benchmarks/ that these pages name (in a command or the layout) exists;
    docs/history.md is a record and may name what has since gone."""
    text = (ROOT / doc).read_text()
    named = set(re.findall(r"\b((?:scripts|benchmarks)/[\w./-]*\w)", text))
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"{doc} names {missing}"


def test_no_module_over_600_lines():
    src = Path(__file__).resolve().parent.parent / "src" / "tiledmm"
    long = {str(p.relative_to(src)): n for p in src.rglob("*.py") if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long


def test_private_triton_torch_numba_imports_live_in_the_adapter():
    """The private modules tiledmm reaches into are imported only under _adapter/ (the one guarded place)."""
    import re
    src = Path(__file__).resolve().parent.parent / "src" / "tiledmm"
    private = re.compile(r"^\s*(from|import)\s+(torch\.distributed\._symmetric_memory|numba\.cuda\.cudadrv|"
                         r"numba\.core|numba\.cuda\.core\.caching|numba\.cuda\.dispatcher|numba\.cuda\.simulator|"
                         r"triton\.compiler\.compiler|triton\._C)\b", re.M)
    found = [str(p.relative_to(src)) for p in src.rglob("*.py")
             if "_adapter" not in p.parts and private.search(p.read_text())]
    assert not found, found


# the compiled kernel's packed metadata, its launcher's flags, and the C launch's arguments around them
# (``packed, None, None, None``: the packed metadata, then launch metadata and the two hooks)
PRIVATE_LAUNCH = re.compile(r"packed_metadata|launch_cooperative_grid|launch_pdl|packed\w*, None, None, None")


def _private_launch_mentions(src: Path) -> list:
    """Lines outside _adapter/ that name a compiled kernel's packed metadata or its launcher's
    cooperative/PDL flags, or spell the C launch's arguments: Triton's private launch convention."""
    return [f"{p.relative_to(src)}:{i}: {line.strip()}" for p in sorted(src.rglob("*.py")) if "_adapter" not in p.parts
            for i, line in enumerate(p.read_text().splitlines(), 1) if PRIVATE_LAUNCH.search(line)]


def test_tritons_launch_convention_lives_in_the_adapter():
    """Triton's private launch convention (the C launch's arguments: function handle, packed metadata,
    cooperative and PDL flags, scratch, hooks) is spelled only in the adapter (its BoundLaunch); every
    other module launches a compiled kernel through that."""
    found = _private_launch_mentions(ROOT / "src" / "tiledmm")
    assert not found, "launch through _adapter.bind_compiled / BoundLaunch:\n" + "\n".join(found)


# numba-cuda's private attributes and modules: a device array's raw pointer, a compiled kernel's handle, the
# simulator's classes (its device array's class name included) and its modules, numba's driver and core
NUMBA_PRIVATE_ATTRS = {"gpu_data", "device_pointer_value", "_codelibrary", "get_cufunc", "FakeCUDAArray",
                       "FakeCUDAShared", "BlockThread", "BlockManager"}
NUMBA_PRIVATE_MODULES = re.compile(r"numba\.(?:cuda\.)?(?:simulator|cudadrv|core)(?:\.|$)")


def _numba_private_uses(source: str) -> list[str]:
    """Where ``source`` imports a private numba module or reads a private numba attribute: by its syntax tree
    (comments and prose in docstrings do not count; ``getattr(x, "gpu_data")`` and a class-name test do)."""
    import ast
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute) and node.attr in NUMBA_PRIVATE_ATTRS:
            found.append(f"{node.lineno}: .{node.attr}")
            continue
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value in NUMBA_PRIVATE_ATTRS
                or re.fullmatch(r"[\w.]+", node.value) and NUMBA_PRIVATE_MODULES.match(node.value + ".")):
            found.append(f"{node.lineno}: {node.value!r}")
            continue
        else:
            continue
        hit = next((n for n in names if NUMBA_PRIVATE_MODULES.match(n + ".")), None)
        if hit is not None:
            found.append(f"{node.lineno}: import {hit}")
    return sorted(set(found), key=lambda f: int(f.split(":")[0]))


def test_the_numba_private_check_finds_what_it_should():
    """The forms tiledmm used before the adapter took them over, and look-alikes that are public or prose."""
    for bad in ["f = lambda x: x.gpu_data.device_pointer_value or 0",
                "def _simulated(x):\n    return type(x).__name__ == 'FakeCUDAArray'",
                "from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray",
                "from numba.cuda.simulator import kernel as simkernel\norig = simkernel.BlockThread.syncthreads",
                "from numba.cuda import simulator", "import numba.cuda.cudadrv.driver as drv",
                "from numba.core import types", "cufunc = compiled._codelibrary.get_cufunc()",
                "p = getattr(x, 'gpu_data')", "m = importlib.import_module('numba.cuda.simulator.kernel')"]:
        assert _numba_private_uses(bad), bad
    for fine in ["from numba import cuda, uint64", "from numba.cuda.extending import intrinsic",
                 "from numba import types", "x = numba_cuda().as_cuda_array(t)", "p = _adapter.numba_pointer(x)",
                 "# the simulator's FakeCUDAArray wraps a numpy array; x.gpu_data is its memory",
                 '"""Runs in numba.cuda.simulator (FakeCUDAArray, BlockThread)."""']:
        assert not _numba_private_uses(fine), fine


def test_numba_private_attributes_are_read_only_in_the_adapter():
    """numba-cuda's private attributes and modules (device pointers, compiled-kernel handles, the simulator's
    classes and modules, numba's driver and core) are reached only under _adapter/, the simulator tracing of
    analysis/ included."""
    src = ROOT / "src" / "tiledmm"
    found = [f"{p.relative_to(src)}:{use}" for p in sorted(src.rglob("*.py"))
             if "_adapter" not in p.parts for use in _numba_private_uses(p.read_text())]
    assert not found, "go through tiledmm._adapter:\n" + "\n".join(found)
