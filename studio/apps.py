from django.apps import AppConfig


class StudioConfig(AppConfig):
    name = "studio"
    verbose_name = "Studio"

    def ready(self) -> None:
        from limits.signals import runs_woken

        runs_woken.connect(_wake_runs, dispatch_uid="studio-wake-runs")


def _wake_runs(sender: object, run_ids: list[str], **kwargs: object) -> None:
    """The engine handed a slot to these runs or timed their wait out: resume them."""
    from studio.runtime import wake

    wake(run_ids)
