"""The embedded broker: kombu's filesystem transport, made safe for several processes.

kombu's own filesystem channel creates a message file and only then writes it, and a consumer
that lists the folder in between moves away an empty file and fails to decode it (seen as a
worker crash with JSONDecodeError under `stackbone dev --demo`). Here a producer writes the
message under a temporary name and renames it into place, and a consumer claims a message by
renaming it into the processed folder on the same filesystem: both renames are atomic, so a
message is seen only whole and by one consumer.

The order a worker reads its queues in is fixed, the maintenance queue first
(settings.STACKBONE_MAINTENANCE_QUEUE: the sweep, run recovery), then the others in the order it
consumes them. kombu's virtual channels, this filesystem one included, and its Redis channel
rotate their queues round robin: after a message from one queue they look at the next queue
first, so a sweep sent behind a backlog of runs waited its turn with them. Here every read starts
again from the maintenance queue (`InOrder`, and `MaintenanceFirst` for kombu's Redis channel, set
as its `queue_order_strategy` in settings); it holds a message every 15 s, so the runs' queue is
never starved.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from queue import Empty
from time import monotonic
from typing import Any

from django.conf import settings
from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads
from kombu.utils.scheduling import FairCycle, priority_cycle


def maintenance_first(queues: Iterable[str]) -> list[str]:
    """The queues in the order a worker reads them: the maintenance queue first, then the others
    in the order given (the order the worker consumes them)."""
    first = getattr(settings, "STACKBONE_MAINTENANCE_QUEUE", None)
    return sorted(queues, key=lambda name: name != first)


class MaintenanceFirst(priority_cycle):  # type: ignore[type-arg]  # generic in the stubs only
    """kombu's Redis channel's queue order (its `queue_order_strategy`): every BRPOP names the
    queues in `maintenance_first` order, and Redis pops from the first non-empty one. kombu's
    "priority" cycle (no rotation after a message), in a fixed order whatever the worker's -Q."""

    def update(self, it: Iterable[str]) -> None:
        self.items = maintenance_first(it)


class InOrder(FairCycle):
    """The filesystem channel's queue order: each read tries the queues in `maintenance_first`
    order, from the first, where kombu's FairCycle starts after the queue it read last."""

    def get(self, callback: Any, **kwargs: Any) -> Any:
        for queue in maintenance_first(self.resources):
            try:
                return self.fun(queue, callback, **kwargs)
            except self.predicate:
                continue
        raise self.predicate()


class Channel(filesystem.Channel):
    def _reset_cycle(self) -> None:
        self._cycle = InOrder(self._get_and_deliver, self._active_queues, Empty)

    # kombu's filesystem.Channel._put, whose `payload` name the stubs also mark as incompatible
    # with the virtual base's `message`: kombu passes it by position.
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = f"{final}.part"  # never matches '<queue>.msg', so never read half-written
        try:
            with open(partial, "wb") as file:
                file.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as error:
            raise ChannelError(f"Cannot add file {final!r} to directory") from error

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        wanted = f"{queue}.msg"
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.partition(".")[2] != wanted:
                continue
            claimed = os.path.join(self.processed_folder, f"{os.getpid()}-{name}")
            try:
                os.rename(os.path.join(self.data_folder_in, name), claimed)
            except OSError:
                continue  # another consumer claimed it first
            try:
                with open(claimed, "rb") as file:
                    payload = file.read()
                os.remove(claimed)
            except OSError as error:
                raise ChannelError(f"Cannot read file {claimed!r} from queue.") from error
            return loads(bytes_to_str(payload))
        raise Empty()


class Transport(filesystem.Transport):
    Channel = Channel
