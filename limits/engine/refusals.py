"""What an operator action or a deploy refuses once it holds the limit's lock, worded once for
both engines: the Python engine raises these in its transaction, the PostgreSQL engine words its
function's answer ('bound', 'bad_per_key', 'bad_min', 'unknown', 'bound_taken', ...) with them.
The checks that need no lock run before either engine (limits.engine.operator_actions)."""

from __future__ import annotations

from limits.config import check_minimum, check_per_key
from limits.engine.errors import BAD_PER_KEY, LimitsError

NO_MAX_HOLD = "{name!r} is a workflow's own bound: its runs hold their slot until they end (no max hold)"
NO_BOX = "the box has no run concurrency: declare run_concurrency={'base': n} in the workspace config first"
BOUND_NAME_TAKEN = "limit {name!r}: the name belongs to a workflow's own bound (names starting 'workflow.')"
BOX_NAME_TAKEN = (
    "run_concurrency: a limit named 'box' exists in this box (declared before): the box's run concurrency "
    "needs the name; rename that limit first"
)
BOX_LIMIT_TAKEN = (
    "limit 'box': the name belongs to the box's run concurrency, declared in this box before; "
    "give the limit another name"
)


def checked_per_key(value: object, capacity: int) -> int:
    """A per_key or key pool size within 1..the capacity in force, read under the limit's lock
    (check_per_key; limits_operate refuses the same range on PostgreSQL)."""
    try:
        return check_per_key(value, capacity)
    except ValueError as error:
        raise LimitsError(BAD_PER_KEY.format(error=error), field="per_key") from None


def checked_minimum(value: object, capacity: int) -> int:
    """A key's min within 0..the capacity in force, read under the limit's lock (check_minimum;
    limits_operate refuses the same range on PostgreSQL)."""
    try:
        return check_minimum(value, capacity)
    except ValueError as error:
        raise LimitsError(f"min {error}", field="min") from None
