"""The LimitKey admin: a limit's keys with their counters (read-only) and their own pool size,
weight and min, set or reset through limits.services."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest

from limits import services
from limits.admin.base import SavedThroughServicesAdmin
from limits.admin.forms import LimitKeyPoolForm
from limits.models import LimitKey, pool_size
from stackbone.plumbing.access import OPERATE_LIMIT, actor


@admin.register(LimitKey)
class LimitKeyAdmin(SavedThroughServicesAdmin):
    """A limit's keys with their counters (read-only) and their own pool size, set or reset
    through services.set_per_key. Rows come from use: none is added or deleted here."""

    form = LimitKeyPoolForm
    list_display = [
        "limit",
        "key",
        "busy_count",
        "reserved_count",
        "waiting_count",
        "pool_override_text",
        "pool_size_in_force",
        "weight",
        "minimum",
    ]
    list_display_links = ["key"]
    list_filter = ["limit"]
    list_select_related = ["limit"]
    search_fields = ["key"]
    escaped_fields = ("key",)
    ordering = ["limit__name", "-busy_count", "key"]
    show_full_result_count = False
    fields = [
        "limit",
        "key",
        "busy_count",
        "reserved_count",
        "waiting_count",
        "pool",
        "pool_size_in_force",
        "weight",
        "min",
    ]
    readonly_fields = ["limit", "key", "busy_count", "reserved_count", "waiting_count", "pool_size_in_force"]

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return super().has_view_permission(request, obj) or request.user.has_perm(OPERATE_LIMIT)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a key's row is made the first time the key is used or given a pool

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # its counters follow live slots and waiting runs

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return request.user.has_perm(OPERATE_LIMIT)

    @admin.display(description="own pool size")
    def pool_override_text(self, row: LimitKey) -> str:
        return "—" if row.pool_override is None else str(row.pool_override)

    @admin.display(description="pool size in force")
    def pool_size_in_force(self, row: LimitKey) -> str:
        """The key's pool size in force (limits.models.pool_size) and where it comes from: '3 (the
        key's own)', '2 (the limit's per key)', or none, when only the limit's total applies."""
        size = pool_size(row.pool_override, row.limit.per_key)
        if size is None:
            return "— (no pool size: only the limit's total applies)"
        source = "the key's own" if row.pool_override is not None else "the limit's per key"
        return f"{size} ({source})"

    def save_model(self, request: HttpRequest, obj: LimitKey, form: forms.ModelForm[LimitKey], change: bool) -> None:
        """Never obj.save(): the pool goes through set_per_key, the weight through set_weight and
        the min through set_min (each audited; a raise grants at once). Empty resets."""
        data, who, name = form.cleaned_data, actor(request), obj.limit.name
        stored = LimitKey.objects.get(pk=obj.pk)  # `weight` is also the model's: the form set it on obj
        try:
            if data["pool"] != obj.pool_override:
                services.set_per_key(name, data["pool"], key=obj.key, actor=who)
            if (data["weight"] or 1) != stored.weight:
                services.set_weight(name, data["weight"], key=obj.key, actor=who)
            if (data["min"] or 0) != stored.minimum:
                services.set_min(name, data["min"], key=obj.key, actor=who)
        except services.LimitsError as error:  # the capacity changed since the form was checked
            self.message_user(request, f"Not saved: {error.message}.", messages.ERROR)
        obj.refresh_from_db()

    def construct_change_message(
        self, request: HttpRequest, form: forms.Form, formsets: Any, add: bool = False
    ) -> list[dict[str, Any]]:
        return [{"changed": {"fields": [name for name in form.changed_data if name in ("pool", "weight", "min")]}}]
