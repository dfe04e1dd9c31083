"""SPEC 13: fair shares between keys. Each test names its rule and fails when the rule breaks, on
SQLite (limits.engine.grant._Grant._fair_stream) and on PostgreSQL (limits_grant's fair branch).

Must never happen on a fair limit (limits verify and the model test check it from the rows): a
grant to a key while another key that could have been served stood before it in the order of
13.2; capacity left free, not held for an owed run, while a run that could be granted waits."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps as django_apps
from django.db import connection

from limits import services
from limits.config import ConfigError, define_workspace
from limits.models import AuditEvent, Limit, LimitKey
from limits.verify import verify
from tests.bench import fair as bench_fair
from tests.conftest import requires_postgres
from tests.factories import assert_counters_match_rows, holders

pytestmark = pytest.mark.django_db(transaction=True)

key_heads = importlib.import_module("limits.migrations.0033_key_heads_and_owed_partners")


def fair(capacity: int = 2, **fields: object) -> Limit:
    services.sync_workspace(
        define_workspace(limits={"api": {"capacity": capacity, "max_hold": "1h", "share": "fair", **fields}})
    )
    return Limit.objects.get(name="api")


def take(run: str, key: str | None) -> services.Acquisition:
    return services.acquire("api", run_id=run, request=run, key=key, timeout="1h")


def runs_holding() -> list[str]:
    return sorted(run for run, _ in holders("api"))


def test_13_1_share_is_declared_and_checked() -> None:
    assert fair().share == "fair"
    with pytest.raises(ConfigError, match=r"limit 'api': share must be 'fifo' or 'fair', not 'even'"):
        define_workspace(limits={"api": {"capacity": 1, "max_hold": "1m", "share": "even"}})
    services.sync_workspace(define_workspace(limits={"api": {"capacity": 1, "max_hold": "1m"}}))
    assert Limit.objects.get(name="api").share == "fifo"  # the default


def test_13_2_a_freed_slot_goes_to_the_key_holding_least_not_the_oldest_run() -> None:
    fair(capacity=2)
    held = [take(f"a{i}", "a").slot_id for i in range(2)]  # a fills the limit alone (13.3)
    for i in range(2, 5):
        assert take(f"a{i}", "a").state == "waiting"
    assert take("b0", "b").state == "waiting"
    assert take("c0", "c").state == "waiting"
    services.release(held[0])  # a holds 1, b and c 0: b's oldest waiting run came first
    assert "b0" in runs_holding()
    services.release(held[1])  # a 0, b 1, c 0: a and c tie at 0, a's oldest (a2) arrived first
    assert "a2" in runs_holding() and "c0" not in runs_holding()
    assert verify(["api"]).ok, verify(["api"]).violations
    assert_counters_match_rows("api")


def test_13_2_weights_give_a_key_a_larger_share() -> None:
    fair(capacity=3)
    services.set_weight("api", 2, key="big", actor="ops")
    held = [take(f"x{i}", "x").slot_id for i in range(3)]
    for i in range(3):
        take(f"big{i}", "big")
        take(f"small{i}", "small")
    for slot_id in held:
        services.release(slot_id)
    # big (weight 2) gets 2 of the 3 slots: 0/2 < 0/1 on a tie goes to the oldest, then 1/2 < 1/1
    assert runs_holding() == ["big0", "big1", "small0"]


def test_13_2_a_key_under_its_min_is_served_first() -> None:
    fair(capacity=2)
    services.set_min("api", 1, key="vip", actor="ops")
    held = [take(f"x{i}", "x").slot_id for i in range(2)]
    take("other0", "other")
    take("vip0", "vip")  # younger, and other holds nothing either: vip is under its min
    services.release(held[0])
    assert "vip0" in runs_holding() and "other0" not in runs_holding()


def test_13_2_within_one_key_strict_arrival_order_and_no_capacity_left_free() -> None:
    fair(capacity=3, per_key=2)
    for i in range(4):
        take(f"a{i}", "a")
    assert runs_holding() == ["a0", "a1"]  # a's pool (2) is full: the third slot stays free...
    take("b0", "b")
    assert runs_holding() == ["a0", "a1", "b0"]  # ...only while nobody else can take it


@pytest.mark.parametrize("other_share", ["fifo", "fair"])
def test_13_2_a_group_on_a_fair_limit_takes_its_turn_in_the_fair_order(other_share: str) -> None:
    """A group of two limits, one fair (the other fifo, the box's place say, or fair too), is
    granted on the fair one in its order: the other limit's stream meeting the group first must
    not hand it the fair limit's slot ahead of an older run of its own key, nor ahead of a key
    holding less (the model test's seed 302790620397866496480637243801027866932 found it)."""
    services.sync_workspace(
        define_workspace(
            limits={
                "api": {"capacity": 2, "max_hold": "1h", "share": "fair"},
                "pipe": {"capacity": 5, "max_hold": "1h", "share": other_share},
            }
        )
    )
    held = [take(f"x{i}", "a").slot_id for i in range(2)]  # key a holds the fair limit whole
    take("a2", "a")
    group = services.acquire_group(["pipe", "api"], run_id="g", request="g", key="a", timeout="1h")
    assert group.state == "waiting"
    take("b0", "b")
    services.release(held[0])  # a holds 1, b 0: b's turn, though the group is older and pipe is free
    assert runs_holding() == ["b0", "x1"]
    services.release(held[1])  # a 0, b 1: a's turn, its oldest run first
    assert runs_holding() == ["a2", "b0"]
    services.release(take("b0", "b").slot_id)  # (b0 asks again: its slot) a 1, nobody else waits: the group at last
    assert runs_holding() == ["a2", "g"]
    assert [run for run, _ in holders("pipe")] == ["g"]
    assert verify(["api", "pipe"]).ok, verify(["api", "pipe"]).violations
    assert_counters_match_rows("api")


def test_fifo_stays_the_default_order() -> None:
    services.sync_workspace(define_workspace(limits={"api": {"capacity": 1, "max_hold": "1h"}}))
    held = take("a0", "a").slot_id
    take("a1", "a")
    take("b0", "b")
    services.release(held)
    assert runs_holding() == ["a1"]  # the oldest run, whatever its key holds


def test_13_5_operators_switch_the_share_and_set_weights_and_mins_audited_and_kept_by_a_deploy() -> None:
    services.sync_workspace(define_workspace(limits={"api": {"capacity": 2, "max_hold": "1h"}}))
    services.set_share("api", "fair", actor="ops")
    services.set_weight("api", 5, key="acme", actor="ops")
    services.set_min("api", 1, key="acme", actor="ops")
    services.sync_workspace(define_workspace(limits={"api": {"capacity": 2, "max_hold": "1h"}}))
    limit = Limit.objects.get(name="api")
    row = LimitKey.objects.get(limit=limit, key="acme")
    assert (limit.share, row.weight, row.minimum) == ("fair", 5, 1)
    audited = list(AuditEvent.objects.filter(limit=limit).order_by("id").values_list("action", "key", "new_value"))
    assert audited == [("share", "", "fair"), ("weight", "acme", "5"), ("min", "acme", "1")]
    services.set_share("api", None, actor="ops")
    services.set_weight("api", None, key="acme", actor="ops")
    assert Limit.objects.get(name="api").share == "fifo"
    assert LimitKey.objects.get(limit=limit, key="acme").weight == 1
    for call, value, field in (
        (lambda v: services.set_share("api", v, actor="ops"), "even", "share"),
        (lambda v: services.set_weight("api", v, key="acme", actor="ops"), 101, "weight"),
        (lambda v: services.set_min("api", v, key="acme", actor="ops"), 3, "min"),  # above capacity 2
    ):
        with pytest.raises(services.LimitsError) as error:
            call(value)
        assert error.value.field == field
    assert AuditEvent.objects.filter(limit=limit).count() == 5  # the refusals changed nothing


@requires_postgres
def test_13_2_the_next_key_is_found_without_reading_every_waiting_key() -> None:
    """limits_fair_next walks the index limitkey_fair_order from its front, each key's head kept
    on its row: about the same few pages read with 50 keys waiting as with 6,000 (issue 28: a scan
    of every key per grant was 23 s a grant at 10,000 keys; a sort of the 6,000 keys instead of
    the index reads ~100 more). Buffers, not time: CI's timings move."""
    services.sync_workspace(
        define_workspace(limits={name: {"capacity": 10, "max_hold": "1h", "share": "fair"} for name in ("api", "wide")})
    )
    read = {}
    for name, keys in (("api", 50), ("wide", 6_000)):
        waiting = bench_fair.fill_waiting(name, keys, name)
        assert waiting == keys // 3 * 6 + (0, 1, 3)[keys % 3]  # key k has 1 + k % 3 runs
        with connection.cursor() as cursor:
            for _ in range(2):  # the first call also compiles the function
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + bench_fair.FAIR_NEXT, [name])
                plan = cursor.fetchone()[0][0]["Plan"]
            cursor.execute(bench_fair.FAIR_NEXT, [name])
            assert cursor.fetchone()[1] == "k-0"  # all hold 0 of weight 1: the oldest head
        read[name] = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    assert read["wide"] <= read["api"] + 20, read
    assert verify(["api", "wide"]).ok


def test_a_box_migrated_to_key_heads_gets_each_waiting_keys_head_from_its_queue() -> None:
    """limits/0033 fills LimitKey.head from the queue of a box migrated with runs waiting (here:
    the heads cleared, as before the column, then the migration's step run again); the fair order
    then holds (13.2) and verify finds every head right."""
    fair(capacity=2)
    held = [take(f"a{i}", "a").slot_id for i in range(2)]
    for run, key in (("a2", "a"), ("b0", "b"), ("a3", "a"), ("b1", "b"), ("c0", "c")):
        assert take(run, key).state == "waiting"
    LimitKey.objects.update(head=None)
    assert not verify(["api"]).ok  # the heads are checked
    with connection.schema_editor() as editor:
        key_heads.forward(django_apps, editor)
    assert dict(LimitKey.objects.filter(waiting_count__gt=0).values_list("key", "head")) == {"a": 1, "b": 2, "c": 5}
    assert verify(["api"]).ok, verify(["api"]).violations
    services.release(held[0])  # a holds 1, b and c 0: b's oldest first (13.2)
    services.release(held[1])  # a holds 0 now, b 1, c 0: a's oldest (a2) came before c0
    assert runs_holding() == ["a2", "b0"]
    assert LimitKey.objects.get(limit__name="api", key="a").head == 3  # a3


def key_probes() -> int:
    """Descents of queue_waiting_by_key so far (a key's next entry looked up; this backend's
    counts flushed first)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:  # a new transaction: a fresh snapshot of the statistics
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'queue_waiting_by_key'")
        return int(cursor.fetchone()[0])


@requires_postgres
def test_13_2_a_grant_probes_the_keys_it_cannot_serve_once_not_once_per_run_dealt_with() -> None:
    """A fair limit's room and 200 keys waiting, each with a group another full limit stops
    (the box full, say): the grant deals with every one of them, in the fair order. limits_grant
    moves a dealt key's head on for the rest of its call, so limits_fair_next does not look up
    again the keys already dealt with: a few lookups per key, not 200 x 200 / 2 (a release at
    2,000 such keys took 27 s before, 1.8 s after, on this machine)."""
    services.sync_workspace(
        define_workspace(
            limits={"api": {"capacity": 2, "max_hold": "1h", "share": "fair"}, "x": {"capacity": 1, "max_hold": "1h"}}
        )
    )
    held = take("h0", "h0").slot_id
    take("h1", "h1")
    services.acquire("x", run_id="xh", request="xh")
    for k in range(200):
        got = services.acquire_group(["api", "x"], run_id=f"g{k}", request=f"g{k}", key=f"k{k}", timeout="1h")
        assert got.state == "waiting"
    with connection.cursor() as cursor:  # as autovacuum would have by now: the plans of a real queue
        cursor.execute("ANALYZE limits_queueentry, limits_limitkey")
    before = key_probes()
    services.release(held)
    probes = key_probes() - before
    assert 200 <= probes <= 6 * 200, probes
    assert runs_holding() == ["h1"]  # every group stopped by x
    assert verify(["api", "x"]).ok, verify(["api", "x"]).violations  # the heads are back as the queue has them
