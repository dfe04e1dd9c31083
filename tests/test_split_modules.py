"""limits.selectors and limits.insights were single modules; issue 48 split each into a package
along its seams (limits/selectors/: pages, limit_pages, keys_panel, places, fair;
limits/insights/: rollups, peaks, reads, minutes). The package hands on every name the module had.

Must never happen: a name an embedding project or a test imported from limits.selectors or
limits.insights that the package no longer gives; a name in a package's __all__ it does not give.
"""

from __future__ import annotations

import importlib

import pytest

# one_database (tests/conftest.py): imports modules, never touches a database.
pytestmark = pytest.mark.one_database

# The public names of limits/selectors.py and limits/insights.py before the split. Two are gone
# on purpose: with_group_partners and with_reasons stuck values on model instances for the
# template; the limit page's rows are view models now (slot_rows, queue_rows: SlotRow, QueueRow).
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
