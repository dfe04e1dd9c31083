"""The Limit admin: a limit's figures in six short columns, the pause and resume actions, and a
change form of its overrides (capacity, max hold, pool size per key, share; the box's base and
burst) saved through limits.services."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from limits import services
from limits.admin.base import NO_MAX_HOLD, SavedThroughServicesAdmin
from limits.admin.filters import DeclaredFilter, OverriddenFilter, PausedFilter
from limits.admin.forms import LimitOverridesForm
from limits.durations import format_duration
from limits.models import Limit, capacity_in_force
from stackbone.plumbing.access import OPERATE_LIMIT, actor


@admin.register(Limit)
class LimitAdmin(SavedThroughServicesAdmin):
    form = LimitOverridesForm
    # Six short columns: beside the filter at 1280px (with the admin's side navigation) nine did
    # not fit and the last was clipped (issue 15, item 10). Kind, reserved, undeclared and the
    # overrides are notes; the filters still select by each.
    list_display = ["name", "in_use_of_capacity", "waiting", "max_hold", "per_key_in_force", "notes"]
    list_filter = ["kind", PausedFilter, OverriddenFilter, DeclaredFilter]
    search_fields = ["name"]
    actions = ["pause_selected", "resume_selected"]
    fieldsets = [
        (None, {"fields": ["name", "declared", "figures"]}),
        (
            "Declared in the workspace config",
            {"fields": ["declared_capacity", "declared_max_hold", "declared_per_key_text"]},
        ),
        (
            "Operator overrides",
            {"fields": ["capacity", "max_hold", "per_key", "share", "on_full", "max_waiting", "max_waiting_per_key"]},
        ),
    ]
    box_fieldsets = [
        (None, {"fields": ["name", "kind", "declared", "figures"]}),
        ("Declared in the workspace config (run_concurrency)", {"fields": ["declared_base", "declared_burst_text"]}),
        ("Operator overrides", {"fields": ["base", "burst"]}),
    ]
    bound_fieldsets = [
        (None, {"fields": ["name", "kind", "declared", "figures"]}),
        ("Declared by its @workflow(concurrency=...)", {"fields": ["declared_capacity", "declared_per_key_text"]}),
        ("Operator overrides", {"fields": ["capacity", "per_key", "share"]}),
    ]
    readonly_fields = [
        "name",
        "kind",
        "declared",
        "figures",
        "declared_capacity",
        "declared_max_hold",
        "declared_per_key_text",
        "declared_base",
        "declared_burst_text",
    ]

    def get_fieldsets(self, request: HttpRequest, obj: Limit | None = None) -> Any:
        """A workflow's own bound has no max hold to show or override; the box, its base and burst."""
        if obj is not None and obj.is_box:
            return self.box_fieldsets
        if obj is not None and obj.is_workflow_bound:
            return self.bound_fieldsets
        return super().get_fieldsets(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # limits come from the workspace config

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # a limit that left the config is kept, undeclared

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return request.user.has_perm(OPERATE_LIMIT)

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(OPERATE_LIMIT)

    @admin.action(description="Pause selected limits", permissions=["operate"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Limit]) -> None:
        """SPEC 5.6, through services.pause_limit (audited as the admin user; a paused limit is
        left as it is, unrecorded)."""
        self._set_paused(request, queryset, paused=True)

    @admin.action(description="Resume selected limits", permissions=["operate"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Limit]) -> None:
        self._set_paused(request, queryset, paused=False)

    def _set_paused(self, request: HttpRequest, queryset: QuerySet[Limit], *, paused: bool) -> None:
        who, action = actor(request), services.pause_limit if paused else services.resume_limit
        rows = list(queryset.order_by("name").values_list("name", "paused_at"))
        names = [name for name, paused_at in rows if (paused_at is None) == paused]
        changed = []
        for name in names:
            try:
                action(name, actor=who)
            except services.LimitsError as error:  # forgotten by someone else meanwhile
                self.message_user(request, f"Not changed: {error.message}.", messages.ERROR)
            else:
                changed.append(name)
        done, state = ("Paused", "paused") if paused else ("Resumed", "running")
        if changed:
            self.message_user(request, f"{done} {len(changed)} limit(s): {', '.join(changed)}.", messages.SUCCESS)
        if len(rows) - len(names):
            self.message_user(
                request, f"{len(rows) - len(names)} limit(s) were already {state}: nothing changed for them.",
                messages.INFO,
            )  # fmt: skip

    @admin.display(description="in use")
    def in_use_of_capacity(self, limit: Limit) -> str:
        """Busy and reserved of the capacity, '3 / 5' ('3 / 5 (1 reserved)')."""
        reserved = f" ({limit.reserved_count} reserved)" if limit.reserved_count else ""
        return f"{limit.in_use} / {limit.capacity}{reserved}"

    @admin.display(description="waiting", ordering="waiting_count")
    def waiting(self, limit: Limit) -> int:
        return limit.waiting_count

    @admin.display(description="notes")
    def notes(self, limit: Limit) -> str:
        """What sets the limit apart: paused, a workflow's bound, undeclared, its overrides."""
        parts = ["paused"] if limit.paused else []
        if limit.is_workflow_bound:
            parts.append("workflow bound")
        if limit.is_box:
            parts.append(f"the box's run concurrency: base {limit.per_key}, burst {_burst(limit.burst)}")
        if not limit.declared:
            parts.append("undeclared")
        overridden = self.overrides(limit)
        if overridden != "—":
            parts.append(f"overridden: {overridden}")
        return "; ".join(parts) or "—"

    @admin.display(description="max hold")
    def max_hold(self, limit: Limit) -> str:
        return NO_MAX_HOLD if limit.is_workflow_bound or limit.is_box else format_duration(limit.max_hold_ms)

    @admin.display(description="declared max hold")
    def declared_max_hold(self, limit: Limit) -> str:
        return NO_MAX_HOLD if limit.is_workflow_bound else format_duration(limit.declared_max_hold_ms)

    @admin.display(description="per key")
    def per_key_in_force(self, limit: Limit) -> str:
        if limit.is_box:
            return f"base {limit.per_key} per workflow"
        return "—" if limit.per_key is None else str(limit.per_key)

    @admin.display(description="declared base")
    def declared_base(self, limit: Limit) -> str:
        return _none_or(limit.declared_per_key)

    @admin.display(description="declared burst")
    def declared_burst_text(self, limit: Limit) -> str:
        return _burst(limit.declared_burst)

    @admin.display(description="declared per key")
    def declared_per_key_text(self, limit: Limit) -> str:
        return "none (only the total applies)" if limit.declared_per_key is None else str(limit.declared_per_key)

    @admin.display(description="overridden")
    def overrides(self, limit: Limit) -> str:
        parts = []
        if limit.is_box:
            if limit.per_key_overridden:
                parts.append(f"base (declared {_none_or(limit.declared_per_key)})")
            if limit.burst_override is not None:
                parts.append(f"burst (declared {_burst(limit.declared_burst)})")
            return ", ".join(parts) or "—"
        if limit.capacity_overridden:
            parts.append(f"capacity (declared {limit.declared_capacity})")
        if limit.max_hold_overridden:
            parts.append(f"max hold (declared {format_duration(limit.declared_max_hold_ms)})")
        if limit.per_key_overridden:
            parts.append(f"per key (declared {_none_or(limit.declared_per_key)})")
        return ", ".join(parts) or "—"

    @admin.display(description="figures")
    def figures(self, limit: Limit) -> str:
        if limit.is_box:
            return (
                f"{limit.in_use} runs executing ({limit.reserved_count} starting), {limit.waiting_count} waiting for "
                f"the box; base {limit.per_key}, burst {_burst(limit.burst)}: at most {limit.capacity} at once, "
                f"no workflow more than {limit.per_key}" + ("; paused" if limit.paused else "")
            )
        return (
            f"{limit.busy_count} busy, {limit.reserved_count} reserved, {limit.waiting_count} waiting; "
            f"{'total' if limit.is_workflow_bound else 'capacity'} {limit.capacity}, "
            f"max hold {'none' if limit.is_workflow_bound else format_duration(limit.max_hold_ms)}, "
            f"per key {_none_or(limit.per_key)}"
            + _when_full(limit)
            + ("; paused: grants nothing until resumed" if limit.paused else "")
        )

    def save_model(self, request: HttpRequest, obj: Limit, form: forms.ModelForm[Limit], change: bool) -> None:
        """Never obj.save(): each changed override goes through its service. The pool size per key
        must stay within the capacity when set_per_key checks it: on a lower capacity it is set
        first, on a higher one after."""
        who, data = actor(request), form.cleaned_data
        if obj.is_box:
            self._save_box(request, obj, data)
            return
        set_capacity = data["capacity"] != obj.capacity_override
        set_per_key = data["per_key"] != obj.per_key_override
        lowering = set_capacity and capacity_in_force(data["capacity"], obj.declared_capacity) < obj.capacity
        try:
            if set_per_key and lowering:
                services.set_per_key(obj.name, data["per_key"], actor=who)
            if set_capacity:
                services.set_capacity(obj.name, data["capacity"], actor=who)
            if set_per_key and not lowering:
                services.set_per_key(obj.name, data["per_key"], actor=who)
            if data.get("max_hold") != obj.max_hold_override_ms:  # a bound's form has no max hold
                services.set_max_hold(obj.name, data["max_hold"], actor=who)
            if data.get("share", "") != obj.share_override:  # SPEC 13.5; empty: the declared share
                services.set_share(obj.name, data["share"] or None, actor=who)
            if "on_full" in data and data["on_full"] != obj.on_full_override:  # SPEC 14.6
                services.set_on_full(obj.name, data["on_full"] or None, actor=who)
            for field, per_key in (("max_waiting", False), ("max_waiting_per_key", True)):
                if field in data and data[field] != getattr(obj, f"{field}_override"):
                    services.set_max_waiting(obj.name, data[field], per_key=per_key, actor=who)
        except services.LimitsError as error:  # changed by someone else since the form was checked
            self.message_user(request, f"Not saved: {error.message}.", messages.ERROR)
        obj.refresh_from_db()

    def _save_box(self, request: HttpRequest, obj: Limit, data: dict[str, Any]) -> None:
        """The box's base and burst, those changed, in one call of services.set_box (audited)."""
        changes = {
            field: data[field]
            for field, override in (("base", obj.per_key_override), ("burst", obj.burst_override))
            if data[field] != override
        }
        if changes:
            try:
                services.set_box(**changes, actor=actor(request))
            except services.LimitsError as error:  # changed by someone else since the form was checked
                self.message_user(request, f"Not saved: {error.message}.", messages.ERROR)
        obj.refresh_from_db()

    def construct_change_message(
        self, request: HttpRequest, form: forms.Form, formsets: Any, add: bool = False
    ) -> list[dict[str, Any]]:
        fields = ("capacity", "max_hold", "per_key", "base", "burst", "on_full", "max_waiting", "max_waiting_per_key")
        changed = [name for name in form.changed_data if name in fields]
        return [{"changed": {"fields": changed}}]


def _when_full(limit: Limit) -> str:
    """SPEC 14: what a full limit does, its caps and what they answered, when any is set."""
    if limit.on_full == "wait" and limit.max_waiting is None and limit.max_waiting_per_key is None:
        return ""
    return (
        f"; when full: {limit.on_full}, max waiting {_none_or(limit.max_waiting)}, per key "
        f"{_none_or(limit.max_waiting_per_key)} ({limit.skipped_count} skipped, {limit.refused_count} refused, "
        f"{limit.replaced_count} replaced"
        + (f", {limit.cancelled_count} cancelled)" if limit.kind == Limit.Kind.WORKFLOW else ")")
    )


def _none_or(value: int | None) -> str:
    return "none" if value is None else str(value)


def _burst(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"
