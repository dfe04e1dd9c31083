from django.apps import AppConfig


class StudioConfig(AppConfig):
    """The project's app: its models are the run layer's and the plumbing's (studio/models.py)."""

    name = "studio"
    verbose_name = "Studio"

    def ready(self) -> None:
        import studio.runs.tasks  # noqa: F401 - registers the tasks the runtime dispatches by name
