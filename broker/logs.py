"""Logging: one JSON object per line (or plain text), with the ids that tie lines together.

Log calls pass ids through ``extra`` (``request_id``, ``correlation_id``, ``instance_id``,
``client_id``, ``event_type``); the formatter copies exactly those known fields into the line, so a
payload or a secret that happens to sit on a record never reaches the output. The message and any
traceback go through ``broker.redaction.redact_text`` as they are formatted: a URL's password or
key that a library repeats in an exception never reaches a log line either.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any

from broker.redaction import redact_text
from broker.settings import Settings

#: the only ``extra`` fields that reach a log line
CONTEXT_FIELDS = (
    "request_id",
    "correlation_id",
    "instance_id",
    "client_id",
    "request_type",
    "event_type",
    "activity_id",
    "queue_item_id",
    "outbox_id",
    "task_id",
    "source",
    "process",
)


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object: time, level, logger, message and context ids."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": redact_text(record.getMessage()),
        }
        for field in CONTEXT_FIELDS:
            value = record.__dict__.get(field)
            if value is not None:
                line[field] = value
        if record.exc_info:
            line["exc"] = redact_text(self.formatException(record.exc_info))
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s%(context)s")

    def format(self, record: logging.LogRecord) -> str:
        ids = [f"{f}={record.__dict__[f]}" for f in CONTEXT_FIELDS if record.__dict__.get(f)]
        record.context = f" [{' '.join(ids)}]" if ids else ""
        return redact_text(super().format(record))


def configure_logging(settings: Settings) -> None:
    """Install one stderr handler on the root logger with the configured format and level."""
    handler = logging.StreamHandler(sys.stderr)
    formatter: logging.Formatter = (
        TextFormatter() if settings.log_format.lower() == "text" else JsonFormatter()
    )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(settings.log_level.upper())
