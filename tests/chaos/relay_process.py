"""A relay loop run as its own process by the relay chaos test.

It relays the outbox configured by the BROKER_* environment forever, "publishing" by appending
``<pid> <epoch> <row id>`` to the file named on the command line, one line per claimed row, written
and synced inside the fenced batch before the row counts as published.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from broker.adapters.locks import make_lock_provider
from broker.runtime.outbox import rows as outbox
from broker.settings import Settings
from broker.store.db import make_engine, make_session_factory
from broker.store.models import OutboxRow


class NoSender:
    def send(self, row: OutboxRow) -> None:
        """The observer already recorded the publish."""


def main(log_path: str) -> None:
    settings = Settings.from_env()
    factory = make_session_factory(make_engine(settings.database_url))
    locks = make_lock_provider(settings)
    log = Path(log_path)

    def observe(epoch: int, rows: list[OutboxRow]) -> None:
        if not rows:
            return
        with log.open("a") as handle:
            for row in rows:
                handle.write(f"{os.getpid()} {epoch} {row.id}\n")
            handle.flush()
            os.fsync(handle.fileno())

    while True:
        try:
            outbox.relay(settings, factory, NoSender(), locks, observer=observe)
        except Exception as exc:  # a lock backend hiccup: try again next round
            print(f"relay error: {exc}", file=sys.stderr, flush=True)
        time.sleep(0.02)


if __name__ == "__main__":
    main(sys.argv[1])
