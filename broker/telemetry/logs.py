"""Logging: one JSON object per line (or plain text), carrying only the known ids passed in
``extra``, with the message and traceback redacted."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import sys
from collections.abc import Callable
from typing import Any

from broker.redaction import redact_text
from broker.settings import Settings

# What SQLAlchemy appends to a database error when an engine shows its parameters: the values
# of the statement (a draft's document, a payload). Every engine of the broker hides them; a log
# line masks them anyway, whatever engine raised the error. The repr runs to the end of its line.
_SQL_PARAMETERS = re.compile(r"\[parameters: [^\n]*")
_MASKED_PARAMETERS = "[parameters: *** (hidden)]"


def redact_log(text: str) -> str:
    """A log line's text with credentials masked (``redact_text``) and SQL parameters hidden."""
    if "[parameters: " in text:
        text = _SQL_PARAMETERS.sub(_MASKED_PARAMETERS, text)
    return redact_text(text)


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
    "http_method",
    "http_path",
    "http_status",
    "duration_ms",
    "remote_addr",
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
            "message": redact_log(record.getMessage()),
        }
        for field in CONTEXT_FIELDS:
            value = record.__dict__.get(field)
            if value is not None:
                line[field] = value
        if record.exc_info:
            line["exc"] = redact_log(self.formatException(record.exc_info))
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s%(context)s")

    def format(self, record: logging.LogRecord) -> str:
        ids = [f"{f}={record.__dict__[f]}" for f in CONTEXT_FIELDS if record.__dict__.get(f)]
        record.context = f" [{' '.join(ids)}]" if ids else ""
        return redact_log(super().format(record))


def make_formatter(settings: Settings) -> logging.Formatter:
    """The formatter ``BROKER_LOG_FORMAT`` asks for: JSON (the default) or text."""
    return TextFormatter() if settings.log_format.lower() == "text" else JsonFormatter()


class Demote(logging.Filter):
    """Turns a library's INFO lines about routine work into DEBUG ones (``matches`` says which):
    a maintenance tick that did nothing is not an event. Attached to the library's logger, it
    drops the demoted line unless DEBUG is on for that logger."""

    def __init__(self, matches: Callable[[logging.LogRecord], bool]) -> None:
        super().__init__()
        self.matches = matches

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not self.matches(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def demote(logger_name: str, matches: Callable[[logging.LogRecord], bool]) -> None:
    """Install one ``Demote`` filter on ``logger_name`` (again: replaces the previous one)."""
    target = logging.getLogger(logger_name)
    for existing in [f for f in target.filters if isinstance(f, Demote)]:
        target.removeFilter(existing)
    target.addFilter(Demote(matches))


def configure_logging(settings: Settings, *, level: int | str | None = None) -> None:
    """Install one stderr handler on the root logger with the configured format and level
    (``level``: another wish, e.g. Celery's ``--loglevel``; the more verbose of the two wins)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(make_formatter(settings))
    # Library warnings (warnings.warn) go out as log lines too, not as bare text on stderr.
    logging.captureWarnings(True)
    # Alembic announces each of its plugins at INFO on every start: not news.
    demote("alembic.runtime.plugins", lambda record: True)
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    wanted = logging.getLevelName(settings.log_level.upper())
    if level is not None:
        other = logging.getLevelName(level.upper()) if isinstance(level, str) else level
        if isinstance(other, int) and isinstance(wanted, int):
            wanted = min(wanted, other)
    root.setLevel(wanted)
