"""limits.selectors, limits.insights and limits.views were single modules; issue 48 split each
into a package along its seams (limits/selectors/: pages, limit_pages, keys_panel, places, fair;
limits/insights/: rollups, peaks, reads, minutes; limits/views/: pages, edits, regions). The
package hands on every name the module had.

Must never happen: a name an embedding project, the urls or a test imported from limits.selectors,
limits.insights or limits.views that the package no longer gives; a name in a package's __all__ it
does not give.
"""

from __future__ import annotations

import importlib

import pytest

# one_database (tests/conftest.py): imports modules, never touches a database.
pytestmark = pytest.mark.one_database

# The public names of limits/selectors.py, limits/insights.py and limits/views.py before the
# split. Two are gone on purpose: with_group_partners and with_reasons stuck values on model
# instances for the template; the limit page's rows are view models now (slot_rows, queue_rows:
# SlotRow, QueueRow).
BEFORE = {
    "limits.selectors": [
        "ARMS_PER_QUERY",
        "BOX_FIRST",
        "COUNT_ROWS",
        "CappedCount",
        "EXACT_PLACES",
        "FAIR_EXACT_MAX",
        "FAIR_EXACT_ROWS",
        "FAIR_READ_ROUNDS",
        "FairHead",
        "FairRows",
        "KINDS",
        "KeyPool",
        "Numbered",
        "PLACES_PER_QUERY",
        "Page",
        "Place",
        "RECENT_FREES_SCANNED",
        "SlotEvent",
        "Turn",
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
        "queue_place",
        "recent_activity",
        "recent_grant_rates",
        "slot_feed",
        "turns",
        "waiting_entries",
        "waits_of_run",
    ],
    "limits.insights": [
        "BUCKET_FIELDS",
        "COUNT_FIELDS",
        "EVENT_FIELDS",
        "INSIGHTS_RETENTION",
        "KEYS_SHOWN",
        "KEY_FIELDS",
        "KEY_RETENTION",
        "KEY_SPAN",
        "KeyWaits",
        "LimitFigures",
        "MAX_BACKFILL",
        "MAX_MINUTES_PER_PASS",
        "MINUTE",
        "PEAK_REFERENCE_AGE",
        "PURGE_BATCH",
        "Peak",
        "Point",
        "RATE_WINDOW_MINUTES",
        "RECOUNT_WINDOW",
        "ROLLUP_GRACE",
        "SWEEP_PERIOD",
        "WaitFigures",
        "backlog_points",
        "eta_rates",
        "floor_minute",
        "floor_span",
        "grant_rates",
        "history_needed_from",
        "key_wait_figures",
        "metric_rows",
        "minute_peaks",
        "no_jit",
        "percentile_bound",
        "purge",
        "record",
        "record_peaks",
        "roll_up",
        "sample",
        "wait_figures",
    ],
    "limits.views": [
        "ACTIVITY_SIZE",
        "ALREADY_FREE",
        "ALREADY_PAUSED",
        "ALREADY_RUNNING",
        "BAD_KEY",
        "BOX_RESET",
        "BOX_SET",
        "BOX_UNCHANGED",
        "CAPACITY_RESET",
        "CAPACITY_SET",
        "KEYS_PER_PAGE",
        "KEY_FILTER_MAX_LENGTH",
        "KEY_MIN_SET",
        "KEY_POOL_RESET",
        "KEY_POOL_RESET_TO_NONE",
        "KEY_POOL_SET",
        "KEY_WEIGHT_SET",
        "KIND_CHOICES",
        "LIMITS_PER_PAGE",
        "LIMIT_CHANGED_EVENT",
        "MAX_HOLD_RESET",
        "MAX_HOLD_SET",
        "NO_BOX_PAGE",
        "NO_MAX_HOLD",
        "Notice",
        "PAUSED",
        "PER_KEY_RESET",
        "PER_KEY_RESET_TO_NONE",
        "PER_KEY_SET",
        "Pager",
        "Place",
        "QUEUE_PER_PAGE",
        "RELEASED",
        "RESUMED",
        "RefusedPool",
        "SEARCH_MAX_LENGTH",
        "SHARE_RESET",
        "SHARE_SET",
        "SLOTS_PER_PAGE",
        "TOTAL_RESET",
        "TOTAL_SET",
        "WHEN_FULL_DOES",
        "WHEN_FULL_SET",
        "limit_detail",
        "limit_list",
        "operator_required",
        "pause_limit",
        "release_slot",
        "reset_key_pool",
        "reset_limit",
        "resume_limit",
        "set_box",
        "set_capacity",
        "set_key_min",
        "set_key_pool",
        "set_key_weight",
        "set_max_hold",
        "set_per_key",
        "set_share",
        "set_when_full",
        "workers_panel",
    ],
}


@pytest.mark.parametrize("package", sorted(BEFORE))
def test_the_split_packages_keep_every_public_name_the_modules_had(package: str) -> None:
    module = importlib.import_module(package)
    assert [name for name in BEFORE[package] if not hasattr(module, name)] == []
    assert set(BEFORE[package]) <= set(module.__all__)


@pytest.mark.parametrize("package", sorted(BEFORE))
def test_each_name_a_package_exports_is_one_it_gives(package: str) -> None:
    module = importlib.import_module(package)
    assert [name for name in module.__all__ if not hasattr(module, name)] == []
    assert len(module.__all__) == len(set(module.__all__))
