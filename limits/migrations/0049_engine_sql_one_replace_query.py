"""limits/sql/engine.sql whose limits_acquire_group asks one SQL helper, limits_replaceable
(python: full.replaceable), which waiting requests a new acquisition with on_full 'replace'
replaces (SPEC 14.3, 14.7), before it joins the queues and after (the late replace), where it spelled
the query twice (issue 48). A set-returning SQL function the planner inlines. Its first loop
notes whether a limit skips, replaces or caps its queue (v_special, 0047) with the homes of
on_full and the caps (limits_on_full, limits_max_waiting(_per_key)) rather than their columns
spelled again. Answers unchanged.

Reverse: a noop (no function's parameters or results changed)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "e5b923439d189ced7eb3c7958eaeb8548f6c68b29d4116354ab05a1864c17e11"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0048_cancel_running"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
