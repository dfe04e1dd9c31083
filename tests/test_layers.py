"""The layers point one way (docs/architecture.md):

    project  studio/ (the box: settings, urls, celery, CLI, dev box, demo, example workflows)
       ↓
    limits   limits/ (the engine, the workflow API, Studio's screens, the JSON API, CLI, admin)
       ↓
    runs     stackbone/ and stackbone/runs/ (the durable run layer: runtime, Run/Step, tasks, signals)
       ↓
    plumbing stackbone/plumbing/ (access, sign-in throttle, middleware, broker transport, clock)

limits/ and stackbone/ are the installable apps; studio/ is one project built from them, and
every module under studio/ is the box's, the shims at the old paths (studio.runs.*,
studio.plumbing.*, studio.models, ...: issues 29 and 45) included.

Must never happen: a module imports one of a higher layer (a lower layer tells a higher one
things through signals, connected in the higher layer's AppConfig.ready()); modules import each
other in a circle; a module of an installable app, its migrations included, imports anything of
the box (issue 45: a migration that imported a shim broke `migrate` for every project the day the
shims go); an old path imported without a DeprecationWarning naming the new one, or imported by
the apps', the box's or the tests' own code. Read from the source (every import statement, at any
depth), not from what happens to be loaded.
"""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest

# one_database (tests/conftest.py): reads the source, never a database.
pytestmark = pytest.mark.one_database

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"plumbing": 0, "runs": 1, "limits": 2, "project": 3}


def layer(module: str) -> str:
    if module == "studio" or module.startswith("studio."):
        return "project"
    if module == "stackbone.plumbing" or module.startswith("stackbone.plumbing."):
        return "plumbing"
    if module == "stackbone" or module.startswith("stackbone."):
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


KNOWN = modules()
GRAPH = {name: imports(path, name, KNOWN) for name, path in KNOWN.items()}
RUNS_MODULES = sorted(p.stem for p in (ROOT / "studio" / "runs").glob("*.py") if p.stem != "__init__")
PLUMBING_MODULES = sorted(p.stem for p in (ROOT / "studio" / "plumbing").glob("*.py") if p.stem != "__init__")


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
    assert "stackbone.runs.runtime" in GRAPH["limits.runs"]  # the public names it hands on
    assert "limits.runs.bounds" in GRAPH["limits.runs.start"] and "limits.runs.api" in GRAPH["limits.runs.api_urls"]
    assert "limits.runs.listing" in GRAPH["limits.run_list"]  # a shim at an old path of limits' own
    assert "stackbone.runs.runtime" in GRAPH["studio.runs.runtime"]  # a shim at the old path
    assert layer("stackbone.runs.runtime") == "runs" and layer("studio.settings") == "project"
    assert layer("stackbone.apps") == "runs" and layer("studio.plumbing.clock") == "project"
    assert all(layer(t) in ("runs", "plumbing") for t in GRAPH["stackbone.runs.runtime"])
    # Migrations are modules like any other: their imports are read too.
    assert "stackbone.plumbing.migration_ops" in GRAPH["limits.migrations.0007_lean_indexes"]
    assert "stackbone.plumbing.migration_ops" in GRAPH["studio.plumbing.migration_ops"]


def test_the_installable_apps_import_nothing_of_the_box() -> None:
    """limits and stackbone install into any project (docs/embedding.md), which has no `studio`
    package, or one of its own: no module of theirs, no migration either, imports any module of
    the box, the shims at the old paths included."""
    box = {name for name in GRAPH if layer(name) == "project"}
    assert "studio.plumbing.migration_ops" in box and "studio.settings" in box
    for name in GRAPH:
        if name.startswith(("limits", "stackbone")):
            assert not GRAPH[name] & box, f"{name} imports {sorted(GRAPH[name] & box)} of the box"


# The old paths (studio/_moved.py, limits/_moved.py): a shim per module that moved.
LIMITS_MOVED = {
    "run_admin": "admin",
    "run_bounds": "bounds",
    "run_list": "listing",
    "run_selectors": "selectors",
    "run_values": "values",
    "run_views": "views",
    "runs_api": "api",
    "runs_api_urls": "api_urls",
    "runs_screen": "screen",
}
OLD_PATHS = {
    **{f"studio.runs.{name}": f"stackbone.runs.{name}" for name in RUNS_MODULES},
    **{f"studio.plumbing.{name}": f"stackbone.plumbing.{name}" for name in PLUMBING_MODULES},
    "studio.runtime": "stackbone.runs.runtime",
    "studio.cli": "limits.cli.script",
    "studio.runs_cli": "limits.cli.runs",
    "studio.workers_cli": "limits.cli.workers",
    # limits' own (limits/_moved.py): issue 48 gathered the runs surfaces into limits.runs.
    **{f"limits.{old}": f"limits.runs.{new}" for old, new in LIMITS_MOVED.items()},
}
OLD_NAMES = {"studio.models": ("Run", "stackbone.models.Run"), "studio.tasks": ("advance_run", "stackbone.runs.tasks")}
# Code of others still on the old paths, being reworked elsewhere (each file only warns): this list
# may only shrink (it is empty: every test, bench and chaos module imports the new paths).
NOT_YET_MOVED: set[str] = set()

IMPORT_EACH = """
import importlib, json, sys, warnings
import django
django.setup()
found = {}
for old, name in json.loads(sys.argv[1]).items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(f"from {old} import {name}" if name else f"import {old}")
    found[old] = [(w.category.__name__, str(w.message), w.filename) for w in caught]
    if not name:  # the moved module itself, so an attribute set through one path is seen through the other
        assert sys.modules[old] is importlib.import_module(json.loads(sys.argv[2])[old]), old
print(json.dumps(found))
"""


def test_every_old_path_warns_naming_its_new_one_and_is_the_moved_code() -> None:
    """Each shim, imported fresh (a process of its own), warns once with a DeprecationWarning
    that names the new path and points at the line that imported it; studio.models and
    studio.tasks (which Django and Celery import for the box app) warn when a name is used."""
    import json
    import os
    import subprocess
    import sys

    asked = dict.fromkeys(OLD_PATHS, "") | {old: name for old, (name, _) in OLD_NAMES.items()}
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, json.dumps(asked), json.dumps(OLD_PATHS)],
        cwd=ROOT, env={**os.environ, "DJANGO_SETTINGS_MODULE": "studio.settings"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    for old, new in [*OLD_PATHS.items(), *((old, new) for old, (_, new) in OLD_NAMES.items())]:
        warned = [(category, message) for category, message, _ in found[old] if new in message]
        assert [category for category, _ in warned] == ["DeprecationWarning"], (old, found[old])
        assert old in warned[0][1], warned
        assert all(filename == "<string>" for _, _, filename in found[old]), found[old]  # the importer


def test_nothing_of_the_apps_the_box_or_the_tests_uses_an_old_path() -> None:
    """The shims are for other people's code: the project's own imports the new paths."""
    old = set(OLD_PATHS) | set(OLD_NAMES) | {"studio.runs", "studio.plumbing"}
    users = []
    for path in sorted([*ROOT.joinpath("tests").rglob("*.py"), *(ROOT / "manage.py",)]):
        if any(str(path.relative_to(ROOT)).startswith(folder) for folder in NOT_YET_MOVED):
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        users += [
            f"{path.relative_to(ROOT)}: {target}"
            for target in imports(path, name, KNOWN | dict.fromkeys(old, path)) & old
        ]
    for name, targets in GRAPH.items():
        if (
            not name.startswith(tuple(OLD_PATHS))
            and name not in OLD_NAMES
            and name not in ("studio.runs", "studio.plumbing")
        ):
            users += [f"{name}: {target}" for target in sorted(targets & old)]
    assert users == []


# Every public name each old path of issue 48's runs package had (56bf27d): still there through it.
OLD_RUNS_NAMES = {
    "limits.run_admin": ["RunAdmin", "STEP_FIELDS", "StepInline"],
    "limits.run_bounds": [
        "BOX_NAMED",
        "Bounds",
        "CONCURRENCY_FIELDS",
        "MAX_NAMED_LIMITS",
        "QUEUE_TIMEOUT_MS",
        "START_REQUEST_SUFFIX",
        "bound_name",
        "bounds_for_run",
        "box_place",
        "declare",
        "declared_bounds",
        "queued",
        "run_key",
        "start_bounds",
        "start_on_server",
        "starting",
        "sync",
    ],
    "limits.run_list": [
        "BAD_STATUS",
        "Cursor",
        "FINISHED_STATUSES",
        "HINT_MAX_LENGTH",
        "KEY_WITHOUT_BOUNDS",
        "Matches",
        "NO_WORKFLOWS",
        "RUNS_PER_PAGE",
        "RunFilter",
        "RunPage",
        "RunRow",
        "SEARCH_MATCHES",
        "SEARCH_MAX_LENGTH",
        "SEARCH_SCANNED",
        "STATUSES",
        "UNKNOWN_RUN",
        "UNKNOWN_WORKFLOW",
        "WAITING_AS_LIST",
        "cancel",
        "cancel_answer",
        "check_start",
        "get_run",
        "limit_names",
        "list_answer",
        "run_details",
        "run_row",
        "run_summary",
        "runs",
        "runs_page",
        "search_matches",
        "show_answer",
        "start",
        "start_answer",
        "workflow_hints",
        "workflow_names",
    ],
    "limits.run_selectors": [
        "GROUP_JOIN",
        "WAIT_STEP_PREFIX",
        "describe_waits",
        "get_run",
        "run_eta_text",
        "run_steps",
    ],
    "limits.run_values": [
        "BAD_JSON",
        "DEFAULT_LIST_SIZE",
        "FINISHED",
        "FINISHED_STATUSES",
        "INPUT_MAX_LENGTH",
        "INPUT_TOO_LONG",
        "MAX_LIST_SIZE",
        "NOT_AN_OBJECT",
        "NOT_TEXT",
        "RunsError",
        "TOO_DEEP",
        "UNKNOWN",
        "check_input",
        "parse_input",
    ],
    "limits.run_views": ["CANCELLED", "NOT_CANCELLED", "cancel_run", "home", "run_detail"],
    "limits.runs_api": [
        "BAD_SIZE",
        "FILTERS",
        "LIMITS_NOT_A_LIST",
        "NOT_TEXT",
        "NO_PERMISSION",
        "NO_WORKFLOW",
        "OPERATE_RUN",
        "START_FIELDS",
        "UNKNOWN_FIELD",
        "cancel",
        "run_detail",
        "run_list_view",
        "runs",
        "runs_api",
        "start",
    ],
    "limits.runs_api_urls": ["app_name", "urlpatterns"],
    "limits.runs_screen": [
        "CANCELLED",
        "FILTER_KEYS",
        "INPUT_HELP",
        "NEEDS_OPERATE_RUN",
        "NOT_CANCELLED",
        "OPERATE_RUN",
        "RUNS_CHANGED_EVENT",
        "STARTED",
        "StartRunForm",
        "WORKFLOW_REQUIRED",
        "cancel_run",
        "operator_required",
        "run_list_view",
        "start_run",
    ],
    "limits.runs": [
        "StepError",
        "Workflow",
        "WorkflowError",
        "cancel_run",
        "start_run",
        "start_runs",
        "step",
        "workflow",
    ],
}


def test_the_old_runs_paths_keep_every_public_name_they_had() -> None:
    """Issue 48 moved the runs surfaces into limits/runs/: each old module is the moved one, and a
    name that moved elsewhere (the box's place to limits.box, the wait's text to limits.workflow)
    is still there, so code written against the old path keeps working for a release."""
    missing = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for old, names in OLD_RUNS_NAMES.items():
            module = importlib.import_module(old)
            missing += [f"{old}.{name}" for name in names if not hasattr(module, name)]
    assert not missing, missing
