"""The command line of each role, as the deploy files start it (``deploy/Procfile``).

A test stack never writes a role's command itself: it asks here, so the public and internal
listeners, the console, a worker, a beat and the relay run the way production runs them, from
this checkout's config files. ``python -m`` keeps the children on the interpreter of the tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.services import PROJECT_ROOT

CONFIG = PROJECT_ROOT / "config"
#: the gunicorn config and WSGI app of each listener
LISTENERS = {
    "public": ("gunicorn.conf.py", "broker.serving.wsgi:public"),
    "internal": ("gunicorn_internal.conf.py", "broker.serving.wsgi:internal"),
    "console": ("gunicorn_console.conf.py", None),
}


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def listener(role: str, *, workers: int | None = None, threads: int | None = None) -> list[str]:
    """gunicorn with the role's config (``public``, ``internal`` or ``console``); ``workers``
    and ``threads`` override the config's (a test wants one small process)."""
    conf, app = LISTENERS[role]
    argv = python("-m", "gunicorn", "-c", str(CONFIG / conf))
    if workers is not None:
        argv += ["--workers", str(workers)]
    if threads is not None:
        argv += ["--threads", str(threads)]
    return argv + ([app] if app else [])


def worker(
    name: str = "w1",
    *,
    concurrency: int = 2,
    beat: bool = False,
    events: bool = False,
    quiet: bool = True,
    host: str = "127.0.0.1",
) -> list[str]:
    """``celery -A tasks worker`` named ``name@host``; ``beat`` embeds the scheduler, ``events``
    sends task events (``-E``, for the monitors), ``quiet`` leaves out gossip, mingle and the
    worker heartbeat (a test's single worker needs none of them)."""
    argv = python("-m", "celery", "-A", "tasks", "worker", "--loglevel", "INFO",
                  "--concurrency", str(concurrency), "--hostname", f"{name}@{host}")  # fmt: skip
    if events:
        argv.append("-E")
    if quiet:
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    if beat:
        argv.append("--beat")
    return argv


def beat(schedule: Path, *, loglevel: str = "INFO") -> list[str]:
    """``celery -A tasks beat`` with a schedule file of its own (two beats must never share
    one). DEBUG shows each tick's "Sending due task" line, which some tests count."""
    return python("-m", "celery", "-A", "tasks", "beat", "--loglevel", loglevel,
                  "--schedule", str(schedule))  # fmt: skip


def flower(port: int) -> list[str]:
    """Celery's Flower on ``127.0.0.1:port``, reading the broker's transport."""
    return python("-m", "celery", "-A", "tasks", "flower", "--address=127.0.0.1", f"--port={port}")


def relay(observed: Path) -> list[str]:
    """The relay loop of ``tests/chaos/relay_process.py``, writing each publish to ``observed``."""
    return python("-m", "tests.chaos.relay_process", str(observed))


def role(name: str, var: Path, *, concurrency: int = 2) -> list[str]:
    """A role by the name the deploy files give it: ``public``, ``internal``, ``console``,
    ``beat`` or ``worker<anything>`` (the name becomes the worker's)."""
    if name in LISTENERS:
        return listener(name)
    if name == "beat":
        return beat(var / "celerybeat-schedule")
    if name.startswith("worker"):
        return worker(name, concurrency=concurrency, events=True, quiet=False, host="%h")
    raise ValueError(f"unknown role {name!r}")
