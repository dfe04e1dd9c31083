"""Prove from the rows alone that the engine kept its promises (`manage.py limits verify`).

The engine keeps freed slots and finished queue entries as history (until
STACKBONE_HISTORY_RETENTION), and an audit event, with `capacity_after`, for every capacity
change and sync. From those rows this module checks, per limit:

a. capacity: no grant brought reserved + busy above the capacity in force at that instant
   (lowering capacity takes no slot back, so the level may stay above a lowered capacity until
   slots free; only a grant can break the rule);
b. queue order: a slot granted from the queue passed over no entry with a smaller position that
   was still waiting with its deadline not yet passed; a slot granted at once (no queue entry)
   was granted while no run waited;
c. no acquire call (request) was granted twice: its slots never overlap, and at most one was
   ever confirmed; it queued again only after a reservation that lapsed or was released;
d. the counters on the limit row equal its live rows; a slot granted from the queue names an
   entry of the limit's queue that no other slot names;
e. a slot tied to its run (with_limit, SPEC 2.5) is not busy or reserved once that run ended;
f. keys (SPEC 9): no grant brought a key pool above its size (checked while no per-key change
   was audited for the limit: the sizes of the past are not kept), the pool counters equal the
   rows and each pool's head is the position of its oldest waiting entry (where a fair grant
   finds the key), and within one key grants follow arrival order (across keys an older entry of another
   key may wait: its pool was full);
g. groups (SPEC 10): every grant of an acquisition of several limits gave a slot of each, in one
   instant (no run ever held part of a group); an older group entry passed over is excused from
   b (it waited for another of its limits) but must carry passed_over_at;
h. whole runs (SPEC 11): a run that holds a limit for its whole run took no step before its
   slots were confirmed for it (its first step starts at or after the confirmation);
i. time, on the box's one clock (the database's, studio/plumbing/clock.py): no slot or entry
   stamped in the future of that clock, no slot taken back by the sweep before its grant + max
   hold (expires_at), no wait timed out before its deadline;
j. pause (SPEC 5.6): no slot granted while the limit was paused, between a pause and the resume
   that follows it (audited; a grant at the very instant of either cannot be ordered against it
   and is let be), and a limit paused now has the audit row of that pause;
k. the box (SPEC 12): a, d and f hold it to its ceiling and to the base per workflow (its key
   pools), g to all or nothing with the limits a run waits for; and no run executed outside a
   box slot: every step of a run that held box slots began while one of them was busy for it
   (so no run resumed from a wait, or started, without its box slot); and no limit held more
   whole runs' slots (requests '<run>:start') than the box's base (12.3; while the base is the
   declared one it was created with);
l. fair shares (SPEC 13.6), on a limit whose share is fair now: no single run was granted from
   the queue while a run of another key that could have been served stood before it in the
   order of 13.2 (with the keys' passes: the turns, replayed from the pass each slot and entry
   keeps), no key's grant was ranked at another pass than its turns add up to, and no capacity
   was left free while a run that could have been granted waited; judged only since the last
   change of the limit's share, weights, mins, pool sizes or declared values (`fair_since`), and
   silent where the rows cannot tell (`unfair_grants` says what it leaves out).

m. queue caps (SPEC 14.5), on a limit with max_waiting or max_waiting_per_key in force now: no
   acquisition joined the queue while it already held the cap's number of runs (of its key, for
   max_waiting_per_key), since the last change of the limit's declared values or caps; a
   reservation that lapsed back into the queue is not judged.

n. the causes of runs ended by SPEC 14 (once for the box, not per limit): every run ended
   `skipped` or `replaced` has its reason (a 6.5 code) and the limit that stopped it recorded, a
   replaced run the run that replaced it, and a run cancelled by cancel_running the run that
   cancelled it (`runs.unrecorded_endings`).

o. replace (SPEC 14.3): an entry that joined with on_full 'replace' left no other entry of its key
   waiting for the same limits (entries joined at the same instant are not judged against each
   other), and every replaced entry names its replacer, an acquisition of its key.

Why timestamps are enough: every change to a limit's slots and queue happens under that limit's
row lock, and every service reads the clock *after* taking the lock (tests/services/
test_replay_races.py holds it to that), so for one limit the times written follow the order of
its transactions. Two transactions can share a timestamp; then their order cannot be told and the
engine gets the benefit of the doubt (at one instant: capacity changes first, then frees, then
grants; a grant is judged against the higher of the capacities in force just before and at that
instant). This relies on one clock: every time is the database's (studio/plumbing/clock.py),
read under the lock, whatever host's clock is off; only a database clock stepped backwards could
make the checker report a violation that was not one.

History older than the retention may already be deleted (slots before their queue entries):
missing rows only ever hide a violation, never invent one, and the checks that pair an entry
with its slot skip pairs that finished before the retention cutoff.

One limit's history is read into memory (a few hundred bytes a row), inside one read-only
snapshot (REPEATABLE READ on PostgreSQL; on SQLite the transaction blocks writers meanwhile), so
the counters and the rows are read as of one instant even while the box runs.

Where each lives (limits/verify/): the rows, and the readings several checks share, in
`history.py`; a, d and f in `counts.py`; b, c and g in `grants.py`; i and j in `times.py`; e, h,
k and n in `runs.py`; l in `fair.py`; m and o in `caps.py`; `History` (every check over one limit's
rows), `verify` and the `Verification` it reports in `report.py`.
"""

from limits.verify.counts import CAPACITY, FREE, GRANT
from limits.verify.fair import (
    ENDS,
    FAIR_SETTINGS,
    FREES,
    GRANTS,
    JOINS,
    LEAVES,
    MARKS,
    OWED_AFTER,
    UNKNOWN_PASS,
    Rank,
    stands_before,
)
from limits.verify.fair import _FairReplay as _FairReplay  # the fair check's own tests drive it
from limits.verify.history import FOREVER, LIVE
from limits.verify.report import History, Verification, all_violations, capacity_overruns, queue_jumps, verify

__all__ = [
    "CAPACITY",
    "ENDS",
    "FAIR_SETTINGS",
    "FOREVER",
    "FREE",
    "FREES",
    "GRANT",
    "GRANTS",
    "JOINS",
    "LEAVES",
    "LIVE",
    "MARKS",
    "OWED_AFTER",
    "UNKNOWN_PASS",
    "History",
    "Rank",
    "Verification",
    "all_violations",
    "capacity_overruns",
    "queue_jumps",
    "stands_before",
    "verify",
]
