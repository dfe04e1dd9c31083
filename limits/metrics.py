"""`/metrics`: the limits' figures for Prometheus, in its text exposition format.

Built with the official prometheus_client, from the database at each scrape: a custom collector
in a CollectorRegistry made for the request, no process-global counters, so every web process
answers the same. Three queries whatever the number of limits or slots (limits.insights.
metric_rows), and two for the hosts' clock skew (the database's time, the recent rows): the
limits' counters (gauges, live), their running totals (counters and the time-to-grant
histogram, from the sweep's per-minute rollup, so 30-45 s behind the end of each minute; a late
commit is added by a later pass, within its recount window) and the sweep's state. One more
for the acquisitions each limit skipped and refused, the entries it replaced and the runs holding a
workflow's own bound that cancel_running cancelled (SPEC 14.6, answered_at_once): counters
read live from the limit's row, not the rollup. Every
limit's metric carries `limit` and `kind` ("limit", or "workflow" for a workflow's own bound);
busy, reserved and in use mean what they mean everywhere (SPEC 6.5): confirmed slots, slots
handed out and not yet confirmed, and both. stackbone_limit_paused is 1 while an operator has
paused the limit (SPEC 5.6), read from the same row: no query more.

The workers (WorkersCollector, limits.workers): two more queries, the runs waiting for a worker,
and the workers' own reports of what they run (stackbone.plumbing.worker_beat).

The histogram counts every grant: a slot granted at once is an observation of 0 s, so its
_count equals grants_total. The limit page also shows the runs that waited alone; from here,
take the grants made at once (grants_total - queue_grants_total) off the le="0.0" bucket and
_count (docs/insights.md).

Access: a bearer token, settings.STACKBONE_METRICS_TOKEN (env var). Wrong or missing: 401.
No token set: 404, unless DEBUG (then it answers anyone: a developer's box).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from limits import insights, workers
from limits.models import WAIT_BUCKETS_S, Limit, capacity_in_force
from stackbone.plumbing import clock as box_clock

RELEASE_CAUSES = (
    ("workflow", "released_by_workflow"),
    ("operator", "released_by_operator"),
    ("max_hold", "released_by_max_hold"),
    ("run_end", "released_by_run_end"),
)


class LimitsCollector(Collector):
    """Every metric of /metrics, read from the database when collected."""

    def collect(self) -> Iterator[Metric]:
        limits, totals, sweep = insights.metric_rows()
        labels = ["limit", "kind"]  # kind: "limit" (the workspace's) or "workflow" (a workflow's own bound)
        gauges = {
            "capacity": GaugeMetricFamily(
                "stackbone_limit_capacity", "Slots a limit hands out at once.", labels=labels
            ),
            "busy": GaugeMetricFamily("stackbone_limit_busy", "Confirmed slots (busy).", labels=labels),
            "reserved": GaugeMetricFamily(
                "stackbone_limit_reserved", "Slots reserved for a woken run, not yet confirmed.", labels=labels
            ),
            "in_use": GaugeMetricFamily(
                "stackbone_limit_in_use", "Slots in use: busy + reserved, what counts against capacity.", labels=labels
            ),
            "waiting": GaugeMetricFamily("stackbone_limit_waiting", "Runs waiting in the queue.", labels=labels),
            "paused": GaugeMetricFamily(
                "stackbone_limit_paused",
                "1 while an operator has paused the limit (it grants nothing until resumed), else 0.",
                labels=labels,
            ),
        }
        kinds: dict[str, str] = {}
        for name, kind, busy, reserved, waiting, capacity_override, declared_capacity, paused_at in limits:
            label, kinds[name] = [name, kind], kind
            gauges["capacity"].add_metric(label, float(capacity_in_force(capacity_override, declared_capacity)))
            gauges["busy"].add_metric(label, float(busy))
            gauges["reserved"].add_metric(label, float(reserved))
            gauges["in_use"].add_metric(label, float(busy + reserved))
            gauges["waiting"].add_metric(label, float(waiting))
            gauges["paused"].add_metric(label, 0.0 if paused_at is None else 1.0)
        yield from gauges.values()

        by_name = {str(row["limit__name"]): row for row in totals}
        kinds.update({name: str(row["limit__kind"]) for name, row in by_name.items()})
        names = sorted({str(row[0]) for row in limits} | set(by_name))
        zero: dict[str, Any] = dict.fromkeys(insights.COUNT_FIELDS, 0)
        grants = CounterMetricFamily(
            "stackbone_limit_grants", "Slots handed out, at once or from the queue.", labels=labels
        )
        queue_grants = CounterMetricFamily(
            "stackbone_limit_queue_grants", "Slots handed out to a run that waited in the queue.", labels=labels
        )
        releases = CounterMetricFamily(
            "stackbone_limit_releases",
            "Slots freed, by whom: the workflow, an operator, max hold (the sweep), the run's end.",
            labels=[*labels, "by"],
        )
        lapses = CounterMetricFamily(
            "stackbone_limit_lapses",
            "Reservations not confirmed in time (the run went back to the queue).",
            labels=labels,
        )
        timeouts = CounterMetricFamily("stackbone_limit_timeouts", "Waits that passed their deadline.", labels=labels)
        waits = HistogramMetricFamily(
            "stackbone_limit_time_to_grant_seconds",
            "Time from joining the queue to the grant; a slot granted at once counts as 0.",
            labels=labels,
        )
        for name in names:
            row, label = by_name.get(name, zero), [name, kinds[name]]
            grants.add_metric(label, float(row["grants"]))
            queue_grants.add_metric(label, float(row["queue_grants"]))
            for cause, field in RELEASE_CAUSES:
                releases.add_metric([*label, cause], float(row[field]))
            lapses.add_metric(label, float(row["lapses"]))
            timeouts.add_metric(label, float(row["timeouts"]))
            cumulative, buckets = 0, []
            for bound, field in zip(WAIT_BUCKETS_S, insights.BUCKET_FIELDS, strict=True):
                cumulative += int(row[field])
                buckets.append((f"{float(bound)}", float(cumulative)))
            buckets.append(("+Inf", float(row["grants"])))
            waits.add_metric(label, buckets, sum_value=int(row["wait_ms_sum"]) / 1000)
        yield from (grants, queue_grants, releases, lapses, timeouts, waits)
        yield from answered_at_once(names, kinds)

        duration = GaugeMetricFamily("stackbone_sweep_last_duration_seconds", "How long the last sweep pass took.")
        last_run = GaugeMetricFamily(
            "stackbone_sweep_last_run_timestamp_seconds", "When the last sweep pass ran (Unix time)."
        )
        rolled = GaugeMetricFamily(
            "stackbone_insights_rolled_until_timestamp_seconds",
            "Every minute before this time (Unix) is counted in the counters and the histogram.",
        )
        if sweep is not None:
            if sweep.last_duration_ms is not None:
                duration.add_metric([], sweep.last_duration_ms / 1000)
            last_run.add_metric([], sweep.last_run_at.timestamp())
            if sweep.rolled_until is not None:
                rolled.add_metric([], sweep.rolled_until.timestamp())
        yield from (duration, last_run, rolled)

        skew = GaugeMetricFamily(
            "stackbone_clock_skew_seconds",
            "How far a host's clock is off the database's (positive: ahead), the largest of its "
            "workers' and beat's latest measurements within 15 minutes.",
            labels=["host"],
        )
        for host, seconds in largest_skew_by_host().items():
            skew.add_metric([host], seconds)
        yield skew


class WorkersCollector(Collector):
    """The second ceiling (limits.workers): the Celery workers alive, as each reported itself, and
    the runs waiting for a worker."""

    def collect(self) -> Iterator[Metric]:
        found = workers.alive()
        pending = workers.pending(box_clock.display_now())
        count = GaugeMetricFamily("stackbone_workers", "Celery workers alive, as each last reported itself.")
        count.add_metric([], float(len(found.workers)))
        labels = ["worker", "host", "pool"]
        concurrency = GaugeMetricFamily(
            "stackbone_worker_concurrency", "Tasks (runs) a worker runs at once: its pool's processes.", labels=labels
        )
        busy = GaugeMetricFamily("stackbone_worker_busy", "Tasks a worker is running now.", labels=labels)
        for worker in found.workers:
            label = [worker.name, worker.host, worker.pool]
            concurrency.add_metric(label, float(worker.concurrency))
            busy.add_metric(label, float(worker.busy))
        runs = GaugeMetricFamily(
            "stackbone_runs_pending", "Runs waiting for a worker: a worker may move them now, and none holds them."
        )
        runs.add_metric([], float(pending.runs))
        oldest = GaugeMetricFamily(
            "stackbone_runs_pending_oldest_seconds",
            "How long the oldest run waiting for a worker has waited, since it was sent to the workers (0: none).",
        )
        oldest.add_metric([], pending.oldest_seconds or 0.0)
        yield from (count, concurrency, busy, runs, oldest)


def answered_at_once(names: list[str], kinds: dict[str, str]) -> tuple[Metric, Metric, Metric, Metric]:
    """The acquisitions each limit answered at once instead of queueing them (SPEC 14.6): skipped
    (on_full 'skip', 14.2) and refused (a queue at its cap, 14.5); and the entries of its queue a
    newer acquisition of their key replaced (on_full 'replace', 14.3); and the runs holding a
    workflow's own bound that a newer run of their key cancelled (on_full 'cancel_running',
    14.4). Live, from the limit's own counters (one query: the limits that counted any), not the
    rollup; 0 for every other limit the scrape names."""
    labels = ["limit", "kind"]
    skipped = CounterMetricFamily(
        "stackbone_limit_skipped",
        "Acquisitions answered 'skipped' at once instead of queued (on_full 'skip').",
        labels=labels,
    )
    refused = CounterMetricFamily(
        "stackbone_limit_refused",
        "Acquisitions refused at once: the queue, or its key's part of it, was at its cap (max_waiting).",
        labels=labels,
    )
    replaced = CounterMetricFamily(
        "stackbone_limit_replaced",
        "Waiting entries of the limit's queue a newer acquisition of their key replaced (on_full 'replace').",
        labels=labels,
    )
    cancelled = CounterMetricFamily(
        "stackbone_limit_cancelled",
        "Runs holding a workflow's own bound that a newer run of their key cancelled (on_full 'cancel_running').",
        labels=labels,
    )
    counted = {
        name: (kind, skipped_count, refused_count, replaced_count, cancelled_count)
        for name, kind, skipped_count, refused_count, replaced_count, cancelled_count in Limit.objects.filter(
            Q(skipped_count__gt=0) | Q(refused_count__gt=0) | Q(replaced_count__gt=0) | Q(cancelled_count__gt=0)
        ).values_list("name", "kind", "skipped_count", "refused_count", "replaced_count", "cancelled_count")
    }
    for name in sorted(set(names) | set(counted)):
        kind, skipped_count, refused_count, replaced_count, cancelled_count = counted.get(
            name, (kinds.get(name, "limit"), 0, 0, 0, 0)
        )
        skipped.add_metric([name, kind], float(skipped_count))
        refused.add_metric([name, kind], float(refused_count))
        replaced.add_metric([name, kind], float(replaced_count))
        cancelled.add_metric([name, kind], float(cancelled_count))
    return skipped, refused, replaced, cancelled


def largest_skew_by_host() -> dict[str, float]:
    """host -> its largest recent skew (signed), one query (stackbone.plumbing.clock.recent_skews)."""
    largest: dict[str, float] = {}
    for host, seconds in box_clock.recent_skews().values_list("host", "skew_seconds"):
        largest.setdefault(host, seconds)  # recent() orders by size, largest first
    return largest


def token_matches(header: str, token: str) -> bool:
    """Whether an Authorization header carries `token` as a bearer token, compared in constant
    time (digests of both, so not even the length leaks)."""
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return False
    digest = hashlib.sha256
    return hmac.compare_digest(digest(given.strip().encode()).digest(), digest(token.encode()).digest())


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.STACKBONE_METRICS_TOKEN
    if not token and not settings.DEBUG:
        raise Http404("No metrics token set (STACKBONE_METRICS_TOKEN).")
    if token and not token_matches(request.headers.get("Authorization", ""), token):
        response = HttpResponse("A valid bearer token is needed.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LimitsCollector())
    registry.register(WorkersCollector())
    response = HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
    add_never_cache_headers(response)
    return response
