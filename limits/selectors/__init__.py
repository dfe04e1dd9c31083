"""Reads for pages, the CLI and the API: querysets already ordered, figures from the counters.

One module a seam (issue 48), every name handed on from here (import them from limits.selectors):

    pages        Page and Numbered (a page of a long list, its total from a counter), Place (a
                 run's place in a queue)
    limit_pages  the Limits list and a limit's page: its slots and queue a page at a time, the
                 activity feed, the rows as the page lists them (SlotRow, QueueRow), a slot by id
    keys_panel   a limit's keys panel (KeyPool), a fair limit's shares and turns
    places       a waiting run's places and estimated wait (Wait, waits_of_run, queue_etas)
    fair         a fair limit's queue in the order the grant will serve it (SPEC 13.7)

The JSON shapes of these rows (for the API and the CLI) are limits.serializers.

A tunable (EXACT_PLACES, FAIR_EXACT_ROWS, RECENT_FREES_SCANNED, ...) is read where it is defined:
a test that changes one changes it there (monkeypatch.setattr("limits.selectors.places.EXACT_PLACES", 2)).
"""

from limits.selectors.fair import (
    ARMS_PER_QUERY,
    FAIR_EXACT_MAX,
    FAIR_EXACT_ROWS,
    FAIR_READ_ROUNDS,
    FairHead,
    FairRows,
    Turn,
    fair_head,
    fair_places,
    fair_queue_rows,
)
from limits.selectors.keys_panel import (
    KeyPool,
    fair_share,
    fair_weights,
    key_pools,
    key_pools_page,
    no_key_pool,
    turns,
)
from limits.selectors.limit_pages import (
    BOX_FIRST,
    KINDS,
    RECENT_FREES_SCANNED,
    QueueRow,
    RunEndEvent,
    SlotEvent,
    SlotRow,
    activity,
    box,
    box_base,
    get_limit,
    get_slot,
    group_partners,
    held_capacity,
    limits,
    limits_page,
    live_slots,
    live_slots_of_run,
    live_slots_page,
    queue_page,
    queue_rows,
    recent_activity,
    run_endings,
    slot_feed,
    slot_rows,
    waiting_entries,
)
from limits.selectors.pages import Numbered, Page, Place, clamp_page
from limits.selectors.places import (
    COUNT_ROWS,
    EXACT_PLACES,
    PLACES_PER_QUERY,
    CappedCount,
    Wait,
    limit_places,
    places_as_shown,
    queue_etas,
    queue_place,
    recent_grant_rates,
    waits_of_run,
)

__all__ = [
    "ARMS_PER_QUERY",
    "BOX_FIRST",
    "COUNT_ROWS",
    "EXACT_PLACES",
    "FAIR_EXACT_MAX",
    "FAIR_EXACT_ROWS",
    "FAIR_READ_ROUNDS",
    "KINDS",
    "PLACES_PER_QUERY",
    "RECENT_FREES_SCANNED",
    "CappedCount",
    "FairHead",
    "FairRows",
    "KeyPool",
    "Numbered",
    "Page",
    "Place",
    "QueueRow",
    "RunEndEvent",
    "SlotEvent",
    "SlotRow",
    "Turn",
    "Wait",
    "activity",
    "box",
    "box_base",
    "clamp_page",
    "fair_head",
    "fair_places",
    "fair_queue_rows",
    "fair_share",
    "fair_weights",
    "get_limit",
    "get_slot",
    "group_partners",
    "held_capacity",
    "key_pools",
    "key_pools_page",
    "limit_places",
    "limits",
    "limits_page",
    "live_slots",
    "live_slots_of_run",
    "live_slots_page",
    "no_key_pool",
    "places_as_shown",
    "queue_etas",
    "queue_page",
    "run_endings",
    "queue_place",
    "queue_rows",
    "recent_activity",
    "recent_grant_rates",
    "slot_feed",
    "slot_rows",
    "turns",
    "waiting_entries",
    "waits_of_run",
]
