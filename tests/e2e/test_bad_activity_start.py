"""A bad Python activity declaration stops every process that runs or shows workflows at start,
each started alone as the README starts it (gunicorn with the listener's config, ``celery -A
tasks worker``): it exits, naming the activity and what is wrong, instead of serving (a console
answering 503 forever). (The internal listener runs no workflow and loads no activity.)"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from broker.store import db
from tests.support.ingress import environment, make_pki, write_config
from tests.support.stack import roles
from tests.support.stack.config import Ports
from tests.support.stack.process import process_env

pytestmark = pytest.mark.timeout(180)

#: seconds a role may take to notice and exit (gunicorn boots a worker, Celery imports the app)
EXIT_WITHIN = 60

BAD_MODULE = """\
from broker.activities import activity

@activity("Elsa.WriteLine", category="Team")
def write_line(text: str) -> None:
    return None
"""


@pytest.mark.parametrize("role", ["public", "console", "worker"])
def test_a_role_started_alone_with_a_bad_declaration_exits_naming_the_activity(
    role: str, tmp_path: Path
) -> None:
    # Given a team module whose activity shadows a built-in, listed in BROKER_TASK_MODULES
    (tmp_path / "team_bad_start.py").write_text(BAD_MODULE, encoding="utf-8")
    pki = make_pki(tmp_path / "certs")
    config = write_config(tmp_path / "config", pki)
    (tmp_path / "var").mkdir()
    env = environment(
        tmp_path / "var",
        pki,
        config,
        **Ports().binds(),
        BROKER_TASK_MODULES="tasks,team_bad_start",
        BROKER_CONSOLE_SECRET="a-console-secret-for-this-test-only-0123456789",
    )
    db.upgrade(env["BROKER_DATABASE_URL"])
    db.dispose_engines()
    child_env = process_env(env)
    child_env["PYTHONPATH"] = f"{child_env['PYTHONPATH']}:{tmp_path}"
    argv = roles.worker(concurrency=1) if role == "worker" else roles.listener(role, workers=1)
    # When the role is started alone
    child = subprocess.Popen(
        argv,
        env=child_env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = child.communicate(timeout=EXIT_WITHIN)
    finally:
        if child.poll() is None:  # it kept serving: stop it and everything it started
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    # Then it exits with an error, naming the activity and what is wrong
    assert child.returncode != 0, output[-3000:]
    assert "'Elsa.WriteLine' shadows a built-in Elsa activity" in output, output[-3000:]
    assert "module 'team_bad_start'" in output, output[-3000:]
