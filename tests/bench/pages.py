"""Scenario 4, as its own process (the web process): `python -m tests.bench.pages <json>`.

Requests the Studio Limits pages through django.test.Client, logged in as a superuser, and prints
one JSON document: per page the median server time of N requests, the queries of one request, the
status code and the response size; and this process's peak RSS.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    params = json.loads(sys.argv[1])
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from tests.bench.common import median, peak_rss_mb

    user, _ = get_user_model().objects.get_or_create(
        username="bench-admin", defaults={"is_superuser": True, "is_staff": True}
    )
    client = Client()
    client.force_login(user)
    results = {}
    for label, url, headers in params["pages"]:
        client.get(url, headers=headers, secure=True)  # warm: templates compiled, connection open
        durations = []
        status = size = 0
        for _ in range(params["requests"]):
            started = time.perf_counter()
            response = client.get(url, headers=headers, secure=True)
            durations.append((time.perf_counter() - started) * 1000)
            status, size = response.status_code, len(response.content)
        with CaptureQueriesContext(connection) as captured:
            client.get(url, headers=headers, secure=True)
        results[label] = {
            "url": url,
            "ms": median(durations),
            "max_ms": max(durations),
            "queries": len(captured.captured_queries),
            "status": status,
            "bytes": size,
            "slowest_sql": sorted(captured.captured_queries, key=lambda q: -float(q["time"]))[:3],
        }
    print(json.dumps({"pages": results, "peak_rss_mb": peak_rss_mb()}), flush=True)


if __name__ == "__main__":
    main()
