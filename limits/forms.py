"""Studio forms. They only turn what the browser sent into Python values; the rules (1..100000,
at most 30 days) are checked by limits.services, whose LimitsError lands next to the field. So a
bad capacity reads as it does in the CLI and the API ("capacity must be a whole number from 1 to
100000, not -1"): one function holds each message (limits.config.check_capacity,
check_per_key; limits.durations.parse_duration). No field has a `maxlength`: a browser would cut
a 26-digit number silently; a value longer than VALUE_MAX_LENGTH is refused with the same
message, shown shortened."""

from __future__ import annotations

import re

from django import forms

from limits.config import CAPACITY_HELP, KEY_MAX_LENGTH
from limits.durations import DURATION_HELP

# Signed, so '-1' reaches the range check ("..., not -1") as it does from the CLI. At most 30
# digits: int() of thousands of digits is slow (and refused past 4300); the check refuses the
# text as it is anyway.
_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]{1,30}")
VALUE_MAX_LENGTH = 64  # longer text is shown cut, with its length, in the message

CAPACITY_REQUIRED = f"Enter a capacity: {CAPACITY_HELP}."
MAX_HOLD_REQUIRED = f"Enter a max hold: {DURATION_HELP}."
POOL_HELP = "a whole number from 1 to the limit's capacity"
PER_KEY_REQUIRED = f"Enter a pool size per key: {POOL_HELP}."
POOL_REQUIRED = f"Enter a pool size for this key: {POOL_HELP}."
SHARE_REQUIRED = "Choose a share: fifo or fair."


def number_or_text(raw: str) -> int | str:
    """What a number field sent, as the CLI reads its argument: a whole number (signed) as an
    int, anything else as it is (shortened past VALUE_MAX_LENGTH), for the service to refuse
    with the message of the CLI and the API."""
    if _WHOLE_NUMBER.fullmatch(raw):
        return int(raw)
    return shortened(raw)


def shortened(raw: str) -> str:
    if len(raw) <= VALUE_MAX_LENGTH:
        return raw
    return f"{raw[:VALUE_MAX_LENGTH]}… ({len(raw)} characters)"


class CapacityForm(forms.Form):
    capacity = forms.CharField(
        error_messages={"required": CAPACITY_REQUIRED},
        widget=forms.TextInput(attrs={"inputmode": "numeric", "autocomplete": "off"}),
    )

    def clean_capacity(self) -> int | str:
        return number_or_text(self.cleaned_data["capacity"])


class MaxHoldForm(forms.Form):
    max_hold = forms.CharField(
        error_messages={"required": MAX_HOLD_REQUIRED},
        widget=forms.TextInput(attrs={"autocomplete": "off", "placeholder": "e.g. 45m"}),
    )

    def clean_max_hold(self) -> str:
        # Always text: a bare number ('45') is refused by the service with a message naming the
        # units, never taken as milliseconds.
        return shortened(self.cleaned_data["max_hold"])


class PerKeyForm(forms.Form):
    per_key = forms.CharField(
        error_messages={"required": PER_KEY_REQUIRED},
        widget=forms.TextInput(attrs={"inputmode": "numeric", "autocomplete": "off"}),
    )

    def clean_per_key(self) -> int | str:
        return number_or_text(self.cleaned_data["per_key"])


_DECIMAL = re.compile(r"[+-]?([0-9]{1,12}(\.[0-9]{0,12})?|\.[0-9]{1,12})")
BASE_REQUIRED = f"Enter a base: {CAPACITY_HELP}."
BURST_REQUIRED = "Enter a burst: a number from 1.0 to 10.0."


def decimal_or_text(raw: str) -> float | str:
    """A burst as the CLI reads it: a decimal number as a float, anything else as it is
    (shortened), for the service to refuse naming the field."""
    if _DECIMAL.fullmatch(raw):
        return float(raw)
    return shortened(raw)


class BoxForm(forms.Form):
    """The box's run concurrency (SPEC 12.5): its base and burst, or `reset` of one of them."""

    base = forms.CharField(
        required=False, widget=forms.TextInput(attrs={"inputmode": "numeric", "autocomplete": "off"})
    )
    burst = forms.CharField(
        required=False, widget=forms.TextInput(attrs={"inputmode": "decimal", "autocomplete": "off"})
    )
    reset = forms.ChoiceField(required=False, choices=[("", ""), ("base", "base"), ("burst", "burst")])

    def clean_base(self) -> int | str | None:
        raw = self.cleaned_data["base"]
        if not raw and not self.data.get("reset"):
            raise forms.ValidationError(BASE_REQUIRED)
        return number_or_text(raw) if raw else None

    def clean_burst(self) -> float | str | None:
        raw = self.cleaned_data["burst"]
        if not raw and not self.data.get("reset"):
            raise forms.ValidationError(BURST_REQUIRED)
        return decimal_or_text(raw) if raw else None


class KeyForm(forms.Form):
    """The key a pool form acts on, as sent back by its row (the service checks it)."""

    key = forms.CharField(max_length=KEY_MAX_LENGTH, strip=False)


class KeyPoolForm(KeyForm):
    pool = forms.CharField(
        error_messages={"required": POOL_REQUIRED},
        widget=forms.TextInput(attrs={"inputmode": "numeric", "autocomplete": "off", "size": "4"}),
    )

    def clean_pool(self) -> int | str:
        return number_or_text(self.cleaned_data["pool"])


class ShareForm(forms.Form):
    """SPEC 13.5: how the limit's capacity is shared between keys. Text, not a choice: the
    service refuses anything but 'fifo' and 'fair' with the message of the CLI and the API."""

    share = forms.CharField(
        error_messages={"required": SHARE_REQUIRED},
        widget=forms.Select(
            choices=[("fifo", "fifo: first come, first served"), ("fair", "fair: shares between keys")]
        ),
    )

    def clean_share(self) -> str:
        return shortened(self.cleaned_data["share"])


class WhenFullForm(forms.Form):
    """SPEC 14.1, 14.6: what the limit does when full and the caps on its queue, as an operator
    types them; empty: the declared value. Text, not choices or numbers: the services refuse a
    bad value with the message of the CLI and the API."""

    on_full = forms.CharField(
        required=False,
        widget=forms.Select(
            choices=[
                ("", "the declared value"),
                ("wait", "wait: queue the acquisition"),
                ("skip", "skip: answer it at once, queue nothing"),
                ("replace", "replace: take the place of its key's runs waiting"),
                ("cancel_running", "cancel_running: a workflow's own bound only, cancel its key's oldest run"),
            ]
        ),
    )
    max_waiting = forms.CharField(
        required=False, widget=forms.TextInput(attrs={"inputmode": "numeric", "autocomplete": "off"})
    )
    max_waiting_per_key = forms.CharField(
        required=False, widget=forms.TextInput(attrs={"inputmode": "numeric", "autocomplete": "off"})
    )

    def clean_on_full(self) -> str | None:
        return shortened(self.cleaned_data["on_full"]) or None

    def clean_max_waiting(self) -> int | str | None:
        raw = self.cleaned_data["max_waiting"].strip()
        return number_or_text(raw) if raw else None

    def clean_max_waiting_per_key(self) -> int | str | None:
        raw = self.cleaned_data["max_waiting_per_key"].strip()
        return number_or_text(raw) if raw else None


class KeyWeightForm(KeyForm):
    """A key's weight on a fair limit (SPEC 13.1); left empty, it goes back to 1."""

    weight = forms.CharField(
        required=False, widget=forms.TextInput(attrs={"inputmode": "numeric", "autocomplete": "off", "size": "3"})
    )

    def clean_weight(self) -> int | str | None:
        raw = self.cleaned_data["weight"]
        return number_or_text(raw) if raw else None


class KeyMinForm(KeyForm):
    """A key's min on a fair limit (SPEC 13.1); left empty, it goes back to 0."""

    min = forms.CharField(
        required=False, widget=forms.TextInput(attrs={"inputmode": "numeric", "autocomplete": "off", "size": "3"})
    )

    def clean_min(self) -> int | str | None:
        raw = self.cleaned_data["min"]
        return number_or_text(raw) if raw else None


class ResetForm(forms.Form):
    field = forms.ChoiceField(
        choices=[("capacity", "capacity"), ("max_hold", "max hold"), ("per_key", "per key"), ("share", "share")]
    )


class ReleaseForm(forms.Form):
    slot = forms.CharField(max_length=40)


def duration_input(ms: int) -> str:
    """A max hold as the form accepts it back: the largest unit that divides it exactly."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
