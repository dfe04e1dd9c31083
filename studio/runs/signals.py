"""What the run layer tells the layers above it, without knowing them (limits/apps.py listens).

run_ended(sender=Run, run_id, status): a run completed, failed or was cancelled. Sent inside the
    transaction that ends it, so whatever a receiver changes commits (or rolls back) with it.
find_stuck_waits(sender=Run, now): recovery asks which suspended runs should be woken although
    their wait's deadline has not passed (e.g. a slot was reserved for them but the wake was
    lost). Each receiver returns run ids: a list, or a queryset of one column (a subquery).
"""

from django.dispatch import Signal

run_ended = Signal()
find_stuck_waits = Signal()
