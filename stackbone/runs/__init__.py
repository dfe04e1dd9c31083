"""The durable run layer: workflow runs advanced by replay on Celery (runtime), their rows
(models), the tasks that advance them (tasks) and what it tells the layers above (signals).
It knows nothing of limits: they listen to its signals (limits/apps.py)."""
