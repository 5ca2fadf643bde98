"""RunTask targets that kill the process running them, for the poison tests: a worker lists this
module in BROKER_TASK_MODULES (it is never part of the product's ``tasks`` package).

Each records its attempt (the pool process's pid, one line in ``payload["attempts"]``) and dies
while the file ``payload["switch"]`` exists; once the test removes it (the cause fixed), the task
answers normally.
"""

from __future__ import annotations

import ctypes
import os
import resource
from pathlib import Path
from typing import Any

from celery import shared_task

#: what each allocation takes, and at most how much a task tries to take in all
CHUNK = 16 * 2**20
HOG_LIMIT = 8 * 2**30


def _armed(payload: dict[str, Any]) -> bool:
    with Path(payload["attempts"]).open("a") as attempts:
        attempts.write(f"{os.getpid()}\n")
    return Path(payload["switch"]).exists()


def _hog() -> list[bytearray]:
    """Take memory and touch every page of it (a bytearray is zero-filled), chunk by chunk."""
    held = []
    for _ in range(HOG_LIMIT // CHUNK):
        held.append(bytearray(CHUNK))
    return held


@shared_task(name="poison.segfault")  # type: ignore[untyped-decorator]
def segfault(payload: dict[str, Any]) -> dict[str, Any]:
    """A native library reading address 0: SIGSEGV."""
    if _armed(payload):
        ctypes.string_at(0)
    return {"survived": "segfault"}


@shared_task(name="poison.oom")  # type: ignore[untyped-decorator]
def oom(payload: dict[str, Any]) -> dict[str, Any]:
    """The process joins a memory cgroup the test capped, then takes more than the cap: the
    kernel's OOM killer sends it SIGKILL, as it does to a container over its memory limit."""
    if _armed(payload):
        (Path(payload["cgroup"]) / "cgroup.procs").write_text(str(os.getpid()))
        _hog()
    return {"survived": "oom"}


@shared_task(name="poison.memory_error")  # type: ignore[untyped-decorator]
def memory_error(payload: dict[str, Any]) -> dict[str, Any]:
    """An address-space limit (RLIMIT_AS) a little above what the process maps, then more than
    that: the allocation fails with ``MemoryError`` (the kernel kills nothing here; the broker's
    task base ends the pool process, ``tasks.celery_app.DurableTask``)."""
    if _armed(payload):
        mapped = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (mapped + 128 * 2**20, hard))
        _hog()
    return {"survived": "memory_error"}


@shared_task(name="poison.exit")  # type: ignore[untyped-decorator]
def exit_now(payload: dict[str, Any]) -> dict[str, Any]:
    """A team's own code calling ``os._exit``: no cleanup, no result."""
    if _armed(payload):
        os._exit(1)
    return {"survived": "exit"}
