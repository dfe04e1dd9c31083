"""The box's Celery app: the canonical fifteen lines (docs/embedding.md shows the same for your
project). What every worker and beat does around tasks (database connections, the clock watch) is
the stackbone app's (stackbone/celery_signals.py); the tasks and the beat schedule are the apps'
(limits.beat.BEAT_SCHEDULE, in studio/settings.py)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")

app = Celery("studio")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
