from django.apps import AppConfig


class StudioConfig(AppConfig):
    name = "studio"
    verbose_name = "Studio"

    def ready(self) -> None:
        from limits.signals import runs_woken

        runs_woken.connect(_wake_runs, dispatch_uid="studio-wake-runs")


def _wake_runs(sender: object, run_ids: list[str], **kwargs: object) -> None:
    """The engine handed a slot to these runs or timed their wait out: resume them.

    This runs after the engine's change committed; a failure here (the database restarting)
    must not make that change look failed to its caller. Runs left unwoken are woken by
    studio.runtime.recover() (a reserved slot, or a deadline past)."""
    from studio.runtime import logger, wake

    try:
        wake(run_ids)
    except Exception as error:
        logger.warning("could not wake %d run(s) (%s); recovery wakes them", len(run_ids), type(error).__name__)
