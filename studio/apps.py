from django.apps import AppConfig


class BoxConfig(AppConfig):
    """The box's own app: no models (the runs' are the stackbone app's, label "studio"), only its
    system checks and its Celery app."""

    name = "studio"
    label = "box"
    verbose_name = "The box"

    def ready(self) -> None:
        import studio.celery  # noqa: F401 - the box's Celery app, current for .delay() in every process
        import studio.checks  # noqa: F401 - registers the static files check (and its report at worker start)
