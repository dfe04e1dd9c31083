"""The Django admin for limits. Overrides (capacity, max hold, pool size per key, a key's own
pool) go through limits.services (so raises grant waiting runs and every change is audited);
counters, keys' counters, slots and the queue are read-only, so the admin can never put a
counter out of step with its rows."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.utils.decorators import method_decorator
from django.views.decorators.csrf import csrf_protect

from limits import services
from limits.config import (
    CAPACITY_HELP,
    check_base,
    check_burst,
    check_capacity,
    check_ceiling,
    check_minimum,
    check_per_key,
    check_share,
    check_weight,
)
from limits.durations import DURATION_HELP, DurationError, format_duration, parse_duration
from limits.forms import POOL_HELP, decimal_or_text, duration_input, number_or_text, shortened
from limits.models import AuditEvent, ForgottenLimit, Limit, LimitKey, QueueEntry, Slot
from limits.printable import printable
from stackbone.plumbing.access import OPERATE_LIMIT, actor

SEARCH_MAX_LENGTH = 200  # the longest text any admin searches (a label)
BAD_SELECTED = "the selected row {value!r} is not the id of a {name}: nothing done"
NO_MAX_HOLD = "—"  # a workflow's own bound: a run holds its slot until it ends

if TYPE_CHECKING:  # the stubs' generic classes, which are not subscriptable at run time
    AnyModelAdmin = admin.ModelAdmin[Any]
    _DateBoundsBase = admin.ModelAdmin[Any]  # what the mixin is mixed into
    LimitModelForm = forms.ModelForm[Limit]
    LimitKeyModelForm = forms.ModelForm[LimitKey]
else:
    AnyModelAdmin = admin.ModelAdmin
    _DateBoundsBase = object
    LimitModelForm = forms.ModelForm
    LimitKeyModelForm = forms.ModelForm


class DateBoundsMixin(_DateBoundsBase):
    """Out-of-range dates in a changelist's date hierarchy or date filter are a bad lookup, not a
    500. Django turns a bad date value into "invalid lookup" (a redirect to ?e=1), except a year,
    month or day too large for a C int (?created_at__year=99999999999), which raises
    OverflowError while the changelist is built. Every ModelAdmin here uses this mixin (through
    BoundedSearchAdmin), so a date hierarchy added later is guarded too."""

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        try:
            return super().get_changelist_instance(request)
        except OverflowError:
            raise IncorrectLookupParameters from None


class BoundedSearchAdmin(DateBoundsMixin, AnyModelAdmin):
    """A search term longer than any searched field can match nothing: answer with no rows
    instead of handing the database a pattern it refuses (SQLite: "LIKE pattern too complex")."""

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Any], search_term: str) -> Any:
        if len(search_term) > SEARCH_MAX_LENGTH:
            return queryset.none(), False
        return super().get_search_results(request, queryset, search_term)


def escaped(name: str) -> Callable[[Any, models.Model], str | None]:
    """A read-only display of the text field `name`, escaped by limits.printable (a text field
    keeps its lines; a JSON field is shown as JSON), sorted by the field itself."""

    @admin.display(description=name.replace("_", " "), ordering=name)
    def show(model_admin: Any, obj: models.Model) -> str | None:
        value, field = getattr(obj, name), obj._meta.get_field(name)
        if value is None:
            return None  # the admin's empty value
        if isinstance(field, models.JSONField):
            return printable(json.dumps(value, ensure_ascii=False, cls=field.encoder))
        return printable(value, lines=isinstance(field, models.TextField))

    return show


class EscapedTextAdmin(BoundedSearchAdmin):
    """Shows the user-supplied text fields named in `escaped_fields` (keys, labels, run ids,
    errors) with control and bidirectional-formatting characters written as escapes (`\\u202e`,
    `\\x1b`), as Studio and the CLI show them: a right-to-left override cannot reverse the
    columns after it. Each field `f` is shown, in the changelist and on the change page, by the
    read-only display `f_escaped` (made here), which sorts by `f`; searches still match the stored
    text. list_display, list_display_links, fields and readonly_fields name the fields themselves."""

    escaped_fields: ClassVar[tuple[str, ...]] = ()

    def response_action(self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any) -> Any:
        """A selected row that is no id of this model (a hand-made POST, `_selected_action=abc` for
        a limit's numeric id) is a 400 that says so, as Studio's forms answer bad input; Django
        would pass it to the query, and answer 500 (issue 45)."""
        pk = self.model._meta.pk
        for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
            try:
                if pk is not None:
                    pk.to_python(value)
            except ValidationError:
                name = self.model._meta.verbose_name
                return HttpResponseBadRequest(BAD_SELECTED.format(value=printable(value), name=name), "text/plain")
        return super().response_action(request, queryset, *args, **kwargs)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls.escaped_fields:
            setattr(cls, f"{name}_escaped", escaped(name))

    def _escaped(self, names: Sequence[Any]) -> list[Any]:
        """`names` with each escaped field replaced by its display, each once, in place."""
        shown = [f"{name}_escaped" if name in self.escaped_fields else name for name in names]
        return list(dict.fromkeys(shown))

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        return self._escaped(super().get_list_display(request))

    def get_list_display_links(self, request: HttpRequest, list_display: Any) -> Any:
        links = super().get_list_display_links(request, list_display)
        return links if links is None else self._escaped(links)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return self._escaped(super().get_fields(request, obj))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        escaped_names = [f"{name}_escaped" for name in self.escaped_fields]
        return self._escaped([*super().get_readonly_fields(request, obj), *escaped_names])


class SavedThroughServicesAdmin(EscapedTextAdmin):
    """A change form whose save calls limits.services instead of obj.save()."""

    @method_decorator(csrf_protect)
    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # ModelAdmin wraps this view in transaction.atomic(); the services run their own durable
        # transaction (the audit row commits with the change), which cannot nest inside it.
        response: HttpResponse = self._changeform_view(  # type: ignore[attr-defined]  # Django's, not in the stubs
            request, object_id, form_url, extra_context
        )
        return response


class ReadOnlyAdmin(EscapedTextAdmin):
    """Rows written only by the services: visible, never added, changed or deleted here. An
    operator (limits.operate_limit) may view them, so the Slots list and its release action need
    no other permission."""

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return super().has_view_permission(request, obj) or request.user.has_perm(OPERATE_LIMIT)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class OverriddenFilter(admin.SimpleListFilter):
    title = "overridden"
    parameter_name = "overridden"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [
            ("any", "Capacity, max hold or per key"),
            ("capacity", "Capacity"),
            ("max_hold", "Max hold"),
            ("per_key", "Per key"),
            ("none", "None (declared values)"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Limit]) -> QuerySet[Limit]:
        capacity, max_hold = Q(capacity_override__isnull=False), Q(max_hold_override_ms__isnull=False)
        per_key = Q(per_key_override__isnull=False)
        match self.value():
            case "any":
                return queryset.filter(capacity | max_hold | per_key)
            case "capacity":
                return queryset.filter(capacity)
            case "max_hold":
                return queryset.filter(max_hold)
            case "per_key":
                return queryset.filter(per_key)
            case "none":
                return queryset.exclude(capacity | max_hold | per_key)
        return queryset


class DeclaredFilter(admin.SimpleListFilter):
    title = "declared"
    parameter_name = "declared"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [("yes", "Declared"), ("no", "Undeclared (left the config)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Limit]) -> QuerySet[Limit]:
        if self.value() in ("yes", "no"):
            return queryset.filter(declared=self.value() == "yes")
        return queryset


class PausedFilter(admin.SimpleListFilter):
    title = "grants"
    parameter_name = "paused"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [("yes", "Paused"), ("no", "Running")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Limit]) -> QuerySet[Limit]:
        if self.value() in ("yes", "no"):
            return queryset.filter(paused_at__isnull=self.value() == "no")
        return queryset


def _whole_number(raw: str) -> int | str:
    """As the Studio forms and the CLI read a number (limits.forms.number_or_text), so the admin's
    messages are theirs ("capacity must be a whole number from 1 to 100000, not -1")."""
    return number_or_text(raw)


class LimitOverridesForm(LimitModelForm):
    """Only the overrides, as an operator types them; empty means 'the declared value'. Checked
    with the same functions the services use; saved through the services."""

    capacity = forms.CharField(required=False, help_text=f"Empty: use the declared value. Otherwise {CAPACITY_HELP}.")
    max_hold = forms.CharField(required=False, help_text=f"Empty: use the declared value. Otherwise {DURATION_HELP}.")
    per_key = forms.CharField(
        required=False,
        label="Pool size per key",
        help_text=f"Empty: use the declared value (none declared: only the total applies). Otherwise {POOL_HELP}.",
    )

    share = forms.ChoiceField(
        required=False,
        choices=[
            ("", "the declared share"),
            ("fifo", "fifo: first come, first served"),
            ("fair", "fair: between keys"),
        ],
        help_text="SPEC 13: 'fair' gives a freed slot to the key holding least for its weight (keys under their "
        "min first); set weights and mins on the limit's keys.",
    )

    base = forms.CharField(
        required=False,
        help_text=f"Empty: use the declared value. Otherwise {CAPACITY_HELP}: no single workflow executes more "
        "runs at once.",
    )
    burst = forms.CharField(
        required=False,
        help_text="Empty: use the declared value. Otherwise a number from 1.0 to 10.0: the box executes at most "
        "floor(base x burst) runs at once.",
    )

    class Meta:
        model = Limit
        fields: list[str] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limit = self.instance
        if limit.pk and limit.is_box:
            # The box's run concurrency (SPEC 12.5): its base and burst, through services.set_box;
            # its capacity (the ceiling) and pools follow them, and it has no max hold.
            for name in ("capacity", "max_hold", "per_key", "share"):
                del self.fields[name]
            self.initial["base"] = "" if limit.per_key_override is None else str(limit.per_key_override)
            self.initial["burst"] = "" if limit.burst_override is None else f"{limit.burst_override:g}"
            return
        del self.fields["base"], self.fields["burst"]
        if limit.pk and limit.is_workflow_bound:
            # A workflow's own bound: its capacity is the workflow's total, and it has no max hold.
            self.fields["capacity"].label = "Total"
            del self.fields["max_hold"]
        if limit.pk:
            self.initial["capacity"] = "" if limit.capacity_override is None else str(limit.capacity_override)
            self.initial["max_hold"] = (
                "" if limit.max_hold_override_ms is None else duration_input(limit.max_hold_override_ms)
            )
            self.initial["per_key"] = "" if limit.per_key_override is None else str(limit.per_key_override)
            self.initial["share"] = limit.share_override

    def clean_share(self) -> str:
        value = self.cleaned_data.get("share") or ""
        try:
            return check_share(value) if value else ""
        except ValueError as error:
            raise forms.ValidationError(f"Share {error}.") from None

    def clean_capacity(self) -> int | None:
        raw = self.cleaned_data["capacity"].strip()
        if not raw:
            return None
        try:
            return check_capacity(_whole_number(raw))
        except ValueError as error:
            raise forms.ValidationError(f"Capacity {error}.") from None

    def clean_base(self) -> int | None:
        raw = self.cleaned_data["base"].strip()
        if not raw:
            return None
        try:
            return check_base(_whole_number(raw))
        except ValueError as error:
            raise forms.ValidationError(_sentence(str(error)) + ".") from None

    def clean_burst(self) -> float | None:
        raw = self.cleaned_data["burst"].strip()
        if not raw:
            return None
        try:
            return check_burst(decimal_or_text(raw))
        except ValueError as error:
            raise forms.ValidationError(_sentence(str(error)) + ".") from None

    def clean_max_hold(self) -> int | None:
        raw = self.cleaned_data["max_hold"].strip()
        if not raw:
            return None
        try:
            return parse_duration(shortened(raw))  # text: a bare number needs a unit, as in Studio
        except DurationError as error:
            raise forms.ValidationError(f"Max hold {error}.") from None

    def clean(self) -> dict[str, Any]:
        """A changed pool size per key is checked against the capacity in force after the save,
        as set_per_key checks it (LimitAdmin.save_model orders the two changes so it holds)."""
        cleaned = super().clean() or {}
        if self.instance.is_box and "base" in cleaned and "burst" in cleaned:
            limit = self.instance
            base = limit.declared_per_key if cleaned["base"] is None else cleaned["base"]
            burst = limit.declared_burst if cleaned["burst"] is None else cleaned["burst"]
            try:
                check_ceiling(int(base or 0), float(burst or 0))
            except ValueError as error:
                self.add_error("base", _sentence(str(error)) + ".")
        if "per_key" not in cleaned:
            return cleaned
        limit, raw = self.instance, cleaned["per_key"].strip()
        value = cleaned["per_key"] = _whole_number(raw) if raw else None
        if value is None or value == limit.per_key_override:
            return cleaned
        if "capacity" in cleaned:
            capacity = limit.declared_capacity if cleaned["capacity"] is None else cleaned["capacity"]
        else:
            capacity = limit.capacity  # the capacity field was refused: it stays as it is
        try:
            cleaned["per_key"] = check_per_key(value, capacity)
        except ValueError as error:
            self.add_error("per_key", f"Pool size per key {error}.")
        return cleaned


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
        ("Operator overrides", {"fields": ["capacity", "max_hold", "per_key", "share"]}),
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
            f"per key {_none_or(limit.per_key)}" + ("; paused: grants nothing until resumed" if limit.paused else "")
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
        lowering = set_capacity and (data["capacity"] or obj.declared_capacity) < obj.capacity
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
        fields = ("capacity", "max_hold", "per_key", "base", "burst")
        changed = [name for name in form.changed_data if name in fields]
        return [{"changed": {"fields": changed}}]


def _none_or(value: int | None) -> str:
    return "none" if value is None else str(value)


def _burst(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:]


class LimitKeyPoolForm(LimitKeyModelForm):
    """A key's own pool size, as an operator types it; empty means the limit's pool size per key.
    Checked like set_per_key checks it; saved through it."""

    pool = forms.CharField(
        required=False,
        label="Own pool size",
        help_text=f"Empty: the limit's pool size per key (or, without one, only the total). Otherwise {POOL_HELP}.",
    )
    weight = forms.CharField(
        required=False,
        help_text="On a fair limit (SPEC 13): its share grows with it. Empty: 1. Otherwise a whole number, 1 to 100.",
    )
    min = forms.CharField(
        required=False,
        label="Min",
        help_text="On a fair limit: served first while it holds fewer. Empty: 0. Otherwise 0 to the limit's capacity.",
    )

    class Meta:
        model = LimitKey
        fields: list[str] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        row = self.instance
        if row.pk:
            self.initial["pool"] = "" if row.pool_override is None else str(row.pool_override)
            self.initial["weight"] = str(row.weight)
            self.initial["min"] = str(row.minimum)

    def clean_pool(self) -> int | None:
        raw = self.cleaned_data["pool"].strip()
        if not raw:
            return None
        try:
            return check_per_key(_whole_number(raw), self.instance.limit.capacity)
        except ValueError as error:
            raise forms.ValidationError(f"Pool size {error}.") from None

    def clean_weight(self) -> int | None:
        raw = self.cleaned_data["weight"].strip()
        if not raw:
            return None
        try:
            return check_weight(_whole_number(raw))
        except ValueError as error:
            raise forms.ValidationError(f"Weight {error}.") from None

    def clean_min(self) -> int | None:
        raw = self.cleaned_data["min"].strip()
        if not raw:
            return None
        try:
            return check_minimum(_whole_number(raw), self.instance.limit.capacity)
        except ValueError as error:
            raise forms.ValidationError(f"Min {error}.") from None


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
        "pool_in_force",
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
    fields = ["limit", "key", "busy_count", "reserved_count", "waiting_count", "pool", "pool_in_force", "weight", "min"]
    readonly_fields = ["limit", "key", "busy_count", "reserved_count", "waiting_count", "pool_in_force"]

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return super().has_view_permission(request, obj) or request.user.has_perm(OPERATE_LIMIT)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a key's row is made the first time the key is used or given a pool

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # its counters follow live slots and waiting runs

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return request.user.has_perm(OPERATE_LIMIT)

    @admin.display(description="pool override")
    def pool_override_text(self, row: LimitKey) -> str:
        return "—" if row.pool_override is None else str(row.pool_override)

    @admin.display(description="pool in force")
    def pool_in_force(self, row: LimitKey) -> str:
        if row.pool_override is not None:
            return f"{row.pool_override} (own)"
        per_key = row.limit.per_key
        return "— (only the limit's total applies)" if per_key is None else f"{per_key} (the limit's per key)"

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
