"""The rows only the services write, read-only here: slots (with the operators' "Release selected
slots" action), queue entries, the audit and the records of forgotten limits."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from limits import services
from limits.admin.base import NO_MAX_HOLD, ReadOnlyAdmin
from limits.durations import format_duration
from limits.models import AuditEvent, ForgottenLimit, QueueEntry, Slot
from stackbone.plumbing.access import OPERATE_LIMIT, actor


@admin.register(Slot)
class SlotAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "limit",
        "state",
        "run_id",
        "key",
        "label",
        "group_size",
        "granted_at",
        "expires_at",
        "freed_at",
        "freed_by",
    ]
    list_filter = ["state", "limit"]
    list_select_related = ["limit"]
    search_fields = ["id", "run_id", "key", "label"]
    escaped_fields = ("run_id", "request", "key", "label", "freed_by")
    ordering = ["-granted_at"]
    show_full_result_count = False
    actions = ["release_selected"]

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(OPERATE_LIMIT)

    @admin.action(description="Release selected slots", permissions=["operate"])
    def release_selected(self, request: HttpRequest, queryset: QuerySet[Slot]) -> None:
        who = actor(request)
        ids = list(queryset.values_list("id", flat=True))
        released = sum(services.release(slot_id, actor=who) for slot_id in ids)
        if released:
            self.message_user(request, f"Released {released} slot(s).", messages.SUCCESS)
        if len(ids) - released:
            self.message_user(
                request, f"{len(ids) - released} slot(s) were already free: nothing changed for them.", messages.INFO
            )


@admin.register(QueueEntry)
class QueueEntryAdmin(ReadOnlyAdmin):
    list_display = [
        "limit",
        "position",
        "run_id",
        "key",
        "label",
        "group_size",
        "state",
        "enqueued_at",
        "deadline",
        "finished_at",
    ]
    list_filter = ["state", "limit"]
    list_select_related = ["limit"]
    search_fields = ["run_id", "key", "label"]
    escaped_fields = ("run_id", "request", "key", "label")
    ordering = ["limit", "position"]
    show_full_result_count = False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "actor", "action", "limit", "key", "slot_id", "old_value", "new_value"]
    list_filter = ["action", "limit"]
    list_select_related = ["limit"]
    search_fields = ["actor", "slot_id", "key", "limit__name"]
    escaped_fields = ("actor", "slot_id", "key", "old_value", "new_value")
    date_hierarchy = "at"
    show_full_result_count = False


@admin.register(ForgottenLimit)
class ForgottenLimitAdmin(ReadOnlyAdmin):
    """The record of each `limits forget` (limits.forget), which removes a limit's own audit rows:
    who forgot which limit when, what it declared and how many rows of its history went.
    Read-only, like the audit it stands in for."""

    list_display = ["at", "name", "kind", "actor", "declared_capacity", "declared_max_hold", "removed"]
    list_filter = ["kind"]
    search_fields = ["name", "actor"]
    escaped_fields = ("name", "kind", "actor", "removed")
    fields = ["name", "kind", "at", "actor", "declared_capacity", "declared_max_hold", "removed"]
    readonly_fields = ["at", "declared_capacity", "declared_max_hold"]
    date_hierarchy = "at"
    show_full_result_count = False

    @admin.display(description="declared max hold", ordering="declared_max_hold_ms")
    def declared_max_hold(self, record: ForgottenLimit) -> str:
        return NO_MAX_HOLD if record.declared_max_hold_ms is None else format_duration(record.declared_max_hold_ms)
