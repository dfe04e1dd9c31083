from django.apps import AppConfig


class StackboneConfig(AppConfig):
    """The run layer and the plumbing. Its label stays "studio", from when both lived in the box's
    `studio` package: the tables (studio_run, studio_step, studio_signinfailure, studio_clockskew),
    the migrations, the content types and the permissions (studio.change_run) are that app's, so
    a box made before the move migrates across it with nothing to do."""

    name = "stackbone"
    label = "studio"
    verbose_name = "Studio"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from stackbone import celery_signals
        from stackbone.plumbing import clock  # noqa: F401 - registers the clock's system check
        from stackbone.runs import tasks  # noqa: F401 - registers the tasks the runtime dispatches by name

        celery_signals.connect()
