from django.apps import AppConfig
from django.db.models.signals import post_migrate


class LimitsConfig(AppConfig):
    name = "limits"
    verbose_name = "Concurrency limits"

    def ready(self) -> None:
        from celery.signals import worker_init

        from limits import checks  # registers the workspace check

        post_migrate.connect(_sync_declared_limits, sender=self)
        worker_init.connect(checks.refuse_to_start_with_a_bad_workspace, weak=False)


def _sync_declared_limits(using: str = "default", **kwargs: object) -> None:
    """Declared values reach the database at every migrate (SPEC 1.4)."""
    from limits.config import load_workspace
    from limits.services import sync_workspace

    if using != "default":
        return
    sync_workspace(load_workspace())
