"""Taking and giving back slots from workflows (SPEC sections 2 and 3)::

from limits.workflow import acquire_slot, acquire_slots, release_slot, with_limit, with_limits

slot = acquire_slot("voice-calls", label=call_id, timeout="30m", key=account_id)
...
release_slot(slot.id)   # from this run or any other, in a body or in a step

api, line = acquire_slots(["partner-api", "voice-calls"], key=account_id)   # all or nothing
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from django.db import transaction

from limits import services
from limits.box import QUEUE_TIMEOUT_MS, box_place
from limits.engine.results import REASONS
from stackbone.runs.models import RunKey, Step
from stackbone.runs.runtime import (
    RunContext,
    Suspend,
    WorkflowError,
    body_context,
    is_interruption,
    lock_own_run,
    next_recorded_key,
    record_step,
    recorded_step,
    run_step,
    suspend,
)

# A wait for slots is recorded as one hook step under two names (issue 48):
# - its name, what users see (the seed's, spelled here once): HOOK_NAME, its limits joined by
#   LIMITS_SHOWN_JOIN (SPEC 3.2, 10.5);
# - its key, what a replay compares and the run page reads the limits from, never shown:
#   HOOK_KEY_PREFIX and the limits joined by "," (no limit's name holds one: config.NAME_RE).
# A wait recorded without a key (before the key, or by a worker of the older release during a
# rolling deploy) is matched on replay, and read, by the name that release gave it:
# KEYLESS_HOOK_NAME and KEYLESS_JOIN. They are a record of that release, not display text:
# HOOK_NAME may change, these never.
HOOK_NAME = "Esperando hueco · {limit}"
LIMITS_SHOWN_JOIN = " + "
HOOK_KEY_PREFIX = "acquire:"
KEYLESS_HOOK_NAME = "Esperando hueco · {limit}"
KEYLESS_JOIN = " + "


def hook_name(limits: list[str]) -> str:
    """What users see of a wait for `limits`: 'Esperando hueco · partner-api + voice-calls'."""
    return HOOK_NAME.format(limit=LIMITS_SHOWN_JOIN.join(limits))


def hook_name_parts(limits: list[str]) -> list[tuple[str, str | None]]:
    """hook_name(limits) in pieces, each (text, the limit it names or None), for a page that
    links each limit: [('Esperando hueco · ', None), ('a', 'a'), (' + ', None), ('b', 'b')]."""
    lead, _, tail = HOOK_NAME.partition("{limit}")
    parts: list[tuple[str, str | None]] = [(lead, None)]
    for index, limit in enumerate(limits):
        if index:
            parts.append((LIMITS_SHOWN_JOIN, None))
        parts.append((limit, limit))
    parts.append((tail, None))
    return [(text, limit) for text, limit in parts if text]


def hook_key(limits: list[str]) -> str:
    """What a replay compares for a wait for `limits`: 'acquire:partner-api,voice-calls'."""
    return HOOK_KEY_PREFIX + ",".join(limits)


def waits_on(step: Step) -> list[str]:
    """The limits a recorded wait for slots waits (or waited) for, in the order asked; [] for any
    other step. Read from its key; from its name only for a step recorded without one."""
    if step.kind != Step.Kind.HOOK:
        return []
    if step.key:
        asked = step.key.removeprefix(HOOK_KEY_PREFIX) if step.key.startswith(HOOK_KEY_PREFIX) else ""
        return asked.split(",") if asked else []
    head = KEYLESS_HOOK_NAME.partition("{limit}")[0]
    shown = step.name.removeprefix(head) if step.name.startswith(head) else ""
    return shown.split(KEYLESS_JOIN) if shown else []


@dataclass(frozen=True, slots=True)
class SlotHandle:
    id: str
    limiter: str
    key: str | None = None


class _StackboneError(Exception):
    """What the slot errors share. `is_`: true for an error of the class, even one from another
    copy of this module (a worker that imported it twice): it compares the class's
    `stackbone_error` name along the error's MRO, not the class. Pickling (Celery carries them)
    calls the class again with the attributes `_init_args` names, in the constructor's order."""

    stackbone_error: ClassVar[str]
    _init_args: ClassVar[tuple[str, ...]]

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), tuple(getattr(self, name) for name in self._init_args))

    @classmethod
    def is_(cls, error: object) -> bool:
        return any(getattr(kind, "stackbone_error", None) == cls.stackbone_error for kind in type(error).__mro__)


class SlotTimeoutError(_StackboneError):
    """The wait for a slot lasted longer than its timeout; the run has left the queue."""

    stackbone_error = "SlotTimeoutError"
    _init_args = ("limiter", "timeout")

    def __init__(self, limiter: str, timeout: int) -> None:
        super().__init__(f"no slot of {limiter!r} within {timeout} ms")
        self.limiter = limiter
        self.timeout = timeout


class SlotUnavailableError(_StackboneError):
    """SPEC 14.2, 14.5: the acquisition was answered at once instead of queued: its on_full is
    'skip' and no slot was free for it, or a queue it would join is at its cap. Nothing of it
    stays in any queue. `limiter`: the limit that stopped it; `reason`: why (a code of SPEC 6.5's
    vocabulary, `limits.engine.results.REASONS`: 'limit_full', 'key_pool_full', 'queue_full', ...);
    `outcome`: 'skipped' or 'refused' (a queue's cap)."""

    stackbone_error = "SlotUnavailableError"
    _init_args = ("limiter", "reason", "outcome")

    def __init__(self, limiter: str, reason: str, outcome: str = "skipped") -> None:
        said = REASONS.get(reason, reason)
        super().__init__(f"no slot of {limiter!r} at once ({outcome}): {said}")
        self.limiter = limiter
        self.reason = reason
        self.outcome = outcome


class SlotReplacedError(_StackboneError):
    """SPEC 14.3: the acquisition waited in the queue and a newer acquisition of its key, with
    on_full 'replace', took its place: it has left the queue and holds nothing. `limiter`: the
    limit (the first of a group's); `replaced_by`: the request of the acquisition that replaced
    it; `replaced_by_run`: that acquisition's run ('' if its rows were purged since)."""

    stackbone_error = "SlotReplacedError"
    _init_args = ("limiter", "replaced_by", "replaced_by_run")

    def __init__(self, limiter: str, replaced_by: str, replaced_by_run: str = "") -> None:
        by = f"run {replaced_by_run!r}" if replaced_by_run else f"acquisition {replaced_by!r}"
        super().__init__(f"the wait for {limiter!r} was replaced by {by}")
        self.limiter = limiter
        self.replaced_by = replaced_by
        self.replaced_by_run = replaced_by_run


def acquire_slot(
    limit: str,
    timeout: int | str | None = None,
    label: str | None = None,
    key: str | None = None,
    on_full: str | None = None,
) -> SlotHandle:
    """Take a slot of `limit` (of `key`'s pool, SPEC 9), waiting in its queue if need be; with
    on_full="skip" (or the limit's own, SPEC 14) raise SlotUnavailableError at once instead; with
    on_full="replace" take the place of the key's runs waiting for it (SPEC 14.3: their
    acquire_slot raises SlotReplacedError)."""
    return _acquire([limit], timeout=timeout, label=label, key=key, on_full=on_full, ends_with_run=False, many=False)[0]


def acquire_slots(
    limits: list[str],
    timeout: int | str | None = None,
    label: str | None = None,
    key: str | None = None,
    on_full: str | None = None,
) -> list[SlotHandle]:
    """Take one slot of each of 1 to 3 distinct limits, all or nothing (SPEC 10.1); the handles
    come in the order given, and each is released on its own with release_slot. While the run
    waits it holds none of them. on_full: as acquire_slot's; without it the strictest of the
    limits' own decides (SPEC 14.7)."""
    if isinstance(limits, str) or not isinstance(limits, list | tuple):
        raise services.LimitsError(services.BAD_LIMITS, field="limits")
    return _acquire(
        list(limits), timeout=timeout, label=label, key=key, on_full=on_full, ends_with_run=False, many=True
    )


def _acquire(
    limits: list[str],
    *,
    timeout: int | str | None,
    label: str | None,
    key: str | None,
    on_full: str | None = None,
    ends_with_run: bool,
    many: bool,
) -> list[SlotHandle]:
    """Take a slot of each limit in a workflow body, waiting in their queues if need be.

    1. A recorded outcome of this call (replay) is returned or raised again.
    2. Otherwise ask the engine, with a request key stable across replays (run id + call number);
       the engine confirms the slots reserved for this call (together, for several limits).
    3. Busy: record the hook step completed with the slot ids and return the handles.
       Waiting: record the hook step open (named hook_name(limits), keyed hook_key(limits))
       and suspend the run; the box wakes it when its slots are reserved or the wait
       times out. Under the box's run concurrency (SPEC 12.2) the box bound is one more limit of
       the acquisition: a run that must wait gives its box slot back and resumes only with a
       box slot again (`limits.box.box_place`). Timed out: record the hook step failed and raise
       SlotTimeoutError; under the box, only once the run holds a box slot again (the wait gave
       it back: `_box_slot_again`), else the run waits for one alone, its hook step still open.
    Steps 2 and 3 are one transaction, under the run's lease; a grant under a key also keeps the
    key with the run (RunKey), so the run is found by it after the slot is freed and it ends.
    With ends_with_run (with_limit, with_limits), the busy slots are tied to the run in that same
    transaction (services.tie_to_run): if the run ends before the work gives them back, ending it
    frees them.
    """
    ctx = body_context("acquire_slots" if many else "acquire_slot")
    seq = ctx.next_seq()
    asked = [str(limit) for limit in limits]
    shown = LIMITS_SHOWN_JOIN.join(asked)
    name, replay_key = hook_name(asked), hook_key(asked)
    step = recorded_step(ctx, seq, replay_key, keyless_name=KEYLESS_HOOK_NAME.format(limit=KEYLESS_JOIN.join(asked)))
    if step is not None and step.status == Step.Status.COMPLETED:
        recorded: dict[str, Any] = step.result  # type: ignore[assignment]  # completed: a dict
        ids = recorded.get("slot_ids") or [recorded["slot_id"]]
        return [SlotHandle(id=i, limiter=limit, key=recorded.get("key")) for i, limit in zip(ids, limits, strict=True)]
    if step is not None and step.status == Step.Status.FAILED:
        failed: dict[str, Any] = step.result  # type: ignore[assignment]  # failed: a dict
        if "unavailable" in failed:  # SPEC 14: answered at once, as it was then
            raise SlotUnavailableError(failed["limit"], failed["unavailable"], failed["outcome"])
        if "replaced_by" in failed:  # SPEC 14.3: replaced, as it was then
            raise SlotReplacedError(failed["limit"], failed["replaced_by"], failed["replaced_by_run"])
        raise SlotTimeoutError(shown, failed["timeout_ms"])
    request = f"{ctx.run_id}:{seq}"
    with transaction.atomic():
        lock_own_run(ctx)
        box = box_place(ctx.run_id, request, run=(ctx.workflow, ctx.bounds) if ctx.workflow else None)
        if many or key is not None or box is not None:
            outcome = services.acquire_group(
                limits,
                run_id=ctx.run_id,
                request=request,
                label=label,
                timeout=timeout,
                key=key,
                box=box,
                on_full=on_full,
            )
        else:
            outcome = services.acquire(
                limits[0], run_id=ctx.run_id, request=request, label=label, timeout=timeout, on_full=on_full
            )
        if outcome.state == "busy":
            granted = list(outcome.slots) or [(limits[0], str(outcome.slot_id))]
            ids = [slot_id for limit, slot_id in granted if box is None or limit != box.limit]
            for limit, slot_id in granted:  # the box slot it executes in: kept, or taken again to resume
                if box is not None and limit == box.limit:
                    services.tie_to_run(slot_id, ctx.run_id)
            for slot_id in ids:
                if ends_with_run:
                    services.tie_to_run(slot_id, ctx.run_id)
            result: dict[str, Any] = {"slot_id": ids[0]}
            if many or key is not None:
                result.update(slot_ids=ids, key=key)
            if key is not None:  # the run is found by this key after the slot is freed and it ends
                RunKey.objects.bulk_create([RunKey(run_id=ctx.run_id, key=key)], ignore_conflicts=True)
            record_step(
                ctx, seq, name, key=replay_key, kind=Step.Kind.HOOK, status=Step.Status.COMPLETED, result=result
            )
            return [SlotHandle(id=i, limiter=limit, key=key) for i, limit in zip(ids, limits, strict=True)]
        if outcome.state == "waiting":
            deadline = outcome.deadline.isoformat()  # type: ignore[union-attr]  # waiting: has a deadline
            record_step(
                ctx,
                seq,
                name,
                key=replay_key,
                kind=Step.Kind.HOOK,
                status=Step.Status.WAITING,
                result={"deadline": deadline},
            )
            suspend(ctx, waiting_for=outcome.request, deadline=outcome.deadline)
        elif outcome.state in ("skipped", "refused"):  # SPEC 14.2, 14.5: recorded, so a replay raises it again
            unavailable = {"unavailable": outcome.reason, "limit": outcome.limit, "outcome": outcome.state}
            record_step(
                ctx,
                seq,
                name,
                key=replay_key,
                kind=Step.Kind.HOOK,
                status=Step.Status.FAILED,
                result=unavailable,
                error=outcome.state,
            )
        elif (
            outcome.state in ("timed_out", "replaced")
            and box is not None
            and not _box_slot_again(ctx, request, label, box)
        ):
            outcome = services.Acquisition("waiting", box.limit, request)  # suspended: waits for the box alone
        elif outcome.state == "replaced":  # SPEC 14.3: recorded, so a replay raises it again
            replaced = {
                "replaced_by": outcome.replaced_by,
                "replaced_by_run": outcome.replaced_by_run,
                "limit": outcome.limit,
            }
            record_step(
                ctx,
                seq,
                name,
                key=replay_key,
                kind=Step.Kind.HOOK,
                status=Step.Status.FAILED,
                result=replaced,
                error="replaced",
            )
        elif outcome.state == "timed_out":
            failure = {"timeout_ms": outcome.timeout_ms}
            record_step(
                ctx,
                seq,
                name,
                key=replay_key,
                kind=Step.Kind.HOOK,
                status=Step.Status.FAILED,
                result=failure,
                error="timed out",
            )
    if outcome.state == "waiting":
        raise Suspend(name)
    if outcome.state == "timed_out":
        raise SlotTimeoutError(shown, outcome.timeout_ms)  # type: ignore[arg-type]  # timed out: has timeout_ms
    if outcome.state in ("skipped", "refused"):
        raise SlotUnavailableError(outcome.limit, outcome.reason, outcome.state)
    if outcome.state == "replaced":
        raise SlotReplacedError(outcome.limit, outcome.replaced_by, outcome.replaced_by_run)
    raise WorkflowError(f"the wait for {shown!r} was cancelled")


BOX_AGAIN_SUFFIX = ":box"  # the request of the box slot a run takes again after its wait timed out


def _box_slot_again(ctx: RunContext, request: str, label: str | None, box: services.BoxPlace) -> bool:
    """SPEC 12.2: a wait that timed out gave the run's box slot back with it; the body goes on
    (SlotTimeoutError) only in a box slot again. Take one (request '<wait's request>:box', stable
    across replays, so a resumed run confirms the one reserved for it) and answer True; or join
    the box's queue, suspend the run with its hook step still waiting, and answer False. True
    also when the box has left the config meanwhile (the run no longer needs one)."""
    request = f"{request}{BOX_AGAIN_SUFFIX}"
    if box_place(ctx.run_id, request, run=(ctx.workflow, ctx.bounds) if ctx.workflow else None) is None:
        return True
    again = services.acquire_group(
        [],
        run_id=ctx.run_id,
        request=request,
        label=label,
        timeout=QUEUE_TIMEOUT_MS,
        box=box,
    )
    if again.state == "busy":
        services.tie_to_run(again.slots[-1][1], ctx.run_id)
        return True
    if again.state == "waiting":
        suspend(ctx, waiting_for=again.request, deadline=again.deadline)
        return False
    return True  # the run ended meanwhile (cancelled): nothing to wait for


def release_slot(slot_id: str) -> dict[str, bool]:
    """Give a slot back, from any run, in a body (a step of its own) or inside a step.
    {'released': True} when it freed a busy or reserved slot; {'released': False} for a slot
    already free, taken back by max hold, or unknown: nothing changes then, safe to retry."""
    answer: dict[str, bool] = run_step("release_slot", lambda: {"released": services.release(slot_id)}, atomic=True)
    return answer


def with_limit[T](
    limit: str,
    fn: Callable[[], T],
    timeout: int | str | None = None,
    label: str | None = None,
    key: str | None = None,
    on_full: str | None = None,
) -> T:
    """Acquire a slot, run fn, release the slot when fn returns or raises; return what fn
    returns, re-raise what it raises. In a workflow body only, like acquire_slot. See hold_slot
    for when exactly the slot is given back. Answered at once (on_full, SPEC 14.2): fn is not
    called and SlotUnavailableError is raised."""
    with hold_slot(limit, timeout=timeout, label=label, key=key, on_full=on_full):
        return fn()


def with_limits[T](
    limits: list[str],
    fn: Callable[[], T],
    timeout: int | str | None = None,
    label: str | None = None,
    key: str | None = None,
    on_full: str | None = None,
) -> T:
    """with_limit over several limits (SPEC 10.1): all their slots are taken before fn runs and
    given back together by the rule of hold_slot."""
    with hold_slots(limits, timeout=timeout, label=label, key=key, on_full=on_full):
        return fn()


@contextmanager
def hold_slot(
    limit: str,
    timeout: int | str | None = None,
    label: str | None = None,
    key: str | None = None,
    on_full: str | None = None,
) -> Iterator[SlotHandle]:
    """`with hold_slot("partner-api") as slot:` — with_limit as a context manager.

    The slot guards the work inside the block, in this run (SPEC 2.5). It is given back only
    when that work has really ended:

    - the block returned, or raised an error of the work itself (an exception from the body or
      a recorded step failure, StepError): release now, as a recorded step, then return/re-raise;
    - the run ended while inside the block (cancelled, failed, e.g. while suspended on an inner
      wait): ending the run frees the slot (it is tied to the run, services.end_run).

    It is never given back while the work may still run or be run again:

    - an interruption (runtime.is_interruption: the database connection went away while a step
      ran or was recorded): the advance stops, the task retries, and the replay re-enters this
      block with the same slot, so the unrecorded step runs again inside it;
    - Suspend (an inner wait), LeaseLost (another worker took the run over, or it was cancelled:
      then end_run frees it), a worker shutdown or SIGKILL: BaseExceptions or no exception at
      all; the replay resumes the work with the same slot.

    Must never happen: an execution of the guarded work outside the granted interval of its
    slot (tests/runs/test_connection_cut.py; the chaos run measures it).
    """
    with _holding([limit], timeout=timeout, label=label, key=key, on_full=on_full, many=False) as slots:
        yield slots[0]


@contextmanager
def hold_slots(
    limits: list[str],
    timeout: int | str | None = None,
    label: str | None = None,
    key: str | None = None,
    on_full: str | None = None,
) -> Iterator[list[SlotHandle]]:
    """`with hold_slots(["partner-api", "voice-calls"]) as slots:` — with_limits as a context
    manager; the slots are given back by the rule of hold_slot, together: one recorded step."""
    if isinstance(limits, str) or not isinstance(limits, list | tuple):
        raise services.LimitsError(services.BAD_LIMITS, field="limits")
    with _holding(list(limits), timeout=timeout, label=label, key=key, on_full=on_full, many=True) as slots:
        yield slots


@contextmanager
def _holding(
    limits: list[str],
    *,
    timeout: int | str | None,
    label: str | None,
    key: str | None,
    on_full: str | None,
    many: bool,
) -> Iterator[list[SlotHandle]]:
    slots = _acquire(limits, timeout=timeout, label=label, key=key, on_full=on_full, ends_with_run=True, many=many)
    try:
        yield slots
    except Exception as error:
        if not is_interruption(error):
            _release_held(slots)
        raise
    _release_held(slots)


def _release_held(slots: list[SlotHandle]) -> None:
    """Give back a hold_slot(s) block's slots: one as release_slot; several as one recorded step
    ("release_slots") and one engine call (services.release_slots: one set of locks, one grant),
    unless the run recorded them one release_slot step each, before this release existed: its
    replay goes on the older way."""
    if len(slots) == 1 or next_recorded_key() == "release_slot":
        for slot in slots:
            release_slot(slot.id)
        return
    ids = [slot.id for slot in slots]
    run_step("release_slots", lambda: {"released": services.release_slots(ids)}, atomic=True)
