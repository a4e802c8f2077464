"""The package has no import cycle: no module reaches itself through what it imports, counting
the imports inside functions (a lazy import is still a dependency), the dotted names handed to
``importlib.import_module`` and the package ``__init__`` a ``from package import name`` reads;
only ``if TYPE_CHECKING:`` blocks are left out (they never run)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import gpuinsight

PACKAGE = Path(gpuinsight.__file__).parent


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _owner(name: str, mods: dict[str, Path]) -> str | None:
    """The package module ``name`` is, or is defined in (None: not this package's)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path, mods: dict[str, Path]) -> set[str]:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, str(path))
    # a module that imports by name (``importlib.import_module(...)``) depends on the modules
    # its dotted strings name
    by_name = "import_module(" in source
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit_all(child.orelse)
                continue
            if isinstance(child, ast.Import):
                found.update(filter(None, (_owner(a.name, mods) for a in child.names)))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    head = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join(head + ([child.module] if child.module else []))
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    found.add(sub if sub in mods else _owner(base, mods) or "")
            elif (by_name and isinstance(child, ast.Constant) and isinstance(child.value, str)
                  and child.value.startswith("gpuinsight.") and child.value in mods):
                found.add(child.value)
            else:
                visit(child)

    def visit_all(nodes: list[ast.stmt]) -> None:
        for n in nodes:
            visit(ast.Module(body=[n], type_ignores=[]))

    visit(tree)
    found.discard("")
    found.discard(module)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


@cache  # one walk for both tests
def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, mods) for m, p in mods.items()}


def test_the_package_has_no_import_cycle() -> None:
    graph = _graph()
    assert sum(map(len, graph.values())) > 500  # the walk sees the imports (it did not go blind)
    assert _cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    """The check itself: a circle through a lazy import is found, a chain is not."""
    graph = _graph()
    assert "gpuinsight.rules.engine" in graph["gpuinsight.api"]  # a lazy import, inside a method
    assert _cycles({**graph, "gpuinsight.plan.ids": graph["gpuinsight.plan.ids"] | {"gpuinsight.api"}}) != []
    assert "gpuinsight.api" not in graph["gpuinsight.plan.ids"]  # (the graph itself was not changed)
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
