"""The Python names limits/sql/engine.sql's comments give as a rule's other home exist (issue 48).

engine.sql says beside each function and helper which Python code it mirrors (`grant._Grant`,
`keys.lapse`, `rules.clock_all`, `limits.engine.slots.release`, `config.box_ceiling`); when that
code moves (the grant went from keys.py to grant.py), a comment that still names the old place
sends a reader to nothing. Read from the source: every `<module>.<name>` and `<module>.<Class>.<name>`
whose module is one of limits' (limits/engine/*.py by its name, and limits/config.py,
the package limits/models/), every dotted `limits.<...>` path, and every `<path>.py` the file names.

Must never happen: a comment of engine.sql naming a module, function, class, method or constant
of limits that is not there.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

# one_database (tests/conftest.py): reads the source, never a database.
pytestmark = pytest.mark.one_database

ROOT = Path(__file__).resolve().parents[1]
ENGINE_SQL = ROOT / "limits" / "sql" / "engine.sql"
SHORT = {path.stem: path for path in (ROOT / "limits" / "engine").glob("*.py") if path.stem != "__init__"} | {
    "config": ROOT / "limits" / "config.py",
    "models": ROOT / "limits" / "models" / "__init__.py",
}
NAME = r"[A-Za-z_][A-Za-z0-9_]*"
SHORT_REFERENCE = re.compile(rf"(?<![\w.])(?:limits\.engine\.)?({'|'.join(SHORT)})\.({NAME})(?:\.({NAME}))?")
DOTTED = re.compile(rf"(?<![\w./])limits(?:\.{NAME})+")
PATH = re.compile(r"(?<![\w/])(?:[\w.-]+/)+[\w.-]+\.py\b")


def bound_names(body: list[ast.stmt]) -> set[str]:
    """The names a module's or a class's body defines or imports."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.TypeAlias):
            names.add(node.name.id)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


@cache
def definitions(path: Path) -> dict[str, set[str]]:
    """A module's top-level names, each with the names of its body if it is a class (else none)."""
    body = ast.parse(path.read_text()).body
    classes = {node.name: bound_names(node.body) for node in body if isinstance(node, ast.ClassDef)}
    found = {name: classes.get(name, set()) for name in bound_names(body)}
    if path.name == "__init__.py":  # a package (limits.models): its modules' classes, by the names it exports
        for module in path.parent.glob("*.py"):
            if module != path:
                found.update((name, members) for name, members in definitions(module).items() if members)
    return found


def comments() -> list[tuple[int, str]]:
    return [
        (number, line.split("--", 1)[1])
        for number, line in enumerate(ENGINE_SQL.read_text().splitlines(), 1)
        if "--" in line
    ]


def missing_short(module: str, name: str, attribute: str | None) -> str | None:
    found = definitions(SHORT[module])
    if name == "py":  # `keys.py`: a file, not a name
        return None
    if name not in found:
        return f"{module}.{name}"
    if attribute is not None and found[name] and attribute not in found[name]:
        return f"{module}.{name}.{attribute}"
    return None


def missing_dotted(dotted: str) -> str | None:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        module = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        if module.exists():
            rest = parts[cut:]
            if not rest:
                return None
            names = definitions(module)
            if rest[0] not in names or (len(rest) > 1 and names[rest[0]] and rest[1] not in names[rest[0]]):
                return dotted
            return None
    return dotted


def test_every_python_name_engine_sql_gives_as_a_home_exists() -> None:
    gone = []
    for number, text in comments():
        for match in SHORT_REFERENCE.finditer(text):
            name = missing_short(*match.groups())
            if name is not None:
                gone.append(f"line {number}: {name}")
        for match in DOTTED.finditer(text):
            name = missing_dotted(match.group(0).rstrip("."))
            if name is not None:
                gone.append(f"line {number}: {name}")
        for match in PATH.finditer(text):
            if not (ROOT / match.group(0)).exists():
                gone.append(f"line {number}: {match.group(0)}")
    assert gone == []


def test_the_check_sees_the_names_it_must_judge() -> None:
    """A guard on the guard: it finds the comments' references, and a name gone is caught."""
    texts = " ".join(text for _number, text in comments())
    assert SHORT_REFERENCE.search("-- grant._Grant._fair_stream").groups() == ("grant", "_Grant", "_fair_stream")
    assert "grant._Grant" in texts and "rules.clock_all" in texts and "limits.engine.slots.release" in texts
    assert missing_short("grant", "_Grant", "_fair_stream") is None
    assert missing_short("keys", "_Grant", None) == "keys._Grant"  # moved to grant.py (issue 48)
    assert missing_short("grant", "_Grant", "no_such_method") == "grant._Grant.no_such_method"
    assert missing_dotted("limits.engine.slots._previous_group_outcome") is not None
    assert missing_dotted("limits.engine.python._previous_group_outcome") is None
    assert missing_dotted("limits.sql.install") is None
    assert missing_short("models", "Limit", "room") is None  # a class of the package limits/models/
    assert missing_short("models", "Limit", "no_such_field") == "models.Limit.no_such_field"
