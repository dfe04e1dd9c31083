"""The CHECK diet (issue 17): the counters and sizes of a limit and of a key are plain
IntegerFields, bounded by their Meta constraints alone. A PositiveIntegerField adds a `>= 0` CHECK
of its own, and PostgreSQL evaluates every CHECK of a row at each hot-path UPDATE of it; on
PostgreSQL this drops those 15 field checks (the columns stay integer) and widens
limit_counters_not_negative to all seven counters."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('limits', '0016_engine_sql_index_plans'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='limit',
            name='limit_counters_not_negative',
        ),
        migrations.AlterField(
            model_name='limit',
            name='busy_count',
            field=models.IntegerField(default=0, help_text='Confirmed slots.'),
        ),
        migrations.AlterField(
            model_name='limit',
            name='capacity_override',
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='limit',
            name='declared_capacity',
            field=models.IntegerField(),
        ),
        migrations.AlterField(
            model_name='limit',
            name='declared_per_key',
            field=models.IntegerField(blank=True, help_text="Each key's pool size from the config (SPEC 9.1); empty: no per-key pools.", null=True),
        ),
        migrations.AlterField(
            model_name='limit',
            name='group_waiting_count',
            field=models.IntegerField(db_default=0, default=0, help_text='Waiting entries of acquisitions of several limits.'),
        ),
        migrations.AlterField(
            model_name='limit',
            name='keyed_busy_count',
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name='limit',
            name='keyed_reserved_count',
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name='limit',
            name='keyed_waiting_count',
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name='limit',
            name='per_key_override',
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='limit',
            name='reserved_count',
            field=models.IntegerField(default=0, help_text='Slots handed to a waiting run, unconfirmed.'),
        ),
        migrations.AlterField(
            model_name='limit',
            name='waiting_count',
            field=models.IntegerField(default=0),
        ),
        migrations.AlterField(
            model_name='limitkey',
            name='busy_count',
            field=models.IntegerField(default=0),
        ),
        migrations.AlterField(
            model_name='limitkey',
            name='pool_override',
            field=models.IntegerField(blank=True, help_text="This key's pool size (SPEC 9.4).", null=True),
        ),
        migrations.AlterField(
            model_name='limitkey',
            name='reserved_count',
            field=models.IntegerField(default=0),
        ),
        migrations.AlterField(
            model_name='limitkey',
            name='waiting_count',
            field=models.IntegerField(default=0),
        ),
        migrations.AddConstraint(
            model_name='limit',
            constraint=models.CheckConstraint(condition=models.Q(('busy_count__gte', 0), ('group_waiting_count__gte', 0), ('keyed_busy_count__gte', 0), ('keyed_reserved_count__gte', 0), ('keyed_waiting_count__gte', 0), ('reserved_count__gte', 0), ('waiting_count__gte', 0)), name='limit_counters_not_negative'),
        ),
    ]
