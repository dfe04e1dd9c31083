"""Another installation as a backend (`--agent <id>`): the agents file that names it, and a
small HTTP client for its JSON API (limits.api). No Django here."""

from __future__ import annotations

import http.client
import json
import os
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from limits.cli.backend import (
    BoxChange,
    CapChange,
    Change,
    KeyChange,
    KeysView,
    OnFullChange,
    PauseChange,
    PoolChange,
    ShareChange,
    SlotsView,
    more_past_cut,
)
from limits.cli.errors import EXIT_NOT_FOUND, EXIT_USAGE, NO_BOX, UNKNOWN_LIMIT, UNKNOWN_SLOT, CliError, one_line

AGENTS_FILE_ENV = "STACKBONE_AGENTS_FILE"
AGENT_TIMEOUT_SECONDS = 15.0
API_PAGE_SIZE = 500


@dataclass(frozen=True, slots=True)
class Agent:
    id: str
    url: str
    token: str


def agents_file() -> Path:
    configured = os.environ.get(AGENTS_FILE_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path("~/.config").expanduser())
    return Path(base) / "stackbone" / "agents.toml"


def load_agent(agent_id: str) -> Agent:
    """Read one agent from the agents file::

    [agents.staging]
    url = "https://staging.example.com"
    token = "sbk_..."            # or: token_env = "STAGING_TOKEN"
    """
    path = agents_file()
    try:
        with path.open("rb") as handle:
            config = tomllib.load(handle)
    except FileNotFoundError:
        raise CliError(
            f"--agent {agent_id}: no agents file at {path} (add [agents.{agent_id}] with url and token, "
            f"or point {AGENTS_FILE_ENV} at one)",
            field="agent",
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise CliError(f"--agent {agent_id}: cannot read the agents file {path}: {error}", field="agent") from None
    agents = config.get("agents")
    entry = agents.get(agent_id) if isinstance(agents, dict) else None
    if not isinstance(entry, dict):
        known = ", ".join(sorted(agents)) if isinstance(agents, dict) and agents else "none"
        raise CliError(f"--agent {agent_id}: unknown agent in {path} (known: {known})", field="agent")
    url = entry.get("url")
    if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise CliError(f"--agent {agent_id}: 'url' in {path} must be an http:// or https:// address", field="agent")
    token = entry.get("token")
    if token is None and isinstance(entry.get("token_env"), str):
        token = os.environ.get(entry["token_env"])
    if not isinstance(token, str) or not token:
        raise CliError(
            f"--agent {agent_id}: no 'token' (or 'token_env' naming a set variable) in {path}", field="agent"
        )
    return Agent(agent_id, url.rstrip("/"), token)


class AgentBackend:
    """Another installation, through its JSON API (limits.api)."""

    def __init__(self, agent: Agent, *, timeout: float = AGENT_TIMEOUT_SECONDS) -> None:
        self.agent = agent
        self.timeout = timeout

    def limits(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every limit, or those of `kind`: asked of the API (?kind=) and checked here as well,
        for an installation whose API predates the filter (its limits then count as 'limit')."""
        query = "" if kind is None else "?kind=" + _quote(kind)
        limits: list[dict[str, Any]] = self._call("GET", query)["limits"]
        if kind is not None:
            limits = [limit for limit in limits if limit.get("kind", "limit") == kind]
        return limits

    def limit(self, name: str) -> dict[str, Any]:
        """`GET <name>/`: the limit's row."""
        answer: dict[str, Any] = self._call("GET", f"{_quote(name)}/", not_found=UNKNOWN_LIMIT.format(name=name))
        return answer

    def slots(self, name: str, cut: int | None, key: str | None = None) -> SlotsView:
        quoted = _quote(name)
        summary = self._call("GET", f"{quoted}/", not_found=UNKNOWN_LIMIT.format(name=name))
        query, key_row = "", None
        if key is not None:
            query = "&key=" + _quote(key)
            found = self._call("GET", f"{quoted}/keys/?size=1{query}", not_found=UNKNOWN_LIMIT.format(name=name))
            key_row = (found["keys"] or [_unused_key(summary, key)])[0]
        slots, more_slots, now = self._pages(f"{quoted}/slots/", "slots", cut, name, query)
        queue, more_queue, _ = self._pages(f"{quoted}/queue/", "queue", cut, name, query)
        return SlotsView(summary, slots, queue, more_slots, more_queue, now, key_row)

    def keys(self, name: str, cut: int | None, key: str | None = None, search: str = "") -> KeysView:
        quoted = _quote(name)
        query = "" if key is None else "&key=" + _quote(key)
        if search:
            query += "&search=" + _quote(search)
        summary = self._call("GET", f"{quoted}/", not_found=UNKNOWN_LIMIT.format(name=name))
        rows, more, _, first = self._walk(f"{quoted}/keys/", "keys", cut, name, query)
        return KeysView(summary, rows, more, first["no_key"], key, search)

    def slot(self, slot_id: str) -> dict[str, Any]:
        slot: dict[str, Any] = self._call(
            "GET", f"slots/{_quote(slot_id)}/", not_found=UNKNOWN_SLOT.format(slot_id=slot_id)
        )
        return slot

    def release(self, slot_id: str) -> tuple[bool, dict[str, Any]]:
        answer = self._call(
            "POST", f"slots/{_quote(slot_id)}/release/", {}, not_found=UNKNOWN_SLOT.format(slot_id=slot_id)
        )
        return bool(answer["released"]), answer["slot"]

    def set_capacity(self, name: str, value: int | str | None) -> Change:
        answer = self._call(
            "POST", f"{_quote(name)}/capacity/", {"capacity": value}, not_found=UNKNOWN_LIMIT.format(name=name)
        )
        return Change(answer["old"], answer["limit"])

    def set_max_hold(self, name: str, value: int | str | None) -> Change:
        answer = self._call(
            "POST", f"{_quote(name)}/max-hold/", {"max_hold": value}, not_found=UNKNOWN_LIMIT.format(name=name)
        )
        return Change(answer["old"], answer["limit"])

    def set_per_key(self, name: str, value: int | str | None, key: str | None = None) -> PoolChange:
        body: dict[str, object] = {"value": value}
        if key is not None:
            body["key"] = key
        answer = self._call("POST", f"{_quote(name)}/per-key/", body, not_found=UNKNOWN_LIMIT.format(name=name))
        return PoolChange(answer["old"], answer["limit"], answer.get("key"))

    def set_paused(self, name: str, paused: bool) -> PauseChange:
        """`POST <name>/pause/` or `<name>/resume/`: the state before and the limit after."""
        verb = "pause" if paused else "resume"
        answer = self._call("POST", f"{_quote(name)}/{verb}/", {}, not_found=UNKNOWN_LIMIT.format(name=name))
        return PauseChange(answer["old"], answer["limit"])

    def set_share(self, name: str, value: str | None) -> ShareChange:
        """`POST <name>/share/` {"value": "fifo" | "fair" | null}: the share before, the limit after."""
        answer = self._call(
            "POST", f"{_quote(name)}/share/", {"value": value}, not_found=UNKNOWN_LIMIT.format(name=name)
        )
        return ShareChange(answer["old"], answer["limit"])

    def set_on_full(self, name: str, value: str | None) -> OnFullChange:
        """`POST <name>/on-full/` {"value": "wait" | "skip" | "replace" | null}: on_full before, the limit after."""
        answer = self._call(
            "POST", f"{_quote(name)}/on-full/", {"value": value}, not_found=UNKNOWN_LIMIT.format(name=name)
        )
        return OnFullChange(answer["old"], answer["limit"])

    def set_max_waiting(self, name: str, value: int | str | None, *, per_key: bool) -> CapChange:
        """`POST <name>/max-waiting/` {"value": n | null, "per_key": bool}: the cap before, the limit after."""
        answer = self._call(
            "POST",
            f"{_quote(name)}/max-waiting/",
            {"value": value, "per_key": per_key},
            not_found=UNKNOWN_LIMIT.format(name=name),
        )
        return CapChange(answer["old"], answer["limit"])

    def set_key_field(self, name: str, field: str, value: int | str | None, key: str) -> KeyChange:
        """`POST <name>/weight/` or `<name>/min/` {"value": n | null, "key": K}: the value before,
        the limit and the key after."""
        answer = self._call(
            "POST", f"{_quote(name)}/{field}/", {"value": value, "key": key}, not_found=UNKNOWN_LIMIT.format(name=name)
        )
        return KeyChange(answer["old"], answer["limit"], answer["key"])

    def forget(self, name: str) -> dict[str, Any]:
        """`POST <name>/forget/`: the record of the removal (the shape of `forget --json`). A
        limit still declared or in use is a 409, exit 1 with the installation's message."""
        answer: dict[str, Any] = self._call(
            "POST", f"{_quote(name)}/forget/", {}, not_found=UNKNOWN_LIMIT.format(name=name)
        )
        return answer

    def box(self) -> dict[str, Any]:
        """`GET -/box/`: the box's run concurrency, as a limit row with its base and burst."""
        answer: dict[str, Any] = self._call("GET", "-/box/", not_found=NO_BOX)
        return answer

    def set_box(self, changes: dict[str, object]) -> BoxChange:
        """`POST -/box/` with the fields to change (null resets one): the figures before and the
        box after. A bad value is a 400 naming the field, exit 2 with the installation's message."""
        answer = self._call("POST", "-/box/", changes, not_found=NO_BOX)
        return BoxChange(answer["old"], answer["limit"])

    def workers(self) -> dict[str, Any]:
        """`GET -/workers/`: the other installation's workers (the shape of `stackbone workers --json`)."""
        answer: dict[str, Any] = self._call("GET", "-/workers/", not_found="no such API path: -/workers/")
        return answer

    def _pages(
        self, path: str, key: str, cut: int | None, name: str, query: str = ""
    ) -> tuple[list[dict[str, Any]], int, datetime]:
        """Follow the pages of a list until one row past the cut (or the end): the rows, how
        many more there are, and the server's clock (times are shown relative to it)."""
        rows, more, now, _ = self._walk(path, key, cut, name, query)
        return rows, more, now

    def _walk(
        self, path: str, key: str, cut: int | None, name: str, query: str = ""
    ) -> tuple[list[dict[str, Any]], int, datetime, dict[str, Any]]:
        """_pages, and the first page's answer as well (for what a list carries beside its rows)."""
        rows: list[dict[str, Any]] = []
        first: dict[str, Any] | None = None
        size = API_PAGE_SIZE if cut is None else min(API_PAGE_SIZE, cut + 1)
        page = 1
        while True:
            answer = self._call(
                "GET", f"{path}?page={page}&size={size}{query}", not_found=UNKNOWN_LIMIT.format(name=name)
            )
            first = first or answer
            rows.extend(answer[key])
            if not answer["has_next"] or (cut is not None and len(rows) > cut):
                more = more_past_cut(len(rows), answer["total"], cut)
                return rows[:cut], more, datetime.fromisoformat(answer["now"]), first
            page += 1

    def _call(
        self, method: str, path: str, body: object = None, *, not_found: str = "not found", api: str = "limits"
    ) -> Any:
        """One request to the agent's /api/<api>/ (`limits`, or `runs` for `stackbone runs --agent`)."""
        url = f"{self.agent.url}/api/{api}/{path}"
        request = urllib.request.Request(
            url,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={
                "Authorization": f"Bearer {self.agent.token}",
                "Accept": "application/json",
                "Content-Type": "application/json",
                "User-Agent": "stackbone-cli",
            },
        )
        where = f"agent {self.agent.id!r} ({self.agent.url})"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 (http(s) only)
                payload = response.read()
        except urllib.error.HTTPError as error:
            raise self._refusal(error, where, not_found) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as error:
            reason = getattr(error, "reason", None) or error
            raise CliError(f"cannot reach {where}: {one_line(str(reason))}", EXIT_NOT_FOUND) from None
        try:
            return json.loads(payload)
        except ValueError:
            raise CliError(
                f"{where} did not answer with JSON: is it a Stackbone installation?", EXIT_NOT_FOUND
            ) from None

    def _refusal(self, error: urllib.error.HTTPError, where: str, not_found: str) -> CliError:
        field: str | None = None
        try:
            body = json.loads(error.read())
            message = str(body.get("error") or "")
            field = body.get("field") if isinstance(body.get("field"), str) else None
        except (ValueError, AttributeError, OSError):
            message = ""
        if error.code == 401:
            return CliError(f"{where} refused the token: {message or 'unauthorized'}", EXIT_USAGE)
        if error.code == 403:
            return CliError(f"{where} refused: {message or 'forbidden'}", EXIT_USAGE)
        if error.code == 404:
            return CliError(message or not_found, EXIT_NOT_FOUND, field=field)
        if error.code == 400:
            return CliError(message or "bad request", EXIT_USAGE, field=field)
        if error.code == 409:  # refused as things stand (forget: still declared or in use)
            return CliError(message or f"{where} refused: conflict", EXIT_NOT_FOUND, field=field)
        return CliError(f"{where} answered {error.code} {error.reason}", EXIT_NOT_FOUND)


def _unused_key(limit: dict[str, Any], key: str) -> dict[str, Any]:
    """A key the other installation has no row for: an empty pool of the limit's per_key (as
    serializers.unused_key_summary)."""
    return {
        "key": key,
        "busy": 0,
        "reserved": 0,
        "in_use": 0,
        "waiting": 0,
        "pool": limit.get("per_key"),
        "pool_override": None,
        "pool_overridden": False,
        "weight": 1,
        "min": 0,
        "fair_share": None,
    }


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")
