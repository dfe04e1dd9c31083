"""Fair shares that take turns (issue 43, SPEC 13.2 amended: stride scheduling).

Each key of a fair limit keeps its pass (LimitKey.fair_pass; the no-key runs' on the limit,
Limit.nokey_fair_pass): each grant adds PASS_STRIDE // weight; a key that starts holding or
waiting with nothing held or waiting enters at the smallest pass among the active keys (the index
limitkey_active_pass finds it). Ties in (under min, in use / weight) go to the smallest pass, so
the index limitkey_fair_order that limits_fair_next walks gains the pass before the head. Slots
and queue entries keep the pass their grant was ranked at / their key had when they joined, so
`limits verify` replays the turns from the rows. Fair limits are no longer plain (limits_is_plain).

Every pass starts at 0, as at a switch to fair. Reverse: the columns and the new index go, the
fair order is rebuilt without the pass; the functions stay (they read the columns: reverse only
together with 0038's engine.sql)."""

from django.db import migrations, models

from limits import sql

ENGINE_SQL_FINGERPRINT = "fca80208a263fd6f052db588273892e97a30ef0f9846813453fa3a04ad74aea7"

# The order of limits_fair_next's key scan, expression for expression (as limits/0033's, with the pass).
FAIR_ORDER = """
CREATE INDEX limitkey_fair_order ON limits_limitkey (
    limit_id,
    (busy_count + reserved_count >= minimum),
    ((busy_count + reserved_count)::numeric / weight),
    fair_pass,
    head
) WHERE head IS NOT NULL
"""
OLD_FAIR_ORDER = """
CREATE INDEX limitkey_fair_order ON limits_limitkey (
    limit_id,
    (busy_count + reserved_count >= minimum),
    ((busy_count + reserved_count)::numeric / weight),
    head
) WHERE head IS NOT NULL
"""


def forward(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS limitkey_fair_order")
        schema_editor.execute(FAIR_ORDER)
    sql.install(schema_editor)


def backward(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS limitkey_fair_order")
        schema_editor.execute(OLD_FAIR_ORDER)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0038_engine_sql_deploys"),
    ]

    operations = [
        migrations.AddField(
            model_name="limit",
            name="nokey_fair_pass",
            field=models.BigIntegerField(
                db_default=0,
                default=0,
                editable=False,
                help_text="On a fair limit, the no-key runs' pass: their place in the limit's turns (SPEC 13.2).",
            ),
        ),
        migrations.AddField(
            model_name="limitkey",
            name="fair_pass",
            field=models.BigIntegerField(
                db_default=0,
                default=0,
                editable=False,
                help_text="On a fair limit, the key's pass: its place in the limit's turns (SPEC 13.2, stride scheduling): each grant adds PASS_STRIDE // weight; in turns, pass / PASS_STRIDE.",
            ),
        ),
        migrations.AddField(
            model_name="queueentry",
            name="fair_pass",
            field=models.BigIntegerField(
                blank=True,
                editable=False,
                help_text="On a fair limit, its key's pass when it joined (SPEC 13.2); limits verify replays the turns.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="slot",
            name="fair_pass",
            field=models.BigIntegerField(
                blank=True,
                editable=False,
                help_text="On a fair limit, its key's pass the grant was ranked at, before the grant's stride (SPEC 13.2).",
                null=True,
            ),
        ),
        migrations.AddIndex(
            model_name="limitkey",
            index=models.Index(
                condition=models.Q(
                    ("busy_count__gt", 0), ("reserved_count__gt", 0), ("waiting_count__gt", 0), _connector="OR"
                ),
                fields=["limit", "fair_pass"],
                name="limitkey_active_pass",
            ),
        ),
        migrations.RunPython(forward, backward),
    ]
