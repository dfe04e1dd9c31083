"""`stackbone dev --reset-demo`: clear what the live demo left behind (issue: leaving the demo, its
runs still held `voice-calls` under the workspace's max hold).

The demo's runs are the ones studio.demo started: input marked `"demo": true` (and, from before
the mark, `place_call` with a `demo-` call id, `open_session` with a `session-` label, and the
`call_ended` runs that released their slots). Each unfinished one is cancelled (it leaves every
queue it waits in, frees its reservations and the `with_limits` slots tied to it), each busy slot
it still holds is released as an operator release (an audit event by `stackbone dev
--reset-demo`; the capacity goes to the next run waiting), and then the runs, their steps, slots
and queue entries are deleted. Nothing of any other run is touched; the demo's limits stay (as
undeclared limits, if your workspace does not declare them).
"""

from __future__ import annotations

from dataclasses import dataclass

ACTOR = "stackbone dev --reset-demo"
DEMO_WORKFLOWS = (
    "place_call",
    "open_session",
    "partner_call",
    "call_ended",
    "sync_tenant",
    "partner_export",
    "tenant_job",
    "refresh_report",
    "rebuild_search_index",
    "deploy_branch",
    "send_digest",
    "refresh_account",
)


@dataclass
class ResetReport:
    runs: int = 0
    cancelled: int = 0
    released: int = 0
    slots: int = 0
    queue_entries: int = 0

    def __str__(self) -> str:
        if not self.runs:
            return "no demo data to clear"
        return (
            f"cleared the demo: {self.runs} runs ({self.cancelled} cancelled), {self.released} busy slots released, "
            f"{self.slots} slots and {self.queue_entries} queue entries deleted"
        )


def demo_run_ids() -> list[str]:
    from django.db.models import Q

    from limits.models import Slot
    from stackbone.runs.models import Run

    marked = Q(input__demo=True)
    legacy = Q(workflow="place_call", input__call_id__startswith="demo-") | Q(
        workflow="open_session", input__label__startswith="session-"
    )
    ids = set(Run.objects.filter(workflow__in=DEMO_WORKFLOWS).filter(marked | legacy).values_list("id", flat=True))
    demo_slots = set(Slot.objects.filter(run_id__in=ids).values_list("id", flat=True))
    for run_id, slot_id in Run.objects.filter(workflow="call_ended").values_list("id", "input__slot_id"):
        if slot_id in demo_slots:
            ids.add(run_id)
    return sorted(ids)


def reset_demo() -> ResetReport:
    from django.db import transaction

    from limits import services
    from limits.models import QueueEntry, Slot
    from stackbone.runs.models import Run
    from stackbone.runs.runtime import cancel_run

    report = ResetReport()
    run_ids = demo_run_ids()
    report.runs = len(run_ids)
    for run_id in run_ids:
        report.cancelled += cancel_run(run_id)
    for slot_id in Slot.objects.filter(run_id__in=run_ids, state=Slot.State.BUSY).values_list("id", flat=True):
        report.released += services.release(slot_id, actor=ACTOR)
    with transaction.atomic():
        # A demo run's slot freed, queue entries finished: history rows only, the limits' counters
        # count live rows and stay right.
        live = Slot.objects.filter(run_id__in=run_ids, state__in=[Slot.State.BUSY, Slot.State.RESERVED])
        waiting = QueueEntry.objects.filter(run_id__in=run_ids, state=QueueEntry.State.WAITING)
        if live.exists() or waiting.exists():  # a run of the demo got a slot or queued meanwhile: again
            raise RuntimeError("demo runs still hold slots; run --reset-demo again with the box stopped")
        # History rows only, by their states: rows that never move (on PostgreSQL a live row moves
        # to the history partition as it ends, and a delete waiting for it would fail).
        report.slots = (
            Slot.objects.filter(run_id__in=run_ids)
            .exclude(state__in=[Slot.State.BUSY, Slot.State.RESERVED])
            .delete()[0]
        )
        report.queue_entries = (
            QueueEntry.objects.filter(run_id__in=run_ids).exclude(state=QueueEntry.State.WAITING).delete()[0]
        )
        Run.objects.filter(id__in=run_ids).delete()
    return report


if __name__ == "__main__":
    import django

    django.setup()
    print(reset_demo(), flush=True)
