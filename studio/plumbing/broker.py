"""The embedded broker: kombu's filesystem transport, made safe for several processes.

kombu's own filesystem channel creates a message file and only then writes it, and a consumer
that lists the folder in between moves away an empty file and fails to decode it (seen as a
worker crash with JSONDecodeError under `stackbone dev --demo`). Here a producer writes the
message under a temporary name and renames it into place, and a consumer claims a message by
renaming it into the processed folder on the same filesystem: both renames are atomic, so a
message is seen only whole and by one consumer.
"""

from __future__ import annotations

import os
import uuid
from queue import Empty
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads


class Channel(filesystem.Channel):
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
