"""Studio forms. They only turn what the browser sent into Python values; the rules (1..100000,
at most 30 days) are checked by limits.services, whose LimitsError lands next to the field."""

from __future__ import annotations

import re

from django import forms

from limits.config import CAPACITY_HELP
from limits.durations import DURATION_HELP

_WHOLE_NUMBER = re.compile(r"[0-9]{1,12}")

CAPACITY_REQUIRED = f"Enter a capacity: {CAPACITY_HELP}."
CAPACITY_NOT_A_NUMBER = "{value!r} is not a whole number; capacity must be " + CAPACITY_HELP + "."
MAX_HOLD_REQUIRED = f"Enter a max hold: {DURATION_HELP}."


class CapacityForm(forms.Form):
    capacity = forms.CharField(
        max_length=20,
        error_messages={"required": CAPACITY_REQUIRED},
        widget=forms.TextInput(attrs={"inputmode": "numeric", "autocomplete": "off"}),
    )

    def clean_capacity(self) -> int:
        raw: str = self.cleaned_data["capacity"]
        if _WHOLE_NUMBER.fullmatch(raw) is None:
            raise forms.ValidationError(CAPACITY_NOT_A_NUMBER.format(value=raw))
        return int(raw)


class MaxHoldForm(forms.Form):
    max_hold = forms.CharField(
        max_length=32,
        error_messages={"required": MAX_HOLD_REQUIRED},
        widget=forms.TextInput(attrs={"autocomplete": "off", "placeholder": "e.g. 45m"}),
    )

    def clean_max_hold(self) -> int | str:
        raw: str = self.cleaned_data["max_hold"]
        # A bare number is milliseconds, as in the config; the service checks the range.
        return int(raw) if _WHOLE_NUMBER.fullmatch(raw) else raw


class ResetForm(forms.Form):
    field = forms.ChoiceField(choices=[("capacity", "capacity"), ("max_hold", "max hold")])


class ReleaseForm(forms.Form):
    slot = forms.CharField(max_length=40)


def duration_input(ms: int) -> str:
    """A max hold as the form accepts it back: the largest unit that divides it exactly."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
