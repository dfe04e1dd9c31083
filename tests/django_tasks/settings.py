"""The box's settings with Django's task framework sent through the box: what the worker processes
of tests/django_tasks run with (DJANGO_SETTINGS_MODULE). The pytest process takes the same TASKS
from the package's fixture (conftest.py)."""

from studio.settings import *  # noqa: F403

TASKS = {"default": {"BACKEND": "limits.django_tasks.LimitsBackend"}}
