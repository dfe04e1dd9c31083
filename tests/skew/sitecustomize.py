"""The skew injector: a process whose wall clock is off, as on a host with a broken NTP.

Put this folder (tests/skew) on the PYTHONPATH of ONE process, a Celery worker, with
`STACKBONE_TEST_SKEW_SECONDS=-600` (10 minutes behind) or `600` (ahead). Python imports
`sitecustomize` at interpreter start, before anything of the box: from then on time.time(),
time.time_ns(), datetime.now(), timezone.now(), time.gmtime/localtime/strftime and
clock_gettime(CLOCK_REALTIME) read the real time plus the skew, and keep ticking
(time_machine.travel(..., tick=True)). time.monotonic() and perf_counter() are untouched, so
Celery's timers and timeouts still work. A prefork pool's processes are forks of the worker and
inherit the skew (tests/skew/test_injector.py checks it, and each side-file line says its
process's skew: tests/chaos/records.py).

The real time stays readable in that process through `time_machine.escape_hatch` (the side files
of tests/chaos/records.py use it, so every process writes one clock: the machine's, which is the
database's when PostgreSQL runs on the same machine).

Without the variable, or with 0, this does nothing. Never set it for the test process itself:
the tests' own clock fixture (time_machine) would travel from a skewed start.
"""

from __future__ import annotations

import os
import sys
import time

SKEW_ENV = "STACKBONE_TEST_SKEW_SECONDS"


def skew_seconds() -> float:
    """The skew asked for through the environment (0.0: none)."""
    value = os.environ.get(SKEW_ENV, "").strip()
    return float(value) if value else 0.0


def start() -> float:
    """Move this process's wall clock by the skew asked for; return the skew applied."""
    skew = skew_seconds()
    if not skew:
        return 0.0
    from datetime import UTC, datetime, timedelta

    import time_machine

    time_machine.travel(datetime.now(UTC) + timedelta(seconds=skew), tick=True).start()
    time.time()  # time_machine's clock starts ticking at its first reading: now, not at the first use
    return skew


try:
    APPLIED = start()
except Exception as error:  # say so loudly: a worker that should be skewed but is not proves nothing
    print(f"tests/skew/sitecustomize.py: could not skew this process's clock: {error!r}", file=sys.stderr)
    raise
