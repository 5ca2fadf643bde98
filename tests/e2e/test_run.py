"""`broker run` (what `make run` calls): every role starts, /healthz answers, Ctrl-C stops all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT, free_port

pytestmark = pytest.mark.slow


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the fields after the command name: state ppid pgrp ...
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _wait_for(url: str, deadline: float) -> bytes:
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bytes(response.read())
        except OSError as exc:
            last = exc
            time.sleep(0.3)
    raise AssertionError(f"{url} never answered: {last}")


def test_run_serves_healthz_and_ctrl_c_leaves_no_process(tmp_path: Path) -> None:
    # Given a configuration rooted in a temporary folder, on free loopback ports
    var = tmp_path / "var"
    internal = f"127.0.0.1:{free_port()}"
    console = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,  # noqa: TID251 - the child needs PATH and friends
        "BROKER_VAR_DIR": str(var),
        "BROKER_DATABASE_URL": f"sqlite:///{var / 'broker.db'}",
        "BROKER_LOCK_URL": f"file://{var / 'locks'}",
        "BROKER_PUBLIC_BIND": f"127.0.0.1:{free_port()}",
        "BROKER_INTERNAL_BIND": internal,
        "BROKER_CONSOLE_BIND": console,
        "BROKER_TLS_CERT": str(var / "certs" / "server.pem"),
        "BROKER_TLS_KEY": str(var / "certs" / "server.key"),
        "BROKER_TLS_CLIENT_CA": str(var / "certs" / "ca.pem"),
        "BROKER_SMTP_URL": f"file://{var / 'mail'}",
        "BROKER_WORKER_CONCURRENCY": "1",
    }
    broker = Path(sys.executable).parent / "broker"
    log = (tmp_path / "run.log").open("wb")
    proc = subprocess.Popen(
        [str(broker), "run"],
        cwd=PROJECT_ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=log,  # a file, not a pipe: five roles' logs would fill a pipe nobody reads
    )
    try:
        # When it has started
        body = _wait_for(f"http://{internal}/healthz", time.monotonic() + 90)
        # Then the internal listener answers, and the dev certificates exist
        assert b"ok" in body
        for name in ("ca.pem", "server.pem", "server.key", "DevClient.pem", "DevClient.key"):
            assert (var / "certs" / name).exists(), name
        # And the console listener answers, with a development key kept in var/ only
        assert b"ok" in _wait_for(f"http://{console}/healthz", time.monotonic() + 60)
        key = (var / "console-dev-key").read_text().strip()
        assert key.startswith("bk_")
        assert oct((var / "console-dev-key").stat().st_mode & 0o777) == "0o600"
        # When Ctrl-C reaches the whole foreground group
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=40)
        # And the console's URL was printed with the key in its fragment
        printed = (tmp_path / "run.log").read_text(errors="replace")
        assert f"http://{console}/sign-in#key={key}" in printed
        # Then nothing of the group is left running
        deadline = time.monotonic() + 10
        while _group_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _group_members(proc.pid) == []
    finally:
        if proc.poll() is None or _group_members(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()
