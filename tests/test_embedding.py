"""Issue 29, item 3, and issue 45: the guide (docs/embedding.md, and docs/testing-your-workflows.md
for the tests), followed literally, gives a working project, with a database server or with none.

Once per run: a fresh virtual environment with this checkout pip-installed into it, with the
`testing` extra (what a user gets; the box's `studio` package is not in it). Then twice, each in a
folder of its own: `django-admin startproject mysite`, `startapp billing` and an app of the
project's own named `studio` (with a model and a workflow), every block of the guides marked
`file=... append|create` applied to its file (and those marked `only=sqlite` in the SQLite
variant only), the project's own pieces the guide tells a user to write (a workspace with one
keyed limit, a workflow using `with_limit(..., key=...)` in its own app) and its own choices.
Then, as real processes in that environment: migrate, the web server, a Celery worker and beat;
runs started over the new project's JSON API with a token, and by the installed `stackbone`
command in the project.

- PostgreSQL + Redis: a database and a key prefix of this test's own. Besides, Django's task API
  through the box (docs/django-tasks.md, issue 46): the guide's TASKS block names LimitsBackend
  (in both variants), and the project's own `@task` with a keyed limit (its own bound, 1 per
  tenant, and a slot of the limit its workflows use) is enqueued with `task.enqueue(...)` beside
  the workflow runs, run by the same worker, and read back with `get_result`.
- SQLite and the embedded broker, no server (the guide's `only=sqlite` block): besides, the
  installed `stackbone` command in the project (runs started, found by the key their slots were
  taken under after they finished, the workers with their pool, the limits; the same verbs as
  manage.py commands), outside any project (one line saying what to set, nothing written in the
  environment), and the project's own tests with the shipped pytest plugin.

Must never happen: more runs inside the keyed limit at once than its capacity, or than its
per-key pool for one key, read from two places (the step's own side file, and the slot history
rows through `limits verify` and their overlaps); two runs of the task for one tenant at once (its
bound's slot rows, `limits verify`); a run not completing; the Studio Limits screen
not rendering for an operator signed in through the project's own sign-in page; the project's own
`studio` app shadowed by anything of the package; `stackbone` acting on anything but the project
it runs in, or writing inside its own install.

The PostgreSQL variant needs PostgreSQL and Redis on 127.0.0.1 (CI starts both); without them it
skips, unless STACKBONE_EMBEDDING_REQUIRED=1 (CI) makes that a failure. The SQLite variant needs
nothing. It proves nothing that depends on the suite's database, so CI runs it once
(one_database). About 90 s for both on an idle machine (pip, once, 17 s; PostgreSQL 28 s; SQLite
42 s), 130 s beside the rest of the suite.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.cookiejar
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.one_database

ROOT = Path(__file__).resolve().parents[1]
GUIDES = (
    ROOT / "docs" / "embedding.md",
    ROOT / "docs" / "testing-your-workflows.md",
    ROOT / "docs" / "django-tasks.md",  # TASKS on LimitsBackend (issue 46)
)
# A guide block the test applies: ```python file=<path in the project> append|create [only=<variant>]
BLOCK = re.compile(
    r"^```(?:python|ini) file=(?P<path>\S+) (?P<how>append|create)(?: only=(?P<only>\w+))?\n(?P<code>.*?)^```$",
    re.M | re.S,
)
GUIDE_FILES = {
    "mysite/settings.py",
    "mysite/urls.py",
    "mysite/celery.py",
    "mysite/__init__.py",
    "studio/apps.py",
    "pytest.ini",
    "billing/test_workflows.py",
}
# What `pip install <checkout>` builds from; the box (studio/) too: pyproject.toml decides what ships.
PACKAGE = ("pyproject.toml", "README.md", "limits", "stackbone", "studio")

CAPACITY, PER_KEY = 3, 2
RUNS = {"acme": 5, "globex": 4}  # two keys: together their pools (2 + 2) are above the capacity
STEP_SECONDS = 0.6
TASK_RUNS = {"acme": 3, "globex": 2}  # django.tasks runs of billing.tasks.sync_tenant (PostgreSQL variant)
TASK_SECONDS = 0.4
TASK_BOUND = "workflow.billing.tasks.sync_tenant"  # the task's own bound: per_key 1
PASSWORD = "a-long-operator-password"
POSTGRES, SQLITE = "postgres", "sqlite"


def reachable(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def guide_blocks(variant: str | None = None) -> list[tuple[str, str, str]]:
    """The marked blocks of the guides, in order; with a variant, those of every variant and its own."""
    found = [m for guide in GUIDES for m in BLOCK.finditer(guide.read_text())]
    return [(m["path"], m["how"], m["code"]) for m in found if variant is None or m["only"] in (None, variant)]


def test_a_project_without_a_workspace_is_told_what_to_set(settings) -> None:
    from limits.checks import NO_WORKSPACE, check_workspace

    del settings.STACKBONE_WORKSPACE
    assert [(error.id, error.msg) for error in check_workspace()] == [("limits.E003", NO_WORKSPACE)]


def test_the_guide_marks_the_blocks_this_test_applies() -> None:
    """A guard on the guard: the guides' marked blocks are the files a project must change, and
    the no-server settings are the SQLite variant's only."""
    assert {path for path, _, _ in guide_blocks()} == GUIDE_FILES
    assert len(guide_blocks(SQLITE)) == len(guide_blocks(POSTGRES)) + 1
    assert any("sqlite_database(" in code for _, _, code in guide_blocks(SQLITE))


WORKSPACE = f"""\
from limits.config import define_workspace

workspace = define_workspace(limits={{
    "partner-api": {{"capacity": {CAPACITY}, "max_hold": "10m", "per_key": {PER_KEY}}},
}})
"""

WORKFLOWS = """\
import json
import time

from limits.runs import step, workflow
from limits.workflow import with_limit

SIDE_FILE = {side_file!r}


def note(*event):
    with open(SIDE_FILE, "a") as side:  # one short append per line: whole lines, never mixed
        side.write(json.dumps([*event, time.time()]) + "\\n")


@step
def fetch_invoices(tenant: str, n: int) -> dict:
    note("start", tenant, n)
    time.sleep({step_seconds})  # stands for the partner API call
    note("end", tenant, n)
    return {{"tenant": tenant, "n": n}}


@workflow
def sync_invoices(input: dict) -> dict:
    tenant, n = input["tenant"], input.get("n", 0)
    return with_limit("partner-api", lambda: fetch_invoices(tenant, n), label=f"{{tenant}}-{{n}}", key=tenant)
"""

# The project's own app named `studio`: a model of its own, and a workflow that reads it.
STUDIO_MODELS = """\
from django.db import models


class Note(models.Model):
    text = models.CharField(max_length=100)
"""

STUDIO_WORKFLOWS = """\
from limits.runs import step, workflow

from studio.models import Note


@step
def count_notes() -> int:
    return Note.objects.count()


@workflow
def count_studio_notes(input: dict) -> dict:
    return {"notes": count_notes(), "app": Note._meta.app_label}
"""

# The project's own choices, not the guide's: its apps, and on PostgreSQL its database and broker.
OWN_APPS = """
# --- this project's own: its apps ---
INSTALLED_APPS += ["billing", "studio"]
STACKBONE_WORKFLOWS += ["studio.workflows"]
"""

POSTGRES_SETTINGS = """
# --- this project's own: its database and its broker ---
DATABASES = {{
    "default": {{
        "ENGINE": "django.db.backends.postgresql",
        "NAME": {database!r},
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": "5432",
    }}
}}
CELERY_BROKER_URL = "redis://127.0.0.1:6379/0"
# Keys of this test's own on a Redis others may share (a box, another test run).
CELERY_BROKER_TRANSPORT_OPTIONS = {{"global_keyprefix": {prefix!r}}}
"""

PEAKS = """
import json
from limits.models import Slot
answer = {{}}
for name in {names!r}:
    events = []
    for granted, freed, key in Slot.objects.filter(limit__name=name).values_list("granted_at", "freed_at", "key"):
        events += [(granted, 1, key)] + ([(freed, -1, key)] if freed else [])
    total, per_key, peak, key_peak, slots = 0, {{}}, 0, 0, 0
    for _, change, key in sorted(events, key=lambda event: (event[0], event[1])):
        total += change
        per_key[key] = per_key.get(key, 0) + change
        peak, key_peak = max(peak, total), max(key_peak, per_key[key])
        slots += change > 0
    answer[name] = {{"peak": peak, "key_peak": key_peak, "slots": slots, "open": total}}
print(json.dumps(answer))
"""

# The project's own django.tasks task, declared as docs/django-tasks.md's step 3 declares it: its own
# bound (1 run per tenant) and a slot of the keyed limit its workflow runs share, keyed by tenant.
TASKS_MODULE = """import time

from django.tasks import task


@task(concurrency={{"total": 10, "per_key": 1}}, limits=["partner-api"], concurrency_key="tenant_id")
def sync_tenant(tenant_id: str, n: int = 0) -> dict:
    time.sleep({task_seconds})  # stands for the partner API call
    return {{"tenant": tenant_id, "n": n}}
"""

# Enqueued with Django's own API, by the project's own code (here its shell), not the box's.
ENQUEUE = f"""
import json
from billing.tasks import sync_tenant
ids = [sync_tenant.enqueue(tenant, n=n).id for tenant, count in {TASK_RUNS!r}.items() for n in range(count)]
print(json.dumps(ids))
"""

TASK_RESULTS = """
import json
from billing.tasks import sync_tenant
from stackbone.runs.models import Run
answer = []
for result_id in {ids!r}:
    result = sync_tenant.get_result(result_id)
    done = result.status == "SUCCESSFUL"
    run = Run.objects.get(id=result_id)
    answer.append([result.status, result.return_value if done else None, result.attempts, run.workflow,
                   run.concurrency_key, run.created_at.isoformat(), run.finished_at.isoformat() if done else None])
print(json.dumps(answer))
"""

OPERATOR = f"""
from django.contrib.auth.models import Permission, User
user = User.objects.create_user("ops", password={PASSWORD!r}, is_staff=True)
user.user_permissions.add(*Permission.objects.filter(codename__in=["operate_limit", "change_run"]))
"""


class Environment:
    """The fresh virtual environment with the checkout installed, shared by both variants."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.venv = folder / "venv"
        self.timings: list[tuple[str, float]] = []
        # Nothing of this test's process leaks in (its settings module, its state folder, a
        # PYTHONPATH): the project's processes see what a user's shell would.
        keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
        self.env = {k: v for k, v in os.environ.items() if k in keep or k.startswith("PIP_")}
        self.env["PATH"] = f"{self.venv / 'bin'}:{self.env.get('PATH', '/usr/bin:/bin')}"
        self.env["PYTHONUNBUFFERED"] = "1"

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def run(self, *args: str, cwd: Path, timeout: float = 120, code: int = 0) -> subprocess.CompletedProcess[str]:
        began = time.monotonic()
        done = subprocess.run(
            args, cwd=cwd, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )  # fmt: skip
        assert done.returncode == code, f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        self.timings.append(
            (" ".join(Path(arg).name if "/" in arg else arg for arg in args[:4]), time.monotonic() - began)
        )
        return done

    def install(self) -> float:
        began = time.monotonic()
        source = self.folder / "source"
        source.mkdir()
        for name in PACKAGE:  # the checkout's package, as `pip install <checkout>` builds it
            if (ROOT / name).is_dir():
                shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(ROOT / name, source / name)
        self.run(sys.executable, "-m", "venv", str(self.venv), cwd=self.folder)
        pip = (self.bin("python"), "-m", "pip", "install", "--quiet", f"{source}[testing]")
        self.run(*pip, cwd=self.folder, timeout=400)
        return time.monotonic() - began


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> Environment:
    made = Environment(tmp_path_factory.mktemp("embedding"))
    seconds = made.install()
    where = "import limits, stackbone; print(limits.__file__, stackbone.__file__)"
    installed = made.run(made.bin("python"), "-c", where, cwd=made.folder).stdout
    assert str(made.venv) in installed and str(ROOT) not in installed, installed
    # The box is not installed: a project's own `studio` is never shadowed by ours.
    no_box = made.run(made.bin("python"), "-c", "import studio", cwd=made.folder, code=1)
    assert "No module named 'studio'" in no_box.stderr
    print(f"\nembedding: installed in {seconds:.1f}s")
    made.timings.clear()  # each variant reports its own steps
    return made


class Project:
    """A new project in the environment, and the processes it runs (stopped at the end)."""

    def __init__(self, environment: Environment, folder: Path, variant: str) -> None:
        self.environment = environment
        self.variant = variant
        self.folder = folder
        self.dir = folder / "project"
        self.logs = folder / "logs"
        self.logs.mkdir()
        self.processes: list[tuple[str, subprocess.Popen[bytes]]] = []

    def bin(self, name: str) -> str:
        return self.environment.bin(name)

    def run(self, *args: str, cwd: Path | None = None, timeout: float = 120, code: int = 0) -> str:
        return self.environment.run(*args, cwd=cwd or self.dir, timeout=timeout, code=code).stdout

    def manage(self, *args: str, code: int = 0) -> str:
        return self.run(self.bin("python"), "manage.py", *args, code=code)

    def stackbone(self, *args: str, code: int = 0) -> str:
        """The installed `stackbone` command, in the project's folder, as a user types it."""
        return self.run(self.bin("stackbone"), *args, code=code)

    def start(self, name: str, *args: str) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        process = subprocess.Popen(
            args, cwd=self.dir, env=self.environment.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.processes.append((name, process))

    def stop(self) -> None:
        for _, process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for _, process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)

    def tail(self) -> str:
        return "\n".join(
            f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-40:])
            for path in sorted(self.logs.glob("*.log"))
        )


@pytest.fixture
def services() -> None:
    if reachable(5432) and reachable(6379):
        return
    if os.environ.get("STACKBONE_EMBEDDING_REQUIRED") == "1":
        pytest.fail("PostgreSQL (127.0.0.1:5432) and Redis (127.0.0.1:6379) are required (CI starts both)")
    pytest.skip("needs PostgreSQL on 127.0.0.1:5432 and Redis on 127.0.0.1:6379")


@pytest.fixture
def database(services: None) -> Iterator[str]:
    import psycopg

    name = f"stackbone_embed_{uuid.uuid4().hex[:8]}"
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def redis_prefix(services: None) -> Iterator[str]:
    import redis

    prefix = f"stackbone-embed-{uuid.uuid4().hex[:8]}:"
    yield prefix
    client = redis.Redis(host="127.0.0.1", port=6379, socket_timeout=5)
    with contextlib.suppress(redis.RedisError):
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)


@contextlib.contextmanager
def running(environment: Environment, folder: Path, variant: str) -> Iterator[Project]:
    made = Project(environment, folder, variant)
    try:
        yield made
    finally:
        made.stop()


class Browser:
    """An HTTP client with cookies (a signed-in session), over the real server."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def request(self, path: str, data: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> Any:
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        request = urllib.request.Request(self.base + path, data=body, headers=headers or {})
        return self.opener.open(request, timeout=30)


def api(base: str, token: str, path: str, payload: dict[str, Any] | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    body = None
    if payload is not None:
        body = json.dumps(payload).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(base + path, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def wait_for_server(base: str, project: Project, deadline: float) -> None:
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(base + "/admin/login/", timeout=2).close()
            return
        time.sleep(0.2)
    pytest.fail(f"the web server did not answer\n{project.tail()}")


def peaks(events: list[list[Any]]) -> tuple[int, int]:
    """The most steps running at once, overall and for one key, from the side file."""
    total, per_key, peak, key_peak = 0, dict[str, int](), 0, 0
    for kind, tenant, _, _ in sorted(events, key=lambda event: (event[3], event[0] == "start")):
        change = 1 if kind == "start" else -1
        total += change
        per_key[tenant] = per_key.get(tenant, 0) + change
        peak, key_peak = max(peak, total), max(key_peak, per_key[tenant])
    return peak, key_peak


def make_project(project: Project, own_settings: str) -> Path:
    """startproject, the apps, every guide block of the variant, the project's own files; the
    side file its workflow's steps write to."""
    project.run(project.bin("django-admin"), "startproject", "mysite", str(project.dir), cwd=project.folder)
    project.manage("startapp", "billing")
    project.manage("startapp", "studio")
    for path, how, code in guide_blocks(project.variant):
        target = project.dir / path
        if how == "create":
            target.write_text(code)
        else:
            target.write_text(target.read_text() + "\n" + code)
    with (project.dir / "mysite" / "settings.py").open("a") as settings:
        settings.write(OWN_APPS + own_settings)
    side_file = project.folder / "steps.jsonl"
    (project.dir / "billing" / "workspace.py").write_text(WORKSPACE)
    (project.dir / "billing" / "workflows.py").write_text(
        WORKFLOWS.format(side_file=str(side_file), step_seconds=STEP_SECONDS)
    )
    (project.dir / "billing" / "tasks.py").write_text(TASKS_MODULE.format(task_seconds=TASK_SECONDS))
    (project.dir / "studio" / "models.py").write_text(STUDIO_MODELS)
    (project.dir / "studio" / "workflows.py").write_text(STUDIO_WORKFLOWS)
    project.manage("makemigrations", "mysite_studio", "-v", "0")
    return side_file


def start_the_project(project: Project, setup: str = "") -> tuple[str, str, str]:
    """check, migrate, an operator (and `setup`, in the same shell: what it prints is returned) and a
    token; the web server, a worker and beat. (base, token, printed)"""
    project.manage("check")
    project.manage("migrate", "--no-input")
    printed = project.manage("shell", "-v", "0", "-c", OPERATOR + setup)
    token = project.manage("limits", "token", "create", "ops").strip()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    project.start("web", project.bin("python"), "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}")
    celery = project.bin("celery")
    project.start("worker", celery, "-A", "mysite", "worker", "--concurrency=4", "--loglevel=INFO", "-n", "embed@%h")
    beat_schedule = str(project.folder / "celerybeat-schedule")
    project.start("beat", celery, "-A", "mysite", "beat", "--loglevel=INFO", "-s", beat_schedule)
    wait_for_server(base, project, time.monotonic() + 30)
    return base, token, printed


def start_runs(base: str, token: str, skip: int = 0) -> list[str]:
    """The keyed runs over the new project's API, with the operator's token (`skip`: the first
    ones, started otherwise)."""
    run_ids = []
    for tenant, count in RUNS.items():
        for n in range(count):
            if skip:
                skip -= 1
                continue
            status, answer = api(
                base, token, "/api/runs/", {"workflow": "sync_invoices", "input": {"tenant": tenant, "n": n}}
            )
            assert status == 201, answer
            run_ids.append(answer["id"])
    return run_ids


def wait_for_runs(project: Project, base: str, token: str, run_ids: list[str]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        status, answer = api(base, token, "/api/runs/?size=100")
        assert status == 200, answer
        statuses = {run["id"]: run["status"] for run in answer["runs"]}
        if all(statuses.get(run_id) in ("completed", "failed", "cancelled") for run_id in run_ids):
            break
        time.sleep(0.5)
    assert [statuses.get(run_id) for run_id in run_ids] == ["completed"] * len(run_ids), project.tail()


def check_within_the_limit(project: Project, side_file: Path, run_ids: list[str], task_ids: Sequence[str] = ()) -> None:
    """Within the limit, from the step's own side file, and from the slot history rows: the
    engine's own proof (every limit), and their overlaps; `task_ids`, the runs of the project's
    task, took slots of it too (check_tasks, from the same shell)."""
    events = [json.loads(line) for line in side_file.read_text().splitlines()]
    assert sorted((tenant, n) for kind, tenant, n, _ in events if kind == "end") == sorted(
        (tenant, n) for tenant, count in RUNS.items() for n in range(count)
    )
    peak, key_peak = peaks(events)
    assert peak <= CAPACITY and key_peak <= PER_KEY, (peak, key_peak)
    assert peak >= 2, "the runs never ran side by side: the test would prove nothing"
    project.manage("limits", "verify")
    script = PEAKS.format(names=["partner-api", TASK_BOUND]) + (TASK_RESULTS.format(ids=task_ids) if task_ids else "")
    found, *results = map(json.loads, project.manage("shell", "-v", "0", "-c", script).splitlines())
    rows = found["partner-api"]
    assert rows["slots"] == len(run_ids) + len(task_ids) and rows["open"] == 0, rows
    assert rows["peak"] <= CAPACITY and rows["key_peak"] <= PER_KEY, rows
    if task_ids:
        check_tasks(task_ids, results[0], found[TASK_BOUND])


def check_tasks(task_ids: Sequence[str], results: list[list[Any]], bound: dict[str, int]) -> None:
    """The task runs: SUCCESSFUL with their return values (get_result, Django's API), one run of
    the task per tenant at once (its bound's slot rows), though each tenant's were all enqueued
    before its first one finished, so the bound held them back."""
    expected = [(tenant, n) for tenant, count in TASK_RUNS.items() for n in range(count)]
    assert [row[:5] for row in results] == [
        ["SUCCESSFUL", {"tenant": tenant, "n": n}, 1, "billing.tasks.sync_tenant", tenant] for tenant, n in expected
    ], results
    for tenant in TASK_RUNS:
        own = [row for row, (key, _) in zip(results, expected, strict=True) if key == tenant]
        last_enqueued = max(dt.datetime.fromisoformat(row[5]) for row in own)
        assert last_enqueued < min(dt.datetime.fromisoformat(row[6]) for row in own), f"{tenant}'s never waited"
    assert bound["slots"] == len(task_ids) and bound["open"] == 0, bound
    assert bound["key_peak"] == 1, bound


def check_studio(base: str, run_id: str) -> None:
    """The Studio Limits screen, for the operator signed in through the project's sign-in page."""
    browser = Browser(base)
    page = browser.request("/studio/limits/")
    assert "/admin/login/" in page.url, "Studio let an anonymous visitor in"
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.read().decode())
    assert csrf, "no sign-in form"
    form = {"csrfmiddlewaretoken": csrf[1], "username": "ops", "password": PASSWORD, "next": "/studio/limits/"}
    page = browser.request(page.url.removeprefix(base), form)
    html = page.read().decode()
    assert page.status == 200 and page.url == base + "/studio/limits/", page.url
    assert "partner-api" in html and 'href="/static/studio/studio.css"' in html, html[:2000]
    assert browser.request("/static/studio/studio.css").status == 200
    assert "partner-api" in browser.request("/studio/limits/partner-api/").read().decode()
    assert run_id in browser.request("/studio/runs/").read().decode()


def wait_for_the_sweep(project: Project) -> None:
    """Beat: the sweep's first pass (every 15 s) is recorded in the new project's database."""
    sweep_seen = (
        "from limits.models import SweepState; print(SweepState.objects.filter(last_run_at__isnull=False).exists())"
    )
    deadline = time.monotonic() + 40
    while project.manage("shell", "-v", "0", "-c", sweep_seen).strip() != "True":
        assert time.monotonic() < deadline, f"beat's sweep never ran\n{project.tail()}"
        time.sleep(1)


def report(environment: Environment, variant: str, started: float) -> None:
    steps = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in environment.timings if seconds > 1)
    environment.timings.clear()
    print(f"\nembedding ({variant}): all in {time.monotonic() - started:.1f}s ({steps})")


def test_a_new_project_on_postgresql_and_redis_runs_keyed_workflows_within_their_limit(
    environment: Environment, tmp_path: Path, database: str, redis_prefix: str
) -> None:
    started = time.monotonic()
    with running(environment, tmp_path, POSTGRES) as project:
        side_file = make_project(project, POSTGRES_SETTINGS.format(database=database, prefix=redis_prefix))
        # Django's task API in the project (enqueued by its own shell before its worker starts),
        # beside the workflow runs: the same worker, the same limit.
        base, token, printed = start_the_project(project, ENQUEUE)
        task_ids = json.loads(printed)
        run_ids = start_runs(base, token)
        wait_for_runs(project, base, token, run_ids + task_ids)
        status, detail = api(base, token, f"/api/runs/{run_ids[0]}/")
        assert status == 200 and detail["output"] == {"tenant": "acme", "n": 0}, detail
        assert detail["keys"] == ["acme"], detail  # the key its with_limit slot was taken under
        check_within_the_limit(project, side_file, run_ids, task_ids)
        check_studio(base, run_ids[0])
        wait_for_the_sweep(project)
    report(environment, POSTGRES, started)


def test_a_new_project_on_sqlite_with_no_server_runs_its_workflows_its_command_and_its_tests(
    environment: Environment, tmp_path: Path
) -> None:
    started = time.monotonic()
    marker = tmp_path / "before-the-project"
    marker.touch()
    with running(environment, tmp_path, SQLITE) as project:
        side_file = make_project(project, "")
        base, token, _ = start_the_project(project)

        # The installed command, in the project's folder: the first run, then the others over the API.
        first = project.stackbone("runs", "start", "sync_invoices", "--input", '{"tenant": "acme", "n": 0}').strip()
        run_ids = [first, *start_runs(base, token, skip=1)]
        notes = project.stackbone("runs", "start", "count_studio_notes").strip()
        wait_for_runs(project, base, token, [*run_ids, notes])
        shown = json.loads(project.stackbone("runs", "show", notes, "--json"))
        assert shown["output"] == {"notes": 0, "app": "mysite_studio"}  # the project's own `studio`
        check_within_the_limit(project, side_file, run_ids)

        # Finished runs, found by the key their with_limit slot was taken under (none has a
        # concurrency key: sync_invoices caps no runs), by the command and by manage.py.
        acme = set(run_ids[: RUNS["acme"]])
        listed = json.loads(project.stackbone("runs", "list", "--key", "acme", "--json"))["runs"]
        assert {run["id"] for run in listed} == acme and {run["status"] for run in listed} == {"completed"}
        by_manage = json.loads(project.manage("runs", "list", "--key", "globex", "--json"))
        assert {run["id"] for run in by_manage["runs"]} == set(run_ids) - acme
        limits = json.loads(project.stackbone("limits", "list", "--json"))
        assert [(limit["name"], limit["capacity"]) for limit in limits] == [("partner-api", CAPACITY)]
        found = json.loads(project.manage("workers", "--json"))
        assert [(w["name"].split("@")[0], w["pool"], w["concurrency"]) for w in found["workers"]] == [
            ("embed", "prefork", 4)
        ]

        # Outside any project: what to set, in one line; nothing written, in the environment least of all.
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        outside = environment.run(project.bin("stackbone"), "limits", "list", cwd=elsewhere, code=2)
        assert outside.stderr.startswith("error: no Django project here") and outside.stderr.count("\n") == 1
        assert list(elsewhere.iterdir()) == []
        written = [
            path
            for path in environment.venv.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.stat().st_mtime > marker.stat().st_mtime
        ]
        assert written == [], written

        check_studio(base, run_ids[0])
        # The project's own tests, with the shipped plugin (docs/testing-your-workflows.md).
        tests = project.run(project.bin("python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", timeout=300)
        assert re.search(r"\b3 passed\b", tests), tests
        wait_for_the_sweep(project)
    report(environment, SQLITE, started)
