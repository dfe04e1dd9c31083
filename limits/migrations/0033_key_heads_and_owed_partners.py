"""limits/sql/engine.sql again, for two changes.

1. A fair grant's next key without a scan of every key (issue 28, SPEC 13.2): each key pool keeps
   the position of its oldest waiting entry (LimitKey.head), filled here from the queue; on
   PostgreSQL the index limitkey_fair_order reads the keys with runs waiting in the fair order
   (holding their min or not, in use / weight, head), which limits_fair_next walks from the front.
   SQLite's grant (keys._Grant._fair_stream) does not read it.
2. limits_partners (keys.partners) locks, transitively, the limits of the groups waiting in a
   partner limit where a passed-over run waits: the capacity held for an owed run (10.4) goes on
   to the groups behind it in the same grant, rather than leaving them waiting with nothing
   stopping them until the next sweep.

Reverse: the column and the index go; the functions stay (they read the column: reverse to 0032
only together with its engine.sql)."""

from django.db import migrations, models

from limits import sql

ENGINE_SQL_FINGERPRINT = "e71f2b1418e5bab9fc80a516c6e8d38c86cbd69352c08f8d8d78535637aaab7a"

HEADS = """
UPDATE limits_limitkey SET head = (
    SELECT min(h.position) FROM limits_queueentry h
    WHERE h.limit_id = limits_limitkey.limit_id AND h.key = limits_limitkey.key AND h.state = 'waiting'
)
WHERE waiting_count > 0
"""

# The order of limits_fair_next's key scan, expression for expression; the keys with a head: those
# with runs waiting (and, within one limits_grant call, not every one of them dealt with).
FAIR_ORDER = """
CREATE INDEX IF NOT EXISTS limitkey_fair_order ON limits_limitkey (
    limit_id,
    (busy_count + reserved_count >= minimum),
    ((busy_count + reserved_count)::numeric / weight),
    head
) WHERE head IS NOT NULL
"""


def forward(apps, schema_editor) -> None:
    schema_editor.execute(HEADS)
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FAIR_ORDER)
    sql.install(schema_editor)


def backward(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS limitkey_fair_order")


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0032_fair_groups"),
    ]

    operations = [
        migrations.AddField(
            model_name="limitkey",
            name="head",
            field=models.BigIntegerField(
                blank=True,
                editable=False,
                help_text="The position of its oldest waiting entry, none when none waits: where a fair grant "
                "finds the key in the order of SPEC 13.2 (limits_fair_next's index).",
                null=True,
            ),
        ),
        migrations.RunPython(forward, backward),
    ]
