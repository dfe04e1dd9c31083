"""Runs and their steps in the admin: read-only (runs change only through the run layer). Their
user-supplied text (input, output, errors, keys, what a run waits for) is shown escaped, as in
Studio (limits.admin.base.EscapedTextAdmin)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.http import HttpRequest

from limits.admin.base import EscapedTextAdmin, escaped
from stackbone.runs.models import Run, Step

if TYPE_CHECKING:  # the stubs' generic class, which is not subscriptable at run time
    StepTabularInline = admin.TabularInline[Step, Run]
else:
    StepTabularInline = admin.TabularInline


STEP_FIELDS = ("seq", "name_escaped", "kind", "status", "started_at", "finished_at", "error_escaped")


class StepInline(StepTabularInline):
    model = Step
    fields = STEP_FIELDS
    readonly_fields = STEP_FIELDS
    ordering = ["seq"]
    name_escaped = escaped("name")
    error_escaped = escaped("error")
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Run)
class RunAdmin(EscapedTextAdmin):
    # end_reason, end_limit, caused_by: why a run ended skipped or replaced, or was cancelled by another (SPEC 14.6)
    list_display = ["id", "workflow", "status", "end_reason", "suspended", "waiting_for", "created_at", "finished_at"]
    list_filter = ["status", "suspended", "workflow"]
    search_fields = ["id", "workflow"]
    escaped_fields = (
        "id",
        "workflow",
        "input",
        "output",
        "error",
        "waiting_for",
        "concurrency_key",
        "end_reason",
        "end_limit",
        "caused_by",
    )
    date_hierarchy = "created_at"
    show_full_result_count = False
    inlines = [StepInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
