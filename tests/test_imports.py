"""The package's import graph has no cycle, counting imports inside functions too (a lazy import is still
a dependency: it only moves when it runs). Layers call upward through the registry's hooks instead (the
kernel families, the autograd door of tiledmm.ops), which name their module and import it on first use."""
import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def _modules() -> dict:
    mods = {}
    for p in sorted((SRC / "tiledmm").rglob("*.py")):
        name = ".".join(p.relative_to(SRC).with_suffix("").parts)
        mods[name[:-len(".__init__")] if name.endswith(".__init__") else name] = p
    return mods


def _targets(mods: dict, mod: str, node) -> list:
    package = mod if mods[mod].name == "__init__.py" else mod.rsplit(".", 1)[0]
    names = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = package.split(".")[:len(package.split(".")) - node.level + 1]
            base = ".".join(parts + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    out = []
    for n in names:
        while n and n not in mods:
            n = n.rsplit(".", 1)[0] if "." in n else ""
        if n and n != mod and not mod.startswith(n + "."):     # a module's own packages run before it anyway
            out.append(n)
    return out


def import_graph() -> dict:
    mods = _modules()
    graph = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[m].update(_targets(mods, m, node))
    return graph


def cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert len(graph) > 50 and graph["tiledmm.api"]          # the walk found the package and its imports
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = import_graph()
    assert "tiledmm.registry" in graph["tiledmm.api"]
    graph["tiledmm.registry"] = set(graph["tiledmm.registry"]) | {"tiledmm.api"}    # api -> registry -> api
    assert any("tiledmm.api" in c and "tiledmm.registry" in c for c in cycles(graph))
