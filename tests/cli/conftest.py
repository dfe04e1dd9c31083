"""Helpers for the CLI tests: run a verb in-process and get (exit code, stdout, stderr)."""

from __future__ import annotations

import io
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

from limits import cli
from tests.factories import declare


@dataclass
class Result:
    code: int
    out: str
    err: str


class Terminal(io.StringIO):
    """Typed answers on a terminal: a stdin that says it is a TTY."""

    def isatty(self) -> bool:
        return True


def run_cli(*argv: str, stdin: io.StringIO | None = None) -> Result:
    out, err = io.StringIO(), io.StringIO()
    streams = cli.Streams(stdin=stdin or io.StringIO(), stdout=out, stderr=err)
    code = cli.main(list(argv), streams=streams)
    return Result(code, out.getvalue(), err.getvalue())


def closed_port() -> int:
    """A local port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_agents(path: Path, agents: dict[str, dict[str, str]]) -> Path:
    lines = []
    for agent_id, fields in agents.items():
        lines.append(f"[agents.{agent_id}]")
        lines.extend(f'{key} = "{value}"' for key, value in fields.items())
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def calls():
    """voice-calls (capacity 2, max hold 45m): r1 and r2 hold busy slots, r3 and r4 wait."""
    declare(voice_calls={"capacity": 2, "max_hold": "45m"}, partner_api={"capacity": 5, "max_hold": "10m"})
    from limits.services import acquire

    slots = [acquire("voice-calls", run_id=f"r{n}", label=f"call-{n}").slot_id for n in (1, 2)]
    for n in (3, 4):
        acquire("voice-calls", run_id=f"r{n}", label=f"call-{n}", timeout="1h")
    return slots


def seed_tenants() -> None:
    """voice-calls (capacity 4, per_key 2, max hold 45m) and partner-api (capacity 5, no per_key):
    acme holds 2 (r1, r2) and r3 of acme waits for acme's full pool; globex holds 1 (r4); r5
    holds one without a key; then the total is full and r6 of globex waits."""
    declare(
        voice_calls={"capacity": 4, "max_hold": "45m", "per_key": 2},
        partner_api={"capacity": 5, "max_hold": "10m"},
    )
    from limits.services import acquire

    acquire("voice-calls", run_id="r1", key="acme", label="call-1")
    acquire("voice-calls", run_id="r2", key="acme", label="call-2")
    acquire("voice-calls", run_id="r3", key="acme", label="call-3", timeout="1h")
    acquire("voice-calls", run_id="r4", key="globex", label="call-4")
    acquire("voice-calls", run_id="r5", label="call-5")
    acquire("voice-calls", run_id="r6", key="globex", label="call-6", timeout="1h")


@pytest.fixture
def tenants() -> None:
    seed_tenants()


def seed_fair() -> None:
    """tenant-jobs (capacity 4, share fair, max hold 45m): acme holds all 4 (r1-r4) and two more
    of acme wait (r5, r6); r7 of globex, r8 of initech and r9 without a key wait. With every
    weight 1, the four holding or waiting (acme, globex, initech, no key) have a fair share of 1."""
    declare(tenant_jobs={"capacity": 4, "max_hold": "45m", "share": "fair"})
    from limits.services import acquire

    for n in (1, 2, 3, 4):
        acquire("tenant-jobs", run_id=f"r{n}", key="acme")
    for n, key in ((5, "acme"), (6, "acme"), (7, "globex"), (8, "initech"), (9, None)):
        acquire("tenant-jobs", run_id=f"r{n}", key=key, timeout="1h")


def seed_when_full() -> None:
    """SPEC 14: report-exports (capacity 1, max hold 30m, on_full skip): r1 holds it and r2 was
    skipped. partner-api (capacity 1, max hold 10m, max_waiting 2, max_waiting_per_key 1): p1
    holds it, p2 of acme and p4 of globex wait; p3 of acme was refused (acme's part of the queue
    was full) and p5 without a key (the queue was full)."""
    declare(
        report_exports={"capacity": 1, "max_hold": "30m", "on_full": "skip"},
        partner_api={"capacity": 1, "max_hold": "10m", "max_waiting": 2, "max_waiting_per_key": 1},
    )
    from limits.services import acquire

    acquire("report-exports", run_id="r1")
    assert acquire("report-exports", run_id="r2").state == "skipped"
    acquire("partner-api", run_id="p1")
    acquire("partner-api", run_id="p2", key="acme", timeout="1h")
    assert acquire("partner-api", run_id="p3", key="acme", timeout="1h").state == "refused"
    acquire("partner-api", run_id="p4", key="globex", timeout="1h")
    assert acquire("partner-api", run_id="p5", timeout="1h").state == "refused"
