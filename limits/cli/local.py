"""This installation as a backend: reads through limits.selectors, writes through
limits.services, rows shaped by limits.serializers.

Django is imported inside the methods, so `stackbone limits --agent ...` (which never builds a
LocalBackend) works without a local database or settings.
"""

from __future__ import annotations

import getpass
from typing import Any

from limits.cli.backend import Change, SlotsView, more_past_cut
from limits.cli.errors import EXIT_NOT_FOUND, UNKNOWN_LIMIT, UNKNOWN_SLOT, CliError, one_line


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

    def limits(self) -> list[dict[str, Any]]:
        from limits import selectors, serializers

        return [serializers.limit_summary(limit) for limit in selectors.limits()]

    def slots(self, name: str, cut: int | None) -> SlotsView:
        from django.utils import timezone

        from limits import selectors, serializers

        limit = self._limit(name)
        slot_rows = selectors.live_slots(limit)
        queue_rows = selectors.waiting_entries(limit)
        if cut is not None:
            slot_rows, queue_rows = slot_rows[: cut + 1], queue_rows[: cut + 1]  # one more tells if there are more
        slots = [serializers.slot_summary(slot) for slot in slot_rows]
        queue = [serializers.queue_entry_summary(entry, index + 1) for index, entry in enumerate(queue_rows)]
        return SlotsView(
            limit=serializers.limit_summary(limit),
            slots=slots[:cut],
            queue=queue[:cut],
            more_slots=more_past_cut(len(slots), limit.in_use, cut),
            more_queue=more_past_cut(len(queue), limit.waiting_count, cut),
            now=timezone.now(),
        )

    def slot(self, slot_id: str) -> dict[str, Any]:
        from limits import selectors, serializers

        slot = selectors.get_slot(slot_id)
        if slot is None:
            raise CliError(UNKNOWN_SLOT.format(slot_id=slot_id), EXIT_NOT_FOUND)
        return {**serializers.slot_summary(slot), "limit": slot.limit.name}

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

    def verify(self, names: list[str] | None) -> Any:
        from limits.verify import verify

        return verify(names)

    def _limit(self, name: str) -> Any:
        from limits import selectors

        limit = selectors.get_limit(name)
        if limit is None:
            raise CliError(UNKNOWN_LIMIT.format(name=name), EXIT_NOT_FOUND)
        return limit


def database_error_message(error: Exception) -> str:
    from django.db import connection

    text = one_line(str(error)) or type(error).__name__
    hint = ""
    if "no such table" in text or "does not exist" in text:
        hint = " (run `python manage.py migrate` first)"
    return f"cannot use the database ({connection.vendor}, {connection.settings_dict.get('NAME')}): {text}{hint}"
