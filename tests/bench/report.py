"""The one markdown table the bench prints."""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    scenario: str
    measured: str
    reference: str = "—"
    ratio: str = "—"
    target: str = "—"
    met: str = "—"  # "yes" | "no" | "—"


def verdict(ok: bool) -> str:
    return "yes" if ok else "**no**"


def table(machine: dict[str, str], rows: list[Row], args: argparse.Namespace, seconds: float) -> str:
    flags = []
    if args.quick:
        flags.append("--quick")
    if args.processes != 8:
        flags.append(f"--processes {args.processes}")
    if args.hold:
        flags.append(f"--hold {args.hold:g}")
    if args.only != set(range(1, 15)):
        flags.append("--only " + ",".join(str(n) for n in sorted(args.only)))
    parts = getattr(args, "fair_parts", None)
    if 14 in args.only and parts is not None and parts != {"flood", "hot", "keys", "turns"}:
        flags.append("--fair-parts " + ",".join(p for p in ("flood", "hot", "keys", "turns") if p in parts))
    mode = " ".join(flags) or "full"
    head = (
        f"Machine: {machine['cores']} cores, PostgreSQL {machine['postgres']} "
        f"(synchronous_commit={machine['synchronous_commit']}, fsync={machine['fsync']}), "
        f"Python {machine['python']}; run: {mode}, {args.runs} run(s) of {args.seconds:g} s, "
        f"{args.handoffs} hand-offs, row scale {args.scale:g}, {args.workflow_runs} workflow runs, "
        f"{args.limited_runs} runs beside DBOS ({args.dbos_default_runs} at its default polling); "
        f"took {seconds:.0f} s; load average (1/5/15 min) {machine['load_before']} before, {machine['load']} after."
    )
    lines = [
        head,
        "",
        "| scenario | measured | reference (same run) | ratio | target | met |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {r.scenario} | {r.measured} | {r.reference} | {r.ratio} | {r.target} | {r.met} |" for r in rows]
    return "\n".join(lines)
