"""The test stack (``tests/support/stack``): roles started in their own process groups, stopped
together by pid, their logs kept and quoted when something goes wrong."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.support.stack import roles
from tests.support.stack.config import Ports, embedded, settings_of
from tests.support.stack.process import alive, children_of
from tests.support.stack.roster import Stack

#: a leader that starts a child of its own, then sleeps
PARENT = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print('parent up', flush=True)\n"
    "time.sleep(60)\n"
)


def wait_for_children(pid: int) -> list[int]:
    deadline = time.monotonic() + 10
    while not children_of(pid):
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.05)
    return children_of(pid)


def test_closing_a_stack_stops_every_role_it_started_with_their_children(tmp_path: Path) -> None:
    # Given a stack with two roles, each with a child of its own
    stack = Stack(tmp_path, embedded(tmp_path / "var"))
    first = stack.start("first", [sys.executable, "-c", PARENT])
    second = stack.start("second", [sys.executable, "-c", PARENT])
    pids = [first.pid, second.pid, *wait_for_children(first.pid), *wait_for_children(second.pid)]
    first.wait_for_log("parent up", timeout=10)
    # When it is closed
    stack.close(2)
    # Then every one of those processes is gone, and the logs stay
    deadline = time.monotonic() + 5
    while alive(pids):
        assert time.monotonic() < deadline, f"left running: {alive(pids)}"
        time.sleep(0.05)
    assert "parent up" in (tmp_path / "logs" / "first.log").read_text()
    assert not stack.processes


def test_a_role_that_exits_while_starting_fails_with_the_end_of_its_log(tmp_path: Path) -> None:
    # Given a listener role that dies before it listens
    stack = Stack(tmp_path, embedded(tmp_path / "var"))
    argv = [sys.executable, "-c", "print('no certificate at /nowhere'); raise SystemExit(3)"]
    stack.start("public", argv)
    # When the stack waits for it, then it fails at once, quoting the log
    with pytest.raises(RuntimeError, match="no certificate at /nowhere") as raised:
        stack.wait_listening(timeout=10)
    assert "public exited with 3" in str(raised.value)
    stack.close()


def test_a_role_restarted_behind_a_tests_back_is_named(tmp_path: Path) -> None:
    # Given a stack whose leaders were noted
    stack = Stack(tmp_path, {})
    stack.start("worker", [sys.executable, "-c", "import time; time.sleep(60)"])
    leaders = stack.leaders()
    stack.check_unchanged(leaders)
    # When the worker is replaced by another process
    stack.kill("worker")
    stack.start("worker", [sys.executable, "-c", "import time; time.sleep(60)"])
    # Then the check names it
    with pytest.raises(AssertionError, match="worker was restarted"):
        stack.check_unchanged(leaders)
    stack.close(1)


def test_the_roles_run_from_this_interpreter_with_the_deploy_files_configs(tmp_path: Path) -> None:
    public = roles.role("public", tmp_path)
    assert public[:3] == [sys.executable, "-m", "gunicorn"]
    assert public[-1] == "broker.serving.wsgi:public"
    assert Path(public[4]).name == "gunicorn.conf.py"
    assert Path(public[4]).is_file()
    worker = roles.role("worker2", tmp_path, concurrency=3)
    assert worker[worker.index("--hostname") + 1] == "worker2@%h"
    assert worker[worker.index("--concurrency") + 1] == "3"
    assert roles.beat(tmp_path / "s")[-2:] == ["--schedule", str(tmp_path / "s")]
    with pytest.raises(ValueError, match="unknown role"):
        roles.role("janitor", tmp_path)


def test_an_embedded_stack_needs_no_service_and_binds_loopback_only(tmp_path: Path) -> None:
    ports = Ports()
    settings = settings_of({**embedded(tmp_path), **ports.binds()})
    assert settings.database_url.startswith("sqlite:///")
    assert settings.queue_url == "filesystem://"
    assert len({ports.public, ports.internal, ports.console}) == 3
    assert all(bind.startswith("127.0.0.1:") for bind in ports.binds().values())
