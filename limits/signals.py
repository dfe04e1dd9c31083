from __future__ import annotations

from django.dispatch import Signal

# Sent after the transaction that changed their queue state commits, with `run_ids`: runs that were
# handed a reserved slot or whose wait timed out. The run layer connects to it to resume them.
runs_woken = Signal()
