"""Every rule the code, tests and docs cite is one docs/rules.md defines (issue 48).

A citation is "SPEC" and the numbers after it: a rule (`SPEC 10.4`), a section (`SPEC 12`), a list
or a range, each number of it (`SPEC 9.4, 9.5 and 10`, `SPEC 2.2/3.5`, `SPEC 10.2-10.4`, `SPEC
sections 2-5`), also wrapped onto the next line (a `#` or `--` comment going on), and rules in
brackets right after one (`SPEC 13.4 (10.4)`). docs/rules.md defines a section by its heading
`## n. Title` and a rule by `### n.m Title`; each rule has a "Where:" paragraph naming its homes: a
path in backquotes, and the names in brackets after it (`limits/engine/keys.py` (`Pools`, `join`)).

Must never happen: a citation, in limits/, stackbone/, studio/, tests/ (.py, .html, .sql, .md),
docs/ or README.md, of a number docs/rules.md does not define; a rule of docs/rules.md outside its
section, out of order, or without its "Where:"; a home there (a path, a name in brackets after
it) that the tree no longer has. Read from the source: no database, well under a second.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path

import pytest

# one_database (tests/conftest.py): reads the source, never a database.
pytestmark = pytest.mark.one_database

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "docs" / "rules.md"
SCANNED = ("limits", "stackbone", "studio", "tests", "docs")
SUFFIXES = frozenset({".py", ".html", ".sql", ".md"})
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", ".venv"})

NUMBER = r"\d+(?:\.\d+)?"
# The end of a line inside a citation: the next line may go on in a comment (#, --, *, {#).
WRAP = r"(?:[ \t]*\n[ \t]*(?:\{\#|\#|--|\*)?)?[ \t]*"
SEPARATOR = rf"[ \t]*(?:,|/|-|–|\band\b|\bor\b){WRAP}"
NUMBERS = rf"{NUMBER}(?:{SEPARATOR}{NUMBER})*"
RULE_NUMBERS = r"\d+\.\d+(?:[ \t]*(?:,|\band\b)[ \t]*\d+\.\d+)*"
# No \b before SPEC: a pattern that begins with a literal is ten times faster; citations() looks
# at the character before instead (BAD_KEY_SPEC is no citation).
CITATION = re.compile(rf"SPEC(?:'s)?{WRAP}(?:sections?[ \t]+)?({NUMBERS})(?:[ \t]*\(({RULE_NUMBERS})\))?")
RANGE = re.compile(rf"({NUMBER})\s*[-–]\s*({NUMBER})")
LONGEST_RANGE = 20  # a range wider than this is read as its two ends

SECTION_HEADING = re.compile(r"^## (\d+)\. \S", re.M)
RULE_HEADING = re.compile(r"^### (\d+)\.(\d+) \S", re.M)
CODE = re.compile(r"`([^`\n]+)`")
HOME = re.compile(r"`([\w./-]+)`\s*\(([^()]*)\)")
PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)+(?:\.(?:py|sql|html|md)|/)")
NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def scanned_files() -> Iterator[Path]:
    yield ROOT / "README.md"
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and not SKIPPED_DIRS.intersection(path.parts):
                yield path


def numbers_of(cited: str) -> list[str]:
    """Each number a citation's numbers name, a range's included ("10.2-10.4": 10.2, 10.3, 10.4)."""
    found: list[str] = []
    for part in re.findall(rf"{NUMBER}\s*[-–]\s*{NUMBER}|{NUMBER}", cited):
        ends = RANGE.fullmatch(part)
        if ends is None:
            found.append(part)
            continue
        first, last = ends.groups()
        found.extend(_spanned(first, last))
    return found


def _spanned(first: str, last: str) -> list[str]:
    (a, _, b), (c, _, d) = first.partition("."), last.partition(".")
    if b and d and a == c and 0 <= int(d) - int(b) <= LONGEST_RANGE:
        return [f"{a}.{n}" for n in range(int(b), int(d) + 1)]
    if not b and not d and 0 <= int(c) - int(a) <= LONGEST_RANGE:
        return [str(n) for n in range(int(a), int(c) + 1)]
    return [first, last]


def citations(text: str) -> Iterator[tuple[int, str, str]]:
    """(line, the citation as written, one number it names) for each number of each citation."""
    starts: list[int] | None = None
    for match in CITATION.finditer(text):
        if match.start() and (text[match.start() - 1].isalnum() or text[match.start() - 1] == "_"):
            continue
        if starts is None:
            starts = [newline.start() for newline in re.finditer("\n", text)]
        line = bisect_right(starts, match.start() - 1) + 1
        written = " ".join(match.group(0).split())
        for group in match.groups():
            for number in numbers_of(group or ""):
                yield line, written, number


def defined() -> set[str]:
    text = RULES.read_text(encoding="utf-8")
    sections = set(SECTION_HEADING.findall(text))
    rules = {f"{section}.{rule}" for section, rule in RULE_HEADING.findall(text)}
    return sections | rules


def test_the_forms_of_a_citation_are_read() -> None:
    def read(text: str) -> list[str]:
        return [number for _, _, number in citations(text)]

    assert read("(SPEC 13.2)") == ["13.2"]
    assert read("SPEC 12: the box") == ["12"]
    assert read("SPEC 9.4, 9.5 and 10 in the API") == ["9.4", "9.5", "10"]
    assert read("SPEC 2.2-2.4, 3.1): a request") == ["2.2", "2.3", "2.4", "3.1"]
    assert read("SPEC sections 2-5") == ["2", "3", "4", "5"]
    assert read("SPEC sections 2 and 3") == ["2", "3"]
    assert read("breaks SPEC 2.2/3.5.") == ["2.2", "3.5"]
    assert read("with a key and/or several limits (SPEC 9,\n-- 10)") == ["9", "10"]
    assert read("reset either with None (SPEC\n    12.5)") == ["12.5"]
    assert read("SPEC 13.4 (10.4): owed first") == ["13.4", "10.4"]
    assert read("SPEC 13.2 (2026-12-06)") == ["13.2"]
    assert read("the SPEC's reservation, BAD_KEY_SPEC, SPEC = (") == []


def test_every_cited_rule_is_defined_in_docs_rules_md() -> None:
    known = defined()
    assert known, "docs/rules.md defines no section or rule"
    unknown = []
    for path in scanned_files():
        text = path.read_text(encoding="utf-8")
        if "SPEC" not in text:
            continue
        for line, written, number in citations(text):
            if number not in known:
                unknown.append(f"{path.relative_to(ROOT)}:{line}: {written!r} cites {number}")
    assert not unknown, "cited, but not a rule or section of docs/rules.md:\n" + "\n".join(unknown)


def test_each_rule_sits_in_its_section_in_order_with_its_homes() -> None:
    text = RULES.read_text(encoding="utf-8")
    problems = []
    section, last = "", 0
    for heading in re.finditer(r"^(##|###) (\d+)\.(\d*) .*$", text, re.M):
        level, major, minor = heading.groups()
        if level == "##":
            section, last = major, 0
            continue
        if major != section or int(minor) != last + 1:
            problems.append(f"{heading.group(0)!r}: after rule {section}.{last}")
        last = int(minor)
        body = text[heading.end() : _next_heading(text, heading.end())]
        if not re.search(r"^Where: \S", body, re.M):
            problems.append(f"{heading.group(0)!r}: no 'Where:' line")
    assert not problems, "docs/rules.md:\n" + "\n".join(problems)


def _next_heading(text: str, start: int) -> int:
    found = re.compile(r"^#{2,3} ", re.M).search(text, start)
    return found.start() if found else len(text)


def test_every_home_named_in_docs_rules_md_exists() -> None:
    text = RULES.read_text(encoding="utf-8")
    words: dict[str, set[str]] = {}
    missing = []
    for where in re.finditer(r"^Where: .*?(?=\n\n|\Z)", text, re.M | re.S):
        paragraph = where.group(0)
        for path in (span for span in CODE.findall(paragraph) if PATH.fullmatch(span)):
            if not (ROOT / path).exists():
                missing.append(f"{path}: no such file")
        for path, names in HOME.findall(paragraph):
            if not PATH.fullmatch(path) or not (ROOT / path).is_file():
                continue
            if path not in words:
                words[path] = set(re.findall(r"\w+", (ROOT / path).read_text(encoding="utf-8")))
            for name in (span for span in CODE.findall(names) if NAME.fullmatch(span)):
                absent = [part for part in name.split(".") if part not in words[path]]
                if absent:
                    missing.append(f"{path}: no {name!r}")
    assert not missing, "docs/rules.md names homes the tree does not have:\n" + "\n".join(missing)
