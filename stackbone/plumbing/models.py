"""The plumbing's rows: failed sign-ins for the throttle (table studio_signinfailure), each
host's clock skew against the database (studio_clockskew), and each Celery worker's own report of
what it runs (studio_workerbeat)."""

from __future__ import annotations

from django.db import models


class SignInFailure(models.Model):
    """One failed sign-in, kept for the throttle window (stackbone.plumbing.throttle). `key` is a SHA-256 of
    'user:<username>' or 'addr:<ip>': what people typed as a username is never stored."""

    key = models.CharField(max_length=64)
    at = models.DateTimeField()

    class Meta:
        app_label = "studio"
        indexes = [models.Index(fields=["key", "at"], name="signin_failure_key_at"), models.Index(fields=["at"])]

    def __str__(self) -> str:
        return f"{self.key[:12]}… at {self.at:%Y-%m-%d %H:%M:%S}"


class ClockSkew(models.Model):
    """How far one host's clock is off the database's, as its workers and beat last measured it
    (stackbone.plumbing.clock.check_skew, at start and every 5 minutes). One row per host and role;
    a row nobody measured for a day is removed by the next measurement anywhere. Positive:
    the host is ahead. `measured_at` is the database's time."""

    host = models.CharField(max_length=200)
    role = models.CharField(max_length=20)
    skew_seconds = models.FloatField()
    measured_at = models.DateTimeField()

    class Meta:
        app_label = "studio"
        constraints = [models.UniqueConstraint(fields=["host", "role"], name="clock_skew_one_per_host_role")]

    def __str__(self) -> str:
        return f"{self.host} ({self.role}): {self.skew_seconds:+.1f} s"


class WorkerBeat(models.Model):
    """One Celery worker as it last reported itself (stackbone.plumbing.worker_beat): its pool, its
    concurrency, and how many tasks it was running then, counted by the worker itself (the
    requests it has accepted and not finished, in its main process, whatever the pool: prefork,
    threads, solo). Written every few seconds, and within a second of a change, by a thread of the
    worker; removed when the worker stops, and by the next report anywhere a day after a worker
    vanished. `beat_at` and `started_at` are the database's time."""

    name = models.CharField(max_length=255, unique=True, help_text="The worker's node name, celery@host.")
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    pool = models.CharField(max_length=32)
    concurrency = models.PositiveIntegerField()
    busy = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField()

    class Meta:
        app_label = "studio"

    def __str__(self) -> str:
        return f"{self.name}: {self.busy} of {self.concurrency} busy ({self.pool})"
