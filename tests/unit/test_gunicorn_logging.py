"""gunicorn's lines in the broker's format: the access line as JSON with the request it names."""

from __future__ import annotations

import datetime as dt
import json
import logging
from types import SimpleNamespace

import pytest
from gunicorn.config import Config

from broker.serving.common import GunicornLogger
from broker.settings import Settings, set_settings


def test_an_access_line_is_json_with_the_request_id_and_no_query(
    settings: Settings, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given gunicorn's logger as the listeners configure it (access lines on stdout), with the
    # handlers it installs on the root and gunicorn's loggers dropped afterwards
    for name in ("", "gunicorn.error", "gunicorn.access"):
        target = logging.getLogger(name)
        monkeypatch.setattr(target, "handlers", [])
        monkeypatch.setattr(target, "level", target.level)
    set_settings(settings.replace(log_format="json"))
    try:
        cfg = Config()
        cfg.set("accesslog", "-")
        logger = GunicornLogger(cfg)
        # When a submission is answered 202 with the new request's Location
        resp = SimpleNamespace(status_code=202, headers=[("Location", "/requests/r-42")])
        req = SimpleNamespace(path="/requests", method="POST")
        environ = {"PATH_INFO": "/requests", "REQUEST_METHOD": "POST", "REMOTE_ADDR": "10.0.0.1",
                   "QUERY_STRING": "token=secret"}  # fmt: skip
        logger.access(resp, req, environ, dt.timedelta(milliseconds=12))
        # And gunicorn reports something of its own
        logger.info("Booting worker with pid: %s", 7)
    finally:
        set_settings(None)
    out, err = capsys.readouterr()
    # Then the access line is one JSON object naming the request, without the query
    line = json.loads(out.strip().splitlines()[-1])
    assert line["logger"] == "gunicorn.access"
    assert (line["http_method"], line["http_path"], line["http_status"]) == (
        "POST",
        "/requests",
        202,
    )
    assert line["request_id"] == "r-42"
    assert "secret" not in out
    # And gunicorn's own line is JSON too
    error = json.loads(err.strip().splitlines()[-1])
    assert error["logger"] == "gunicorn.error"
    assert error["message"] == "Booting worker with pid: 7"
