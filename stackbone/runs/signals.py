"""What the run layer tells the layers above it, without knowing them (limits/apps.py listens).

run_ended(sender=Run, run_id, status): a run completed, failed or was cancelled. Sent inside the
    transaction that ends it, so whatever a receiver changes commits (or rolls back) with it. A
    run cancelled while a worker executed it ends (and this is sent) once that worker stopped it,
    or its lease ran out (SPEC 2.5, 11.4: starts.cancel_run, endings.stop_cancelled).
find_stuck_waits(sender=Run, now): recovery asks which suspended runs should be woken although
    their wait's deadline has not passed (e.g. a slot was reserved for them but the wake was
    lost). Each receiver returns run ids: a list, or a queryset of one column (a subquery).
run_queued(sender=Run, run): a run with bounds (SPEC 11) was created queued, inside the transaction
    that creates it. A receiver takes its place in the bounds' queues and answers "start" (its
    bounds had room: the run starts as any run does) or "wait"; raising refuses the start (the
    run is not created); "ended" when it ended the run unstarted itself (skipped, SPEC 14:
    stackbone.runs.endings.end_unstarted).
run_starting(sender=Run, run): a worker is about to start a queued run that was woken, inside a
    transaction that holds the run's row lock. Each receiver answers "start" (its bounds are
    confirmed for the run), "wait" (not yet: the run goes back to waiting) or an error message
    (the run fails before its first step), or "ended" when it ended the run unstarted itself
    (stackbone.runs.endings.end_unstarted). Not sent for a queued run without bounds (one
    deferred to its start time, runtime.start_run_at): it starts.
"""

from django.dispatch import Signal

run_ended = Signal()
find_stuck_waits = Signal()
run_queued = Signal()
run_starting = Signal()
