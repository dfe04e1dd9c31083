"""The embedded broker under several producers and consumers at once: every message arrives
whole, exactly once (what kombu's own filesystem channel does not guarantee)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from kombu import Connection

from studio.plumbing.broker import Transport

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
