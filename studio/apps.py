from django.apps import AppConfig


class StudioConfig(AppConfig):
    """The project's app: its models are the run layer's and the plumbing's (studio/models.py)."""

    name = "studio"
    verbose_name = "Studio"

    def ready(self) -> None:
        import studio.checks  # noqa: F401 - registers the static files check (and its report at worker start)
        import studio.plumbing.clock  # noqa: F401 - registers the clock's system check
        import studio.runs.tasks  # noqa: F401 - registers the tasks the runtime dispatches by name
