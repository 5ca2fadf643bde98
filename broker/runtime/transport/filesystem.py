"""kombu's filesystem transport with atomic writes (the embedded default's message transport)."""

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
