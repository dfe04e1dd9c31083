"""The admin's change forms for a limit's overrides and a key's own pool, weight and min: the
values as an operator types them (empty: the declared or default value), checked with the
functions the services use (limits.config), so the messages are Studio's and the CLI's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms

from limits.config import (
    CAPACITY_HELP,
    check_base,
    check_burst,
    check_capacity,
    check_ceiling,
    check_max_waiting,
    check_minimum,
    check_on_full,
    check_per_key,
    check_share,
    check_weight,
)
from limits.durations import DURATION_HELP, DurationError, parse_duration
from limits.forms import POOL_HELP, decimal_or_text, duration_input, number_or_text, shortened
from limits.models import Limit, LimitKey, capacity_in_force

if TYPE_CHECKING:  # the stubs' generic classes, which are not subscriptable at run time
    LimitModelForm = forms.ModelForm[Limit]
    LimitKeyModelForm = forms.ModelForm[LimitKey]
else:
    LimitModelForm = forms.ModelForm
    LimitKeyModelForm = forms.ModelForm


def _whole_number(raw: str) -> int | str:
    """As the Studio forms and the CLI read a number (limits.forms.number_or_text), so the admin's
    messages are theirs ("capacity must be a whole number from 1 to 100000, not -1")."""
    return number_or_text(raw)


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:]


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

    on_full = forms.ChoiceField(
        required=False,
        label="When full",
        choices=[
            ("", "the declared value"),
            ("wait", "wait: queue the acquisition"),
            ("skip", "skip: answer it at once (SlotUnavailableError), queue nothing"),
            ("replace", "replace: take the place of its key's runs waiting (theirs raise SlotReplacedError)"),
            ("cancel_running", "cancel_running: a workflow's own bound only: cancel the key's oldest running run"),
        ],
        help_text="SPEC 14: what an acquisition that cannot be granted at once does.",
    )
    max_waiting = forms.CharField(
        required=False,
        label="Max waiting",
        help_text="SPEC 14.5: empty: use the declared value. Otherwise 1 to 1,000,000 runs in the queue; "
        "past it an acquisition is refused. Lowering it takes nobody out of the queue.",
    )
    max_waiting_per_key = forms.CharField(
        required=False,
        label="Max waiting per key",
        help_text="Empty: use the declared value. Otherwise 1 to 1,000,000 runs of one key in the queue.",
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
            for name in ("capacity", "max_hold", "per_key", "share", "on_full", "max_waiting", "max_waiting_per_key"):
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
            self.initial["on_full"] = limit.on_full_override
            for field in ("max_waiting", "max_waiting_per_key"):
                override = getattr(limit, f"{field}_override")
                self.initial[field] = "" if override is None else str(override)

    def clean_on_full(self) -> str:
        value = self.cleaned_data.get("on_full") or ""
        try:
            return check_on_full(value, bound=self.instance.kind == Limit.Kind.WORKFLOW) if value else ""
        except ValueError as error:
            raise forms.ValidationError(f"When full {error}.") from None

    def clean_max_waiting(self) -> int | None:
        return self._cap("max_waiting", "Max waiting")

    def clean_max_waiting_per_key(self) -> int | None:
        return self._cap("max_waiting_per_key", "Max waiting per key")

    def _cap(self, field: str, label: str) -> int | None:
        raw = self.cleaned_data[field].strip()
        if not raw:
            return None
        try:
            return check_max_waiting(_whole_number(raw))
        except ValueError as error:
            raise forms.ValidationError(f"{label} {error}.") from None

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
            capacity = capacity_in_force(cleaned["capacity"], limit.declared_capacity)
        else:
            capacity = limit.capacity  # the capacity field was refused: it stays as it is
        try:
            cleaned["per_key"] = check_per_key(value, capacity)
        except ValueError as error:
            self.add_error("per_key", f"Pool size per key {error}.")
        return cleaned


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
