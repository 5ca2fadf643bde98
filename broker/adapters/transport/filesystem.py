"""kombu's filesystem transport with atomic writes (the embedded default's message transport),
its folders made when a channel opens; and beat's schedule file, its folder made when beat opens
it. Nothing is created on disk when an app is configured (importing ``tasks``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from time import monotonic
from typing import Any, cast

from celery import beat
from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps

_dumps = cast(Callable[[Any], str], dumps)  # kombu's JSON (it knows its own types)


#: the transport options that name the transport's folders
FOLDER_OPTIONS = ("data_folder_in", "data_folder_out", "control_folder", "processed_folder")


class Channel(filesystem.Channel):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        # Made here, where a worker or a publisher starts using the transport.
        for option in FOLDER_OPTIONS:
            folder = self.transport_options.get(option)
            if folder:
                Path(folder).mkdir(parents=True, exist_ok=True)

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


class PersistentScheduler(beat.PersistentScheduler):  # type: ignore[misc]
    """Celery's shelve-backed schedule, whose folder (the var folder) is made when beat opens it."""

    def _open_schedule(self) -> Any:
        Path(self.schedule_filename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open_schedule()
