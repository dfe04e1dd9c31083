"""The project's system checks (imported by StudioConfig.ready): what `manage.py check --deploy`,
`migrate` and every management command that checks refuse to run with, and a worker reports as
it starts.

Static files. With DEBUG off the static files storage is a manifest storage (settings.STORAGES):
`{% static %}` looks every name up in the manifest (staticfiles.json) that `collectstatic` writes
with those settings, and raises when it is missing, so every page answers 500. `collectstatic`
run with DEBUG on copies the files but writes no manifest.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import worker_init
from django.conf import settings
from django.contrib.staticfiles.storage import ManifestFilesMixin
from django.core.checks import CheckMessage, Error, register
from django.core.files.storage import storages

logger = logging.getLogger(__name__)

# Reasons (tests assert on them); /healthz shows them too, so they name no path.
NO_MANIFEST = (
    "the static files manifest ({name}) is missing: collectstatic was not run with the production "
    "settings (DEBUG off), and every page answers 500"
)
BAD_MANIFEST = "the static files manifest cannot be read ({error}): every page answers 500"
NOT_LOADED = (
    "this process started before collectstatic wrote the static files manifest: every page answers "
    "500 until it restarts"
)
COLLECT_HINT = (
    "Run `python manage.py collectstatic --no-input` with the production settings (DEBUG off): it writes "
    "{name} into STATIC_ROOT ({root}). Then start (or restart) the web server."
)


def static_files_problem(*, this_process: bool = False) -> str | None:
    """Why the static files storage cannot serve `{% static %}`, or None. With `this_process`,
    also a manifest written after this process loaded its storage (it reads the manifest once)."""
    try:
        storage = storages["staticfiles"]
    except ValueError as error:  # a manifest that is not one, read as the storage is made
        return BAD_MANIFEST.format(error=error)
    if not isinstance(storage, ManifestFilesMixin):
        return None
    if storage.read_manifest() is None:
        return NO_MANIFEST.format(name=storage.manifest_name)
    if this_process and not storage.hashed_files:
        return NOT_LOADED
    return None


@register()
def check_static_files(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    problem = static_files_problem()
    if problem is None:
        return []
    hint = COLLECT_HINT.format(name=ManifestFilesMixin.manifest_name, root=settings.STATIC_ROOT)
    return [Error(problem[0].upper() + problem[1:], hint=hint, id="studio.E001")]


@worker_init.connect(weak=False)
def report_at_worker_start(**kwargs: Any) -> None:
    """A worker shows no page, so it starts anyway, and says so in its log."""
    for error in check_static_files():
        logger.error("%s: %s. %s", error.id, error.msg, error.hint)
