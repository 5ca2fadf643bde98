"""``broker.serving.wsgi:public`` and ``:internal`` serve both gunicorn (a WSGI callable) and
Flask's CLI (app discovery: ``flask --app broker.serving.wsgi:public routes``)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.store import db
from tests.support.services import PROJECT_ROOT


@pytest.mark.parametrize(
    ("app", "expected"),
    [
        ("broker.serving.wsgi:public", ["/requests", "/requests/<request_id>", "/openapi.json"]),
        ("broker.serving.wsgi:internal", ["/metrics", "/healthz", "/readyz"]),
    ],
)
def test_flask_cli_discovers_each_app(tmp_path: Path, app: str, expected: list[str]) -> None:
    # Given a migrated database
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    db.upgrade(url)
    db.dispose_engines()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BROKER_", "FLASK_"))}  # noqa: TID251
    env.update(BROKER_DATABASE_URL=url, BROKER_VAR_DIR=str(tmp_path / "var"))
    # When Flask's CLI lists the routes of the app the gunicorn command names
    out = subprocess.run(
        [sys.executable, "-m", "flask", "--app", app, "routes"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Then it finds the Flask app and prints its routes
    assert out.returncode == 0, out.stderr
    for rule in expected:
        assert rule in out.stdout.split(), (rule, out.stdout)


def test_gunicorn_still_gets_a_wsgi_callable() -> None:
    from broker.serving import wsgi

    statuses: list[str] = []
    body = b"".join(
        wsgi.internal(
            {
                "REQUEST_METHOD": "GET",
                "PATH_INFO": "/healthz",
                "SERVER_NAME": "x",
                "SERVER_PORT": "80",
                "wsgi.url_scheme": "http",
                "wsgi.input": io.BytesIO(b""),
            },
            lambda status, headers: statuses.append(status),
        )
    )
    assert statuses[0].startswith("200"), (statuses, body)
