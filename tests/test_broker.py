"""The embedded broker under several producers and consumers at once: every message arrives
whole, exactly once (what kombu's own filesystem channel does not guarantee). A worker reads the
maintenance queue first, on the embedded broker and on Redis."""

from __future__ import annotations

import multiprocessing
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from kombu import Connection, Consumer, Exchange, Queue

from stackbone.plumbing.broker import Transport

PRODUCERS, CONSUMERS, PER_PRODUCER = 3, 3, 150


def connection(folder: Path) -> Connection:
    for sub in ("out", "processed", "control"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return Connection(
        "filesystem://",
        transport=Transport,
        transport_options={
            "data_folder_in": str(folder / "out"),
            "data_folder_out": str(folder / "out"),
            "processed_folder": str(folder / "processed"),
            "control_folder": str(folder / "control"),
        },
    )


def produce(folder: Path, producer: int) -> None:
    with connection(folder) as conn:
        queue = conn.SimpleQueue("work")
        for i in range(PER_PRODUCER):
            queue.put({"producer": producer, "i": i, "padding": "x" * 2000})
        queue.close()


def consume(folder: Path, results: multiprocessing.Queue, expected: int) -> None:
    with connection(folder) as conn:
        queue = conn.SimpleQueue("work")
        while True:
            try:
                message = queue.get(timeout=3)
            except Exception:  # Empty after the producers are done
                break
            results.put((message.payload["producer"], message.payload["i"], len(message.payload["padding"])))
            message.ack()
        queue.close()


@pytest.mark.one_database  # the embedded broker, whatever CELERY_BROKER_URL says
def test_every_message_arrives_whole_and_exactly_once(tmp_path) -> None:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    total = PRODUCERS * PER_PRODUCER
    consumers = [context.Process(target=consume, args=(tmp_path, results, total)) for _ in range(CONSUMERS)]
    producers = [context.Process(target=produce, args=(tmp_path, p)) for p in range(PRODUCERS)]
    for process in consumers + producers:
        process.start()
    received = [results.get(timeout=60) for _ in range(total)]
    for process in producers + consumers:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert sorted((p, i) for p, i, _ in received) == [(p, i) for p in range(PRODUCERS) for i in range(PER_PRODUCER)]
    assert {size for _, _, size in received} == {2000}
    assert results.empty()


def read_in_order(conn: Connection, runs: str) -> list[str]:
    """Publish 3 messages to `runs`, then 2 to the maintenance queue; consume them one at a time
    from both queues, `runs` named first (as `-Q runs,maintenance` would); the queue of each
    message, in the order they came."""
    maintenance = settings.STACKBONE_MAINTENANCE_QUEUE
    queues = [Queue(name, Exchange(name), routing_key=name) for name in (runs, maintenance)]
    with conn.Producer() as producer:  # to the default exchange, as Celery sends a task
        for name, count in ((runs, 3), (maintenance, 2)):
            for _ in range(count):
                producer.publish({"queue": name}, exchange="", routing_key=name, declare=queues)
    seen: list[str] = []

    def receive(body: dict, message: object) -> None:
        seen.append(body["queue"])
        message.ack()  # type: ignore[attr-defined]  # a kombu Message

    with Consumer(conn.default_channel, queues=queues, callbacks=[receive], prefetch_count=1):
        while len(seen) < 5:
            conn.drain_events(timeout=10)
    return seen


@pytest.mark.one_database  # the embedded broker, whatever CELERY_BROKER_URL says
def test_the_embedded_broker_reads_the_maintenance_queue_first(tmp_path) -> None:
    """kombu's virtual channels go round robin: after a run's message they look at the next queue
    first, so two sweeps queued behind runs would be read run, sweep, run, sweep. Here every read
    starts from the maintenance queue, whatever order the worker consumes the queues in (-Q)."""
    with connection(tmp_path) as conn:
        assert read_in_order(conn, "runs") == [settings.STACKBONE_MAINTENANCE_QUEUE] * 2 + ["runs"] * 3


@pytest.mark.skipif(not settings.CELERY_BROKER_URL.startswith("redis"), reason="needs Redis (CELERY_BROKER_URL)")
def test_redis_reads_the_maintenance_queue_first() -> None:
    """The same on Redis, with the transport options of the settings (`queue_order_strategy`)."""
    import redis

    runs, maintenance = f"runs-{uuid.uuid4().hex[:8]}", settings.STACKBONE_MAINTENANCE_QUEUE
    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    assert options["queue_order_strategy"] == "stackbone.plumbing.broker:MaintenanceFirst"
    try:
        with Connection(settings.CELERY_BROKER_URL, transport_options=options) as conn:
            assert read_in_order(conn, runs) == [maintenance] * 2 + [runs] * 3
    finally:
        client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        prefix = options.get("global_keyprefix", "")
        for key in client.scan_iter(match=f"{prefix}*"):
            if runs in key.decode() or maintenance in key.decode():
                client.delete(key)
