"""This installation as a backend: reads through limits.selectors, writes through
limits.services, rows shaped by limits.serializers.

Django is imported inside the methods, so `stackbone limits --agent ...` (which never builds a
LocalBackend) works without a local database or settings.
"""

from __future__ import annotations

import getpass
from typing import Any

from limits.cli.backend import (
    BoxChange,
    CapChange,
    Change,
    KeyChange,
    KeysView,
    OnFullChange,
    PauseChange,
    PoolChange,
    ShareChange,
    SlotsView,
    more_past_cut,
)
from limits.cli.errors import EXIT_NOT_FOUND, NO_BOX, UNKNOWN_LIMIT, UNKNOWN_SLOT, CliError, one_line
from stackbone.plumbing import clock as box_clock


def local_actor() -> str:
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return f"cli:{user}"[:150]


class LocalBackend:
    """This installation: reads through the selectors, writes through the services, each verb a
    constant number of queries."""

    def __init__(self, actor: str) -> None:
        self.actor = actor

    def limits(self, kind: str | None = None) -> list[dict[str, Any]]:
        from limits import selectors, serializers

        rows = list(selectors.limits(kind=kind or ""))
        box_base = selectors.box_base(rows)  # a workflow's bound shows the box's base when it caps it
        return [serializers.limit_summary(limit, box_base=box_base) for limit in rows]

    def limit(self, name: str) -> dict[str, Any]:
        """One limit's row (serializers.limit_summary), as `limits list` gives it."""
        from limits import selectors, serializers

        limit = self._limit(name)
        return serializers.limit_summary(limit, box_base=selectors.box_base() if not limit.is_box else None)

    def slots(self, name: str, cut: int | None, key: str | None = None) -> SlotsView:
        """The limit's slots and queue, or with `key` only that key's (queue positions then
        count within the key's queue)."""

        from limits import selectors, serializers, services

        limit = self._limit(name)
        slot_rows = selectors.live_slots(limit)
        queue_rows = selectors.waiting_entries(limit)
        total_slots, total_queue, key_row = limit.in_use, limit.waiting_count, None
        if key is not None:
            slot_rows, queue_rows = slot_rows.filter(key=key), queue_rows.filter(key=key)
            counters = serializers.get_key(limit, key)
            if counters is None:
                key_row = serializers.unused_key_summary(limit, key)
                total_slots = total_queue = 0
            else:
                key_row = serializers.key_summary(limit, counters, selectors.fair_weights(limit))
                total_slots, total_queue = counters.in_use, counters.waiting_count
        if cut is not None:
            slot_rows, queue_rows = slot_rows[: cut + 1], queue_rows[: cut + 1]  # one more tells if there are more
        slot_list, entry_list = list(slot_rows), list[Any]()
        exact, walked = None, None  # a fair limit's queue (SPEC 13.7): in the order it is served
        if limit.is_fair and key is None and total_queue:
            shown = selectors.FAIR_EXACT_MAX if cut is None else cut + 1
            fair = selectors.fair_queue_rows(limit, exact=shown, offset=0, size=None if cut is None else shown)
            entry_list, exact, walked = fair.items, fair.exact, {limit.id: fair.next_key}
        else:
            entry_list = list(queue_rows)
        slot_groups, entry_groups = serializers.slot_groups(slot_list), serializers.entry_groups(entry_list)
        bound = limit.is_workflow_bound or limit.is_box  # slots held while a run executes: no expiry
        slots = [serializers.slot_summary(slot, slot_groups, bound=bound) for slot in slot_list]
        etas = selectors.queue_etas(limit, entry_list, first_place=None if key is not None else 1)
        reasons = services.why_waiting(entry_list, next_keys=walked)
        queue = [
            serializers.queue_entry_summary(
                entry,
                index + 1,
                entry_groups,
                eta_seconds=eta,
                reason=reasons.get(entry.id),
                estimated=exact is not None and index + 1 > exact,
            )
            for index, (entry, eta) in enumerate(zip(entry_list, etas, strict=True))
        ]
        box_base = selectors.box_base() if not limit.is_box else None
        return SlotsView(
            limit=serializers.limit_summary(limit, box_base=box_base),
            slots=slots[:cut],
            queue=queue[:cut],
            more_slots=more_past_cut(len(slots), total_slots, cut),
            more_queue=more_past_cut(len(queue), total_queue, cut),
            now=box_clock.now(),
            key=key_row,
        )

    def keys(self, name: str, cut: int | None, key: str | None = None, search: str = "") -> KeysView:
        from limits import selectors, serializers

        limit = self._limit(name)
        weights = selectors.fair_weights(limit)  # one aggregate query on a fair limit, none on fifo
        rows = serializers.keys(limit, key=key, search=search)
        found = list(rows if cut is None else rows[: cut + 1])  # one more tells if there are more
        more = 0
        if cut is not None and len(found) > cut:
            more = more_past_cut(len(found), rows.count(), cut)
        return KeysView(
            limit=serializers.limit_summary(limit),
            keys=[serializers.key_summary(limit, row, weights) for row in found[:cut]],
            more_keys=more,
            no_key=serializers.no_key_summary(limit, weights),
            key=key,
            search=search,
        )

    def slot(self, slot_id: str) -> dict[str, Any]:
        from limits import selectors, serializers

        slot = selectors.get_slot(slot_id)
        if slot is None:
            raise CliError(UNKNOWN_SLOT.format(slot_id=slot_id), EXIT_NOT_FOUND, field="slot_id")
        bound = slot.limit.is_workflow_bound or slot.limit.is_box
        return {**serializers.slot_summary(slot, bound=bound), "limit": slot.limit.name}

    def release(self, slot_id: str) -> tuple[bool, dict[str, Any]]:
        from limits import services

        before = self.slot(slot_id)
        released = services.release(slot_id, actor=self.actor)
        after = before if released else self.slot(slot_id)
        return released, after

    def set_capacity(self, name: str, value: int | str | None) -> Change:
        from limits import serializers, services

        old = self._limit(name).capacity
        return Change(old, serializers.limit_summary(services.set_capacity(name, value, actor=self.actor)))

    def set_max_hold(self, name: str, value: int | str | None) -> Change:
        from limits import serializers, services

        old = self._limit(name).max_hold_ms
        return Change(old, serializers.limit_summary(services.set_max_hold(name, value, actor=self.actor)))

    def set_per_key(self, name: str, value: int | str | None, key: str | None = None) -> PoolChange:
        """The limit's per_key override, or with `key` that key's pool size; None resets it."""
        from limits import serializers, services

        limit = self._limit(name)
        if key is None:
            old = limit.per_key
        else:
            before = serializers.get_key(limit, key)
            old = serializers.pool_size(limit, before.pool_override if before is not None else None)
        changed = services.set_per_key(name, value, key=key, actor=self.actor)
        key_row = None
        if key is not None:
            after = serializers.get_key(changed, key)
            key_row = (
                serializers.key_summary(changed, after)
                if after is not None
                else serializers.unused_key_summary(changed, key)
            )
        return PoolChange(old, serializers.limit_summary(changed), key_row)

    def set_paused(self, name: str, paused: bool) -> PauseChange:
        """Pause (SPEC 5.6) or resume the limit; a second pause or resume changes nothing."""
        from limits import serializers, services

        old = "paused" if self._limit(name).paused else "running"
        action = services.pause_limit if paused else services.resume_limit
        return PauseChange(old, serializers.limit_summary(action(name, actor=self.actor)))

    def set_share(self, name: str, value: str | None) -> ShareChange:
        """Switch the limit to 'fifo' or 'fair' (SPEC 13.5); None resets it to the declared share."""
        from limits import serializers, services

        old = self._limit(name).share
        return ShareChange(old, serializers.limit_summary(services.set_share(name, value, actor=self.actor)))

    def set_on_full(self, name: str, value: str | None) -> OnFullChange:
        """'wait', 'skip' or 'replace' (SPEC 14.1); None resets it to the declared on_full."""
        from limits import serializers, services

        old = self._limit(name).on_full
        return OnFullChange(old, serializers.limit_summary(services.set_on_full(name, value, actor=self.actor)))

    def set_max_waiting(self, name: str, value: int | str | None, *, per_key: bool) -> CapChange:
        """The queue's cap, or with `per_key` each key's (SPEC 14.5); None resets it to the declared one."""
        from limits import serializers, services

        limit = self._limit(name)
        old = limit.max_waiting_per_key if per_key else limit.max_waiting
        changed = services.set_max_waiting(name, value, per_key=per_key, actor=self.actor)
        return CapChange(old, serializers.limit_summary(changed))

    def set_key_field(self, name: str, field: str, value: int | str | None, key: str) -> KeyChange:
        """Set one key's `field` ('weight' or 'min'); None resets it (weight 1, min 0)."""
        from limits import serializers, services

        before = serializers.key_row(self._limit(name), key)
        action = services.set_weight if field == "weight" else services.set_min
        changed = action(name, value, key=key, actor=self.actor)
        old = before[field]
        assert isinstance(old, int)
        return KeyChange(old, serializers.limit_summary(changed), serializers.key_row(changed, key))

    def box(self) -> dict[str, Any]:
        """The box's run concurrency (SPEC 12), as a limit row with its base and burst."""
        from limits import selectors, serializers

        limit = selectors.box()
        if limit is None:
            raise CliError(NO_BOX, EXIT_NOT_FOUND, field="limit")
        return serializers.limit_summary(limit)

    def set_box(self, changes: dict[str, object]) -> BoxChange:
        """Override or reset (None) the base and burst in `changes`; the others stay."""
        from limits import selectors, serializers, services

        before = selectors.box()
        old = _box_figures(before)
        changed = services.set_box(**changes, actor=self.actor)
        return BoxChange(old, serializers.limit_summary(changed))

    def forget(self, name: str) -> dict[str, Any]:
        from limits import serializers
        from limits.forget import forget_limit

        return serializers.forgotten_summary(forget_limit(name, actor=self.actor))

    def verify(self, names: list[str] | None) -> Any:
        from limits.verify import verify

        return verify(names)

    def _limit(self, name: str) -> Any:
        from limits import selectors

        limit = selectors.get_limit(name)
        if limit is None:
            raise CliError(UNKNOWN_LIMIT.format(name=name), EXIT_NOT_FOUND, field="limit")
        return limit


def _box_figures(limit: Any) -> dict[str, Any]:
    if limit is None:
        return {"base": None, "burst": None, "ceiling": None}
    return {"base": limit.per_key, "burst": limit.burst, "ceiling": limit.capacity}


def database_error_message(error: Exception) -> str:
    from django.db import connection

    text = one_line(str(error)) or type(error).__name__
    hint = ""
    if "no such table" in text or "does not exist" in text:
        hint = " (run `python manage.py migrate` first)"
    return f"cannot use the database ({connection.vendor}, {connection.settings_dict.get('NAME')}): {text}{hint}"
