"""Studio forms. They only turn what the browser sent into Python values; the rules (1..100000,
at most 30 days) are checked by limits.services, whose LimitsError lands next to the field."""

from __future__ import annotations

import re

from django import forms

from limits.config import CAPACITY_HELP, KEY_MAX_LENGTH
from limits.durations import DURATION_HELP

_WHOLE_NUMBER = re.compile(r"[0-9]{1,12}")

CAPACITY_REQUIRED = f"Enter a capacity: {CAPACITY_HELP}."
CAPACITY_NOT_A_NUMBER = "{value!r} is not a whole number; capacity must be " + CAPACITY_HELP + "."
MAX_HOLD_REQUIRED = f"Enter a max hold: {DURATION_HELP}."
POOL_HELP = "a whole number from 1 to the limit's capacity"
PER_KEY_REQUIRED = f"Enter a pool size per key: {POOL_HELP}."
PER_KEY_NOT_A_NUMBER = "{value!r} is not a whole number; a pool size per key must be " + POOL_HELP + "."
POOL_REQUIRED = f"Enter a pool size for this key: {POOL_HELP}."
POOL_NOT_A_NUMBER = "{value!r} is not a whole number; a key's pool size must be " + POOL_HELP + "."


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


class PerKeyForm(forms.Form):
    per_key = forms.CharField(
        max_length=20,
        error_messages={"required": PER_KEY_REQUIRED},
        widget=forms.TextInput(attrs={"inputmode": "numeric", "autocomplete": "off"}),
    )

    def clean_per_key(self) -> int:
        raw: str = self.cleaned_data["per_key"]
        if _WHOLE_NUMBER.fullmatch(raw) is None:
            raise forms.ValidationError(PER_KEY_NOT_A_NUMBER.format(value=raw))
        return int(raw)


class KeyForm(forms.Form):
    """The key a pool form acts on, as sent back by its row (the service checks it)."""

    key = forms.CharField(max_length=KEY_MAX_LENGTH, strip=False)


class KeyPoolForm(KeyForm):
    pool = forms.CharField(
        max_length=20,
        error_messages={"required": POOL_REQUIRED},
        widget=forms.TextInput(attrs={"inputmode": "numeric", "autocomplete": "off", "size": "4"}),
    )

    def clean_pool(self) -> int:
        raw: str = self.cleaned_data["pool"]
        if _WHOLE_NUMBER.fullmatch(raw) is None:
            raise forms.ValidationError(POOL_NOT_A_NUMBER.format(value=raw))
        return int(raw)


class ResetForm(forms.Form):
    field = forms.ChoiceField(choices=[("capacity", "capacity"), ("max_hold", "max hold"), ("per_key", "per key")])


class ReleaseForm(forms.Form):
    slot = forms.CharField(max_length=40)


def duration_input(ms: int) -> str:
    """A max hold as the form accepts it back: the largest unit that divides it exactly."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
