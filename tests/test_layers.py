"""The layers point one way (docs/architecture.md):

    project  studio/ (the box: settings, urls, celery, CLI, dev box, demo, example workflows)
       ↓
    limits   limits/ (the engine, the workflow API, Studio's screens, the JSON API, CLI, admin)
       ↓
    runs     stackbone/ and stackbone/runs/ (the durable run layer: runtime, Run/Step, tasks, signals)
       ↓
    plumbing stackbone/plumbing/ (access, sign-in throttle, middleware, broker transport, clock)

limits/ and stackbone/ are the installable apps; studio/ is one project built from them. The
shims left at studio/runs/ and studio/plumbing/ (the old paths, issue 29) count as the layer of
the module each one is.

Must never happen: a module imports one of a higher layer (a lower layer tells a higher one
things through signals, connected in the higher layer's AppConfig.ready()), or modules import
each other in a circle. Read from the source (every import statement, at any depth), not from
what happens to be loaded.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

# one_database (tests/conftest.py): reads the source, never a database.
pytestmark = pytest.mark.one_database

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"plumbing": 0, "runs": 1, "limits": 2, "project": 3}


def layer(module: str) -> str:
    for plumbing in ("stackbone.plumbing", "studio.plumbing"):
        if module == plumbing or module.startswith(f"{plumbing}."):
            return "plumbing"
    if module == "stackbone" or module.startswith(("stackbone.", "studio.runs.")) or module == "studio.runs":
        return "runs"
    if module == "limits" or module.startswith("limits."):
        return "limits"
    return "project"


def modules() -> dict[str, Path]:
    found = {}
    for package in ("limits", "stackbone", "studio"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports, anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                targets.add(candidate if candidate in known else base)
    return {target for target in targets if target in known and target != name}


GRAPH = {name: imports(path, name, modules()) for name, path in modules().items()}


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_no_module_imports_a_higher_layer(name: str) -> None:
    upward = sorted(t for t in GRAPH[name] if LAYERS[layer(t)] > LAYERS[layer(name)])
    assert not upward, f"{name} ({layer(name)}) imports {upward} of a higher layer"


def test_no_modules_import_each_other_in_a_circle() -> None:
    """Tarjan's strongly connected components over the import graph."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    assert circles == []


def test_the_layers_are_what_this_test_reads() -> None:
    """A guard on the guard: the walk sees the imports it must judge."""
    assert "stackbone.runs.models" in GRAPH["limits.apps"]
    assert "stackbone.runs.runtime" in GRAPH["limits.runs"]
    assert "stackbone.runs.runtime" in GRAPH["studio.runs.runtime"]  # a shim at the old path
    assert layer("stackbone.runs.runtime") == "runs" and layer("studio.settings") == "project"
    assert layer("stackbone.apps") == "runs" and layer("studio.plumbing.clock") == "plumbing"
    assert all(layer(t) in ("runs", "plumbing") for t in GRAPH["stackbone.runs.runtime"])


def test_the_installable_apps_import_nothing_of_the_box() -> None:
    """limits and stackbone install into any project (docs/embedding.md): they never import the
    box's modules (the old paths studio.runs.* and studio.plumbing.* are the moved modules)."""
    box = {name for name in GRAPH if layer(name) == "project" and not name.startswith(("limits", "stackbone"))}
    for name in GRAPH:
        if name.startswith(("limits", "stackbone")):
            assert not GRAPH[name] & box, f"{name} imports {sorted(GRAPH[name] & box)} of the box"
