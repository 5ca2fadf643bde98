"""``broker run`` as ``make run`` starts it, from a folder that is not the checkout, and what a user
sees beside it: a second shell that runs ``broker`` with no ``BROKER_*`` exported (the profile
the run wrote), and logs that stay quiet while nothing happens.

One stack serves the module; its stdout and stderr go to files (five roles' logs would fill an
unread pipe). It runs in its own session and is stopped by its process group id.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.services import PROJECT_ROOT, free_port

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
IDLE_SECONDS = 60.0
MOST_IDLE_INFO_LINES = 5
# gunicorn's own text format, which must not reach the output: "[2026-01-01 10:00:00 +0000] [42]"
GUNICORN_TEXT = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}\] \[\d+\]")


@dataclass
class Stack:
    folder: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path

    def lines(self) -> list[str]:
        return [
            line
            for path in (self.stdout, self.stderr)
            for line in path.read_text(errors="replace").splitlines()
        ]

    def records(self) -> list[dict[str, object]]:
        found = []
        for line in self.lines():
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
        return found


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Ctrl-C to the run's process group, then SIGKILL whatever is left of it."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=40)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait(timeout=10)


def _wait_for_record(stack: Stack, pattern: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        if any(re.search(pattern, str(r.get("message"))) for r in stack.records()):
            return
        assert stack.proc.poll() is None, "\n".join(stack.lines()[-40:])
        time.sleep(0.5)
    raise AssertionError(f"no log line matched {pattern!r}:\n" + "\n".join(stack.lines()[-40:]))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Given `broker run` started in a folder that is not the checkout (no config/ here), with
    # the checkout's workflows and allowlist named by absolute paths, on free loopback ports
    folder = tmp_path_factory.mktemp("elsewhere")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("BROKER_")},  # noqa: TID251
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # noqa: TID251
        "BROKER_PUBLIC_BIND": f"127.0.0.1:{free_port()}",
        "BROKER_INTERNAL_BIND": f"127.0.0.1:{free_port()}",
        "BROKER_CONSOLE_BIND": f"127.0.0.1:{free_port()}",
        "BROKER_WORKFLOW_PATHS": str(PROJECT_ROOT / "workflows"),
        "BROKER_CLIENTS_FILE": str(PROJECT_ROOT / "config" / "clients.json"),
        "BROKER_REQUEST_TYPES_FILE": str(PROJECT_ROOT / "config" / "requestTypes.json"),
        "BROKER_WORKER_CONCURRENCY": "1",
        "BROKER_WATCH_WORKFLOWS": "false",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    stdout, stderr = folder / "run.out", folder / "run.err"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        proc = subprocess.Popen(
            [str(BIN / "broker"), "run"],
            cwd=folder,
            env=env,
            start_new_session=True,
            stdout=out,
            stderr=err,
        )
    running = Stack(folder, env, proc, stdout, stderr)
    try:
        deadline = time.monotonic() + 150
        _wait_for_record(running, r"celery@\S+ ready", deadline)
        _wait_for_record(running, r"beat: Starting", deadline)
        _wait_for_record(running, r"Listening at: https://", deadline)
        yield running
    finally:
        _stop(proc)


def second_shell(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """``broker ARGS`` in a new shell of the run's folder: no BROKER_* variable at all."""
    env = {k: v for k, v in stack.env.items() if not k.startswith("BROKER_")}
    return subprocess.run(
        [str(BIN / "broker"), *args],
        cwd=stack.folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_idle_run_writes_at_most_a_few_info_lines_a_minute(stack: Stack) -> None:
    # Given a started stack that nothing calls (startup settles first)
    time.sleep(5)
    before = len(stack.records())
    # When it idles for a minute
    time.sleep(IDLE_SECONDS)
    # Then it wrote at most a few INFO lines (maintenance ticks that did nothing are DEBUG)
    idle = stack.records()[before:]
    info = [r for r in idle if r.get("level") == "INFO"]
    assert len(info) <= MOST_IDLE_INFO_LINES, json.dumps(info[:20], indent=1)
    # And nothing warned about a missing transport host (kombu, under Flower and the worker)
    assert not [r for r in stack.records() if "No hostname was supplied" in str(r["message"])]


def test_every_role_logs_in_the_brokers_json_format(stack: Stack) -> None:
    # Given a request answered by the internal listener (an access line)
    internal = stack.env["BROKER_INTERNAL_BIND"]
    subprocess.run(
        ["curl", "-s", "-o", "/dev/null", f"http://{internal}/healthz"],
        timeout=30,
        check=False,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        access = [r for r in stack.records() if r.get("logger") == "gunicorn.access"]
        if access:
            break
        time.sleep(0.3)
    # Then gunicorn's error and access lines, Celery's worker and beat lines are JSON objects
    loggers = {str(r.get("logger")) for r in stack.records()}
    assert {"gunicorn.error", "gunicorn.access", "celery.apps.worker", "celery.beat"} <= loggers
    assert access[0]["http_path"] == "/healthz"
    assert access[0]["http_status"] == 200
    # And no line is in gunicorn's own text format, nor Celery's banner
    assert not [line for line in stack.lines() if GUNICORN_TEXT.match(line)]
    assert not [line for line in stack.lines() if "-------------- celery@" in line]


def test_a_second_shell_uses_the_runs_profile_without_exports(stack: Stack) -> None:
    # Given the profile the run wrote into its var folder
    profile = stack.folder / "var" / "cli-profile.json"
    assert oct(profile.stat().st_mode & 0o777) == "0o600"
    assert json.loads(profile.read_text())["url"].endswith(stack.env["BROKER_PUBLIC_BIND"][-5:])
    # When a second shell submits with no BROKER_* variable, capturing the id
    submitted = second_shell(
        stack, "requests", "submit", "InvoiceProcess",
        "-k", "InvoiceNumber=INV-SHELL", "-k", "VendorCode=V-2", "--payload", '{"amount": 1}',
    )  # fmt: skip
    # Then it printed the correlation id alone, which reads back
    assert submitted.returncode == 0, submitted.stderr
    request_id = submitted.stdout.strip()
    assert submitted.stdout == f"{request_id}\n"
    got = second_shell(stack, "requests", "get", request_id, "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["keys"]["InvoiceNumber"] == "INV-SHELL"
    # And a list prints the API's page shape
    listed = json.loads(second_shell(stack, "requests", "list", "--json").stdout)
    assert request_id in [r["correlationId"] for r in listed["items"]]
    assert {"totalCount", "page", "pageSize"} <= set(listed)
    # And the commands that read the database take the run's settings from the profile too
    outbox = second_shell(stack, "outbox", "status", "--json")
    assert outbox.returncode == 0, outbox.stderr
    assert sum(json.loads(outbox.stdout)["outbox"].values()) >= 1


def test_profile_and_environment_choose_another_profile(stack: Stack, tmp_path: Path) -> None:
    # Given a copy of the run's profile elsewhere, and a profile that does not exist
    copy = tmp_path / "mine.json"
    copy.write_text((stack.folder / "var" / "cli-profile.json").read_text())
    missing = tmp_path / "nothing.json"
    # When each is chosen by --profile, by BROKER_PROFILE and per command
    by_option = second_shell(stack, "--profile", str(copy), "requests", "types", "--json")
    per_command = second_shell(stack, "requests", "types", "--profile", str(missing))
    by_env = subprocess.run(
        [str(BIN / "broker"), "requests", "types"],
        cwd=tmp_path,
        env={**second_env(stack), "BROKER_PROFILE": str(missing)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Then the copy works from any folder, and a missing profile is an error naming the file
    assert by_option.returncode == 0, by_option.stderr
    assert "InvoiceProcess" in by_option.stdout
    assert per_command.returncode == 1
    assert str(missing) in per_command.stderr
    assert by_env.returncode == 1
    assert str(missing) in by_env.stderr


def second_env(stack: Stack) -> dict[str, str]:
    return {k: v for k, v in stack.env.items() if not k.startswith("BROKER_")}
