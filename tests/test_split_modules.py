"""limits.selectors, limits.insights and limits.views were single modules; issue 48 split each
into a package along its seams (limits/selectors/: pages, limit_pages, keys_panel, places, fair;
limits/insights/: rollups, peaks, reads, minutes; limits/views/: pages, edits, regions). The
package hands on every name the module had.

limits/api.py (638 lines) became the package limits/api/ (requests: what both JSON APIs share;
reads; writes), and limits/runs/listing.py (625) gave its page of runs to limits/runs/pages.py;
each old path hands on every name it had. stackbone/runs/runtime.py was one module of 874
lines; issue 48 split it into the run layer's modules by job (errors, registry, steps, starts,
dispatch, executor), and runtime hands on every name it had (`_discovered` aside: a flag
discover() rebinds, now registry's own).

Must never happen: a name an embedding project, the urls or a test imported from limits.selectors,
limits.insights or limits.views that the package no longer gives; a name in a package's __all__ it
does not give; a name of the runtime that it no longer gives, or a name set on it (a test's
monkeypatch) that the code in its home does not call; a run layer error that records another path
than `stackbone.runs.runtime.<its name>` (docs/embedding.md).
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


# The names of stackbone/runs/runtime.py before the split (the module's own definitions).
RUNTIME_BEFORE = [
    "ADVANCE_RUN", "ADVANCE_RUNS", "BAD_REFERENCE", "COUNTDOWN_WITHIN", "DEFERRED", "DISPATCH_CHUNK",
    "DISPATCH_TASKS", "HEARTBEAT_SECONDS", "INTERRUPTIONS", "LEASE", "LeaseLost", "NOT_IN_A_RUN",
    "NOT_IN_A_STEP", "NOT_JSON", "RECOVER_BATCH", "REFERENCE_MAX_LENGTH", "REPLAY_MISMATCH", "RunContext",
    "STALE_DISPATCH", "START_DEFERRED", "START_GATE", "StepError", "Suspend", "UNFINISHED", "UNKNOWN_WORKFLOW",
    "WAITING_STATUSES", "WAKE_BATCH", "Workflow", "WorkflowError", "ZERO", "_Heartbeat", "_check_json",
    "_count_down_to", "_current", "_dispatch", "_dispatch_on_commit", "_finish", "_now_and_monotonic",
    "_pass_the_start_gate", "_project_packages", "_registered_by_its_module", "_registry", "_release_lease",
    "_since", "_task", "advance", "advanced_inline", "body_context", "cancel_run", "check_reference",
    "current_run", "discover", "dispatch_on_commit", "get_workflow", "is_interruption", "loaded_run",
    "lock_own_run", "logger", "next_recorded_key", "prepared_input", "record_step", "recorded_step", "recover",
    "reference_of", "run_step", "start_if_due", "start_run", "start_run_at", "step", "storable_text", "suspend",
    "wake", "workflow", "workflow_names",
]  # fmt: skip


def test_the_runtime_keeps_every_name_it_had() -> None:
    from stackbone.runs import runtime

    assert [name for name in RUNTIME_BEFORE if not hasattr(runtime, name)] == []
    assert [name for name in runtime.__all__ if not hasattr(runtime, name)] == []


def test_a_name_set_on_the_runtime_is_what_its_home_calls_and_is_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from stackbone.runs import dispatch, executor, runtime, steps

    def seen() -> list[object]:
        """What the homes' code calls: each name as the module holding that code has it."""
        return [
            vars(executor)["HEARTBEAT_SECONDS"],
            vars(steps)["record_step"],
            vars(steps)["lock_own_run"],
            vars(dispatch)["dispatch"],
            vars(executor)["dispatch"],
        ]

    before = seen()
    with monkeypatch.context() as patch:
        patch.setattr(runtime, "HEARTBEAT_SECONDS", 0.05)
        patch.setattr(runtime, "record_step", "recording")
        patch.setattr(runtime, "lock_own_run", "locking")
        patch.setattr(runtime, "_dispatch", "sending")  # its old name here, dispatch's own there
        assert seen() == [0.05, "recording", "locking", "sending", "sending"]
    assert seen() == before
    assert before[3] is runtime._dispatch


def test_the_run_layers_errors_keep_the_path_a_run_records() -> None:
    from stackbone.runs import runtime

    for error in (runtime.WorkflowError, runtime.StepError, runtime.Suspend, runtime.LeaseLost):
        assert f"{error.__module__}.{error.__qualname__}" == f"stackbone.runs.runtime.{error.__name__}"


# The names of limits/api.py and limits/runs/listing.py before their splits (their own definitions
# and the names they handed on).
OLD_MODULES = {
    "limits.api": [
        "ApiError", "ApiRequest", "BAD_BODY", "BAD_CONTENT_TYPE", "BAD_KIND", "BAD_PAGE", "BAD_PER_KEY_FLAG",
        "BAD_SEARCH", "BODY_TOO_LARGE", "DEFAULT_PAGE_SIZE", "KEY_REQUIRED", "MAX_PAGE_SIZE", "MAX_WAITING_HELP",
        "MIN_HELP", "MISSING_FIELD", "NO_BOX_FIELD", "NO_PERMISSION", "NO_TOKEN", "ON_FULL_HELP",
        "OPERATE_PERMISSION", "PER_KEY_HELP", "SHARE_HELP", "UNKNOWN_BOX_FIELD", "UNKNOWN_PATH", "UNKNOWN_SLOT",
        "WEIGHT_HELP", "_body", "_checked_key", "_json_body", "_key_param", "_limit", "_page_answer",
        "_page_params", "_set_box", "_set_key_field", "_show_box", "actor", "box", "error_response", "forget",
        "limit_detail", "limit_keys", "limit_list", "limit_queue", "limit_slots", "pause", "paused_word",
        "release_slot", "resume", "set_capacity", "set_max_hold", "set_max_waiting", "set_min", "set_on_full",
        "set_per_key", "set_share", "set_weight", "slot_detail", "token_auth", "unknown_path", "workers_report",
    ],
    "limits.runs.listing": [
        "BAD_STATUS", "Cursor", "FINISHED_STATUSES", "HINT_MAX_LENGTH", "KEY_WITHOUT_BOUNDS", "Key", "Matches",
        "NO_WORKFLOWS", "RUNS_PER_PAGE", "RunFilter", "RunPage", "RunRow", "RunsError", "SEARCH_MATCHES",
        "SEARCH_MAX_LENGTH", "SEARCH_SCANNED", "STATUSES", "UNKNOWN_RUN", "UNKNOWN_WORKFLOW", "WAITING_AS_LIST",
        "_first", "_iso", "_key_parts", "_live_under_key", "_runs", "_taken_under_key", "_under_key",
        "_waiting_for", "_window", "_with_limits", "cancel", "cancel_answer", "check_start", "limit_names",
        "list_answer", "parse_input", "run_details", "run_row", "run_summary", "runs", "runs_page",
        "search_matches", "show_answer", "start", "start_answer", "workflow_hints", "workflow_names",
    ],
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(OLD_MODULES))
def test_a_split_module_keeps_every_name_it_had(module: str) -> None:
    found = importlib.import_module(module)
    assert [name for name in OLD_MODULES[module] if not hasattr(found, name)] == []


def test_the_json_apis_package_exports_the_names_it_gives() -> None:
    from limits import api

    assert [name for name in api.__all__ if not hasattr(api, name)] == []
    assert len(api.__all__) == len(set(api.__all__))
