"""The operator's edits on a limit's page, each a small POST: parse the form, call one service,
render the updated partial (the edit panel, `_edited`, or the live region, `_live_changed`); a
refused value comes back next to its field (`_edit_rejected`, `_pool_rejected`)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from django_htmx.http import trigger_client_event

from limits import selectors, services
from limits.config import check_max_waiting, check_on_full
from limits.durations import format_duration
from limits.forms import (
    BoxForm,
    CapacityForm,
    KeyForm,
    KeyMinForm,
    KeyPoolForm,
    KeyWeightForm,
    MaxHoldForm,
    PerKeyForm,
    ReleaseForm,
    ResetForm,
    ShareForm,
    WhenFullForm,
)
from limits.models import Limit
from limits.printable import printable
from limits.views.regions import (
    Notice,
    RefusedPool,
    _burst,
    _detail_url,
    _edit_context,
    _limit_or_404,
    _live_context,
)
from stackbone.plumbing.access import (
    NEEDS_OPERATE_LIMIT,
    OPERATE_LIMIT,
    HtmxHttpRequest,
    actor,
    permission_required,
)

LIMIT_CHANGED_EVENT = "limit-changed"

RELEASED = "Released {slot}. If runs were waiting, the first one now has it reserved."
ALREADY_FREE = "{slot} is already free (released, taken back by max hold, or unknown): nothing changed."
CAPACITY_SET = "Capacity is now {value} (declared {declared})."
MAX_HOLD_SET = "Max hold is now {value} for slots granted from now on (declared {declared})."
CAPACITY_RESET = "Capacity reset to the declared {value}."
TOTAL_SET = "Total is now {value} runs at once (declared {declared})."
TOTAL_RESET = "Total reset to the declared {value} runs at once."
MAX_HOLD_RESET = "Max hold reset to the declared {value} for slots granted from now on."
PER_KEY_SET = "Each key's pool is now {value} ({declared})."
PER_KEY_RESET = "Pool size per key reset to the declared {value}."
PER_KEY_RESET_TO_NONE = "Pool size per key reset: none is declared, so only the total ({capacity}) applies."
KEY_POOL_SET = "The pool of key “{key}” is now {value}."
KEY_POOL_RESET = "The pool of key “{key}” is back to the pool size per key ({value})."
KEY_POOL_RESET_TO_NONE = "The pool of key “{key}” is reset: only the total ({capacity}) applies."
SHARE_SET = {
    "fair": "{name} now shares its capacity fairly between keys: a freed slot goes to the key holding least.",
    "fifo": "{name} now grants first come, first served.",
}
SHARE_RESET = "Share reset to the declared {value}."
WHEN_FULL_SET = "When full, {name} now {does}; max waiting {max_waiting}, per key {per_key}."
WHEN_FULL_DOES = {
    "wait": "queues an acquisition",
    "skip": "skips: an acquisition is answered at once",
    "replace": "replaces: an acquisition takes the place of its key's runs waiting",
    "cancel_running": "cancels running: a new run cancels its key's oldest running run and takes its place",
}
KEY_WEIGHT_SET = "The weight of key “{key}” is now {value}."
KEY_MIN_SET = "The min of key “{key}” is now {value}."
PAUSED = "Paused: {name} grants nothing until resumed. Held slots stay; waiting runs keep their places."
RESUMED = "Resumed: {name} grants again; its free slots went to the queue."
ALREADY_PAUSED = "{name} was already paused: nothing changed."
ALREADY_RUNNING = "{name} was already running: nothing changed."
BAD_KEY = "key is required: a string of 1 to 128 characters"
NO_MAX_HOLD = "A workflow's own bound has no max hold: each run holds its slot until it ends."
BOX_SET = (
    "The box now executes at most {ceiling} runs at once (base {base} × burst {burst}), no workflow more than {base}."
)
BOX_RESET = "{field} reset to the declared {value}: the box executes at most {ceiling} runs at once."
BOX_UNCHANGED = "Base {base} and burst {burst} are already in force: nothing changed."
NO_BOX_PAGE = "The box has no run concurrency: declare run_concurrency={'base': n} in the workspace config first."


operator_required = permission_required(OPERATE_LIMIT, NEEDS_OPERATE_LIMIT)


@require_POST
@operator_required
def release_slot(request: HtmxHttpRequest, name: str) -> HttpResponse:
    limit = _limit_or_404(name)
    form = ReleaseForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest("slot is required")
    slot_id = form.cleaned_data["slot"]
    released = services.release(slot_id, actor=actor(request))
    notice = (
        Notice("success", RELEASED.format(slot=slot_id))
        if released
        else Notice("info", ALREADY_FREE.format(slot=slot_id))
    )
    if not request.htmx:
        messages.add_message(request, messages.SUCCESS if released else messages.INFO, notice.text)
        return redirect(_detail_url(limit, request.POST))
    limit.refresh_from_db()
    return render(request, "limits/limit_detail.html#live", _live_context(request, limit, request.POST, notice))


@require_POST
@operator_required
def set_capacity(request: HtmxHttpRequest, name: str) -> HttpResponse:
    limit = _limit_or_404(name)
    form = CapacityForm(request.POST)
    if form.is_valid():
        try:
            limit = services.set_capacity(limit.name, form.cleaned_data["capacity"], actor=actor(request))
        except services.LimitsError as error:
            form.add_error("capacity" if error.field == "capacity" else None, _sentence(error.message))
        else:
            said = TOTAL_SET if limit.is_workflow_bound else CAPACITY_SET
            text = said.format(value=limit.capacity, declared=limit.declared_capacity)
            return _edited(request, limit, Notice("success", text))
    return _edit_rejected(request, limit, capacity_form=form)


@require_POST
@operator_required
def set_max_hold(request: HtmxHttpRequest, name: str) -> HttpResponse:
    limit = _limit_or_404(name)
    if limit.is_workflow_bound:  # its page offers no max-hold field to put the service's refusal next to
        return _edit_rejected(request, limit, edit_notice=Notice("error", NO_MAX_HOLD))
    form = MaxHoldForm(request.POST)
    if form.is_valid():
        try:
            limit = services.set_max_hold(limit.name, form.cleaned_data["max_hold"], actor=actor(request))
        except services.LimitsError as error:
            form.add_error("max_hold" if error.field == "max_hold" else None, _sentence(error.message))
        else:
            text = MAX_HOLD_SET.format(
                value=format_duration(limit.max_hold_ms), declared=format_duration(limit.declared_max_hold_ms)
            )
            return _edited(request, limit, Notice("success", text))
    return _edit_rejected(request, limit, max_hold_form=form)


@require_POST
@operator_required
def reset_limit(request: HtmxHttpRequest, name: str) -> HttpResponse:
    limit = _limit_or_404(name)
    form = ResetForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest("field must be 'capacity', 'max_hold', 'per_key' or 'share'")
    try:
        limit, text = _reset(request, limit, form.cleaned_data["field"])
    except services.LimitsError as error:  # the box: its base and burst are reset on their own form
        return _edit_rejected(request, limit, edit_notice=Notice("error", _sentence(error.message)))
    return _edited(request, limit, Notice("success", text))


def _reset(request: HtmxHttpRequest, limit: Limit, field: str) -> tuple[Limit, str]:
    match field:
        case "capacity":
            limit = services.set_capacity(limit.name, None, actor=actor(request))
            return limit, (TOTAL_RESET if limit.is_workflow_bound else CAPACITY_RESET).format(value=limit.capacity)
        case "max_hold":
            if limit.is_workflow_bound:
                raise services.LimitsError(NO_MAX_HOLD, field="max_hold")
            limit = services.set_max_hold(limit.name, None, actor=actor(request))
            return limit, MAX_HOLD_RESET.format(value=format_duration(limit.max_hold_ms))
        case "share":
            limit = services.set_share(limit.name, None, actor=actor(request))
            return limit, SHARE_RESET.format(value=limit.share)
        case _:
            limit = services.set_per_key(limit.name, None, actor=actor(request))
            if limit.per_key is None:
                return limit, PER_KEY_RESET_TO_NONE.format(capacity=limit.capacity)
            return limit, PER_KEY_RESET.format(value=limit.per_key)


@require_POST
@operator_required
def pause_limit(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """SPEC 5.6: the limit grants nothing until resumed (audited; a second pause changes nothing)."""
    limit = _limit_or_404(name)
    was = limit.paused
    limit = services.pause_limit(limit.name, actor=actor(request))
    said = ALREADY_PAUSED if was else PAUSED
    return _edited(request, limit, Notice("info" if was else "success", said.format(name=limit.name)))


@require_POST
@operator_required
def resume_limit(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """The limit's free capacity goes to the queue at once, as a capacity raise does."""
    limit = _limit_or_404(name)
    was = limit.paused
    limit = services.resume_limit(limit.name, actor=actor(request))
    said = RESUMED if was else ALREADY_RUNNING
    return _edited(request, limit, Notice("success" if was else "info", said.format(name=limit.name)))


@require_POST
@operator_required
def set_per_key(request: HtmxHttpRequest, name: str) -> HttpResponse:
    limit = _limit_or_404(name)
    form = PerKeyForm(request.POST)
    if form.is_valid():
        try:
            limit = services.set_per_key(limit.name, form.cleaned_data["per_key"], actor=actor(request))
        except services.LimitsError as error:
            form.add_error("per_key" if error.field == "per_key" else None, _pool_message(error))
        else:
            text = PER_KEY_SET.format(value=limit.per_key, declared=_declared(limit))
            return _edited(request, limit, Notice("success", text))
    return _edit_rejected(request, limit, per_key_form=form)


@require_POST
@operator_required
def set_share(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """SPEC 13.5: switch the limit between fifo and fair (reset: the `reset` view, field share)."""
    limit = _limit_or_404(name)
    form = ShareForm(request.POST)
    if form.is_valid():
        try:
            limit = services.set_share(limit.name, form.cleaned_data["share"], actor=actor(request))
        except services.LimitsError as error:
            form.add_error("share" if error.field == "share" else None, _sentence(error.message))
        else:
            return _edited(request, limit, Notice("success", SHARE_SET[limit.share].format(name=limit.name)))
    return _edit_rejected(request, limit, share_form=form)


@require_POST
@operator_required
def set_when_full(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """SPEC 14.1, 14.6: on_full and the two caps on the queue, each changed value through its
    service (audited); empty: the declared value. A refused value comes back by its field, and
    nothing is changed (every value is checked before the first is saved)."""
    limit = _limit_or_404(name)
    form = WhenFullForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        checks: tuple[tuple[str, str, Callable[[object], object]], ...] = (
            ("on_full", "When full", partial(check_on_full, bound=limit.kind == Limit.Kind.WORKFLOW)),
            ("max_waiting", "Max waiting", check_max_waiting),
            ("max_waiting_per_key", "Max waiting per key", check_max_waiting),
        )
        for field, label, check in checks:
            if data[field] is not None:
                try:
                    check(data[field])
                except ValueError as error:
                    form.add_error(field, f"{label} {error}.")
    if not form.is_valid():
        return _edit_rejected(request, limit, when_full_form=form)
    data, who = form.cleaned_data, actor(request)
    try:
        if data["on_full"] != (limit.on_full_override or None):
            limit = services.set_on_full(limit.name, data["on_full"], actor=who)
        for field, per_key in (("max_waiting", False), ("max_waiting_per_key", True)):
            if data[field] != getattr(limit, f"{field}_override"):
                limit = services.set_max_waiting(limit.name, data[field], per_key=per_key, actor=who)
    except services.LimitsError as error:  # the limit went meanwhile, or is the box
        return _edit_rejected(request, limit, edit_notice=Notice("error", _sentence(error.message)))
    said = WHEN_FULL_SET.format(
        name=limit.name,
        does=WHEN_FULL_DOES[limit.on_full],
        max_waiting=_none_or(limit.max_waiting),
        per_key=_none_or(limit.max_waiting_per_key),
    )
    return _edited(request, limit, Notice("success", said))


def _none_or(value: int | None) -> str:
    return "none" if value is None else f"{value:,}"


@require_POST
@operator_required
def set_key_weight(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """A key's weight on a fair limit (SPEC 13.5), from the form on its row; empty resets it to 1."""
    return _set_key_field(request, name, KeyWeightForm(request.POST), "weight", services.set_weight, KEY_WEIGHT_SET)


@require_POST
@operator_required
def set_key_min(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """A key's min on a fair limit (SPEC 13.5), from the form on its row; empty resets it to 0."""
    return _set_key_field(request, name, KeyMinForm(request.POST), "min", services.set_min, KEY_MIN_SET)


def _set_key_field(
    request: HtmxHttpRequest,
    name: str,
    form: KeyForm,
    field: str,
    service: Callable[..., Limit],
    said: str,
) -> HttpResponse:
    """Call `service` with the row's key and value; a refused value comes back next to that
    row's field, in the live region, as a refused pool size does."""
    limit = _limit_or_404(name)
    if "key" in form.errors:
        return HttpResponseBadRequest(BAD_KEY)
    if form.is_valid():
        key, value = form.cleaned_data["key"], form.cleaned_data[field]
        try:
            limit = service(limit.name, value, key=key, actor=actor(request))
        except services.LimitsError as error:
            if error.field == "key":
                return HttpResponseBadRequest(error.message)
            form.add_error(field if error.field == field else None, _sentence(error.message))
        else:
            shown = value if value is not None else ("1 (the default)" if field == "weight" else "0 (the default)")
            return _live_changed(request, limit, Notice("success", said.format(key=printable(key), value=shown)))
    return _pool_rejected(request, limit, form, field)


@require_POST
@operator_required
def set_key_pool(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """A key's own pool size, from the form on its row in the Keys table. A refused value comes
    back next to that row's field, in the live region (it holds the table)."""
    limit = _limit_or_404(name)
    form = KeyPoolForm(request.POST)
    if "key" in form.errors:
        return HttpResponseBadRequest(BAD_KEY)
    if form.is_valid():
        key = form.cleaned_data["key"]
        try:
            limit = services.set_per_key(limit.name, form.cleaned_data["pool"], key=key, actor=actor(request))
        except services.LimitsError as error:
            if error.field == "key":
                return HttpResponseBadRequest(error.message)
            form.add_error("pool" if error.field == "per_key" else None, _pool_message(error))
        else:
            text = KEY_POOL_SET.format(key=printable(key), value=form.cleaned_data["pool"])
            return _live_changed(request, limit, Notice("success", text))
    return _pool_rejected(request, limit, form)


@require_POST
@operator_required
def reset_key_pool(request: HtmxHttpRequest, name: str) -> HttpResponse:
    limit = _limit_or_404(name)
    form = KeyForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest(BAD_KEY)
    key = form.cleaned_data["key"]
    try:
        limit = services.set_per_key(limit.name, None, key=key, actor=actor(request))
    except services.LimitsError as error:
        return HttpResponseBadRequest(error.message)
    if limit.per_key is None:
        text = KEY_POOL_RESET_TO_NONE.format(key=printable(key), capacity=limit.capacity)
    else:
        text = KEY_POOL_RESET.format(key=printable(key), value=limit.per_key)
    return _live_changed(request, limit, Notice("success", text))


@require_POST
@operator_required
def set_box(request: HtmxHttpRequest) -> HttpResponse:
    """The box's base and burst (SPEC 12.5), from its page's edit panel: the values that differ
    from those in force (so an unchanged one stays declared), or `reset` of one. A refused value
    comes back next to its field and nothing changes."""
    limit = selectors.box()
    if limit is None:
        raise Http404(NO_BOX_PAGE)
    form = BoxForm(request.POST)
    if form.is_valid():
        reset = form.cleaned_data["reset"]
        changes: dict[str, object] = {reset: None} if reset else {}
        for field, now in (("base", limit.per_key), ("burst", limit.burst)):
            if not reset and form.cleaned_data[field] != now:
                changes[field] = form.cleaned_data[field]
        if not changes:
            text = BOX_UNCHANGED.format(base=limit.per_key, burst=_burst(limit.burst))
            return _edited(request, limit, Notice("info", text))
        try:
            limit = services.set_box(**changes, actor=actor(request))
        except services.LimitsError as error:
            form.add_error(error.field if error.field in ("base", "burst") else None, _sentence(error.message))
        else:
            if reset:
                value = limit.per_key if reset == "base" else _burst(limit.burst)
                text = BOX_RESET.format(field=reset.capitalize(), value=value, ceiling=limit.capacity)
            else:
                text = BOX_SET.format(ceiling=limit.capacity, base=limit.per_key, burst=_burst(limit.burst))
            return _edited(request, limit, Notice("success", text))
    return _edit_rejected(request, limit, box_form=form)


# --- helpers ------------------------------------------------------------------------------------


def _edited(request: HtmxHttpRequest, limit: Limit, notice: Notice) -> HttpResponse:
    """A change went through: show the fresh edit panel, and tell the page to refresh its figures,
    keys, slots and queue (raising capacity may just have granted waiting runs)."""
    if not request.htmx:
        messages.success(request, notice.text)
        return redirect(_detail_url(limit, request.POST))
    response = render(request, "limits/limit_detail.html#edit-panel", _edit_context(limit, edit_notice=notice))
    return trigger_client_event(response, LIMIT_CHANGED_EVENT)


def _edit_rejected(
    request: HtmxHttpRequest,
    limit: Limit,
    **forms: Any,
) -> HttpResponse:
    """A bad value: nothing changed; the form comes back with the message next to the field."""
    context = _edit_context(limit, **forms)
    if request.htmx:
        return render(request, "limits/limit_detail.html#edit-panel", context, status=422)
    context |= _live_context(request, limit, request.POST)
    return render(request, "limits/limit_detail.html", context, status=422)


def _live_changed(request: HtmxHttpRequest, limit: Limit, notice: Notice) -> HttpResponse:
    """A change made from the live region (a key's pool): the fresh region, with the notice."""
    if not request.htmx:
        messages.success(request, notice.text)
        return redirect(_detail_url(limit, request.POST))
    limit.refresh_from_db()
    return render(request, "limits/limit_detail.html#live", _live_context(request, limit, request.POST, notice))


def _pool_rejected(request: HtmxHttpRequest, limit: Limit, form: KeyForm, field: str = "pool") -> HttpResponse:
    """A refused pool size, weight or min (`field`): nothing changed; the region comes back with
    the message on the key's row (its field has autofocus, which also holds the poll back while
    it is corrected), or in the notice if the key is no longer on this page."""
    errors = [*form.errors.get(field, []), *form.non_field_errors()]
    refused = RefusedPool(form.cleaned_data["key"], form.data.get(field, ""), errors, field)
    context = _live_context(request, limit, request.POST, refused_pool=refused)
    if not any(pool.key == refused.key for pool in context["keys"].items):
        context["notice"] = Notice("error", f"Key “{printable(refused.key)}”: {' '.join(errors)}")
    if request.htmx:
        return render(request, "limits/limit_detail.html#live", context, status=422)
    context |= _edit_context(limit, can_operate=context["can_operate"])
    return render(request, "limits/limit_detail.html", context, status=422)


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:]


def _pool_message(error: services.LimitsError) -> str:
    """The engine names the setting `per_key` (as the config does); the form calls it a pool size."""
    return _sentence(error.message.replace("per_key ", "pool size ", 1))


def _declared(limit: Limit) -> str:
    return "none declared" if limit.declared_per_key is None else f"declared {limit.declared_per_key}"
