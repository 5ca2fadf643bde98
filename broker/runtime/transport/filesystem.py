"""kombu's filesystem transport with atomic writes (the embedded default's message transport).

kombu's ``filesystem://`` creates a message file and then writes it; a consumer polling the
folder can move and read the file in between and get an empty message, which kills the worker's
consumer. Here a message is written under a name the consumer ignores and renamed into place, so
it appears whole or not at all (``os.replace`` is atomic within one folder). Celery selects it with
``broker_transport`` (``celery_config.configure``); the URL stays ``filesystem://``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from time import monotonic
from typing import Any, cast

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps

_dumps = cast(Callable[[Any], str], dumps)  # kombu's JSON (it knows its own types)


class Channel(filesystem.Channel):
    # kombu's base and filesystem channels name the second parameter differently
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + ".partial"  # not "<queue>.msg": consumers skip it
        try:
            with open(partial, "wb") as handle:
                handle.write(_dumps(payload).encode())
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
