"""Keeps example runs going against the demo limits, through start_run and a real worker:

- a call about every second (`place_call`); most end after 5-40 s (`call_ended` releases the
  slot from another run), one in ten never ends and is taken back by max hold (45 s);
- a partner session every 2 s (`open_session`, 10 s timeout), released after 3-15 s, so the
  5 sessions fill, a queue forms and some waits time out.
Arrivals pause while a queue is longer than 40, so the demo never runs away.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time

import django

django.setup()

from limits.models import Limit  # noqa: E402
from studio.models import Run  # noqa: E402
from studio.workflows import start_run  # noqa: E402

logger = logging.getLogger("studio.demo")
MAX_QUEUE = 40


def main() -> None:
    rng = random.Random()
    holding: dict[str, float | None] = {}  # run id -> seconds to hold its slot (None: never release)
    releases: list[tuple[float, str]] = []  # (when, slot id)
    next_call = next_session = time.monotonic()
    calls = 0
    print("demo: starting example runs against voice-calls and partner-api", flush=True)
    while True:
        now = time.monotonic()
        waiting = dict(
            Limit.objects.filter(name__in=["voice-calls", "partner-api"]).values_list("name", "waiting_count")
        )
        if now >= next_call and waiting.get("voice-calls", 0) < MAX_QUEUE:
            calls += 1
            run = start_run("place_call", {"call_id": f"demo-{calls}", "timeout": "2m", "demo": True})
            holding[run.id] = None if rng.random() < 0.1 else rng.uniform(5, 40)
            next_call = now + rng.uniform(0.6, 1.4)
        if now >= next_session and waiting.get("partner-api", 0) < MAX_QUEUE:
            run = start_run("open_session", {"label": f"session-{calls}", "timeout": "10s", "demo": True})
            holding[run.id] = rng.uniform(3, 15)
            next_session = now + 2
        finished = Run.objects.filter(id__in=list(holding), status__in=["completed", "failed", "cancelled"])
        for run_id, output in finished.values_list("id", "output"):
            hold = holding.pop(run_id)
            slot_id = (output or {}).get("slot_id")
            if slot_id and hold is not None:
                releases.append((now + hold, slot_id))
        for due, slot_id in [r for r in releases if r[0] <= now]:
            releases.remove((due, slot_id))
            start_run("call_ended", {"slot_id": slot_id, "demo": True})
        time.sleep(0.25)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
