"""A memory cgroup with a hard limit, for a test whose process must be OOM-killed by the kernel.

cgroup v1 (``/sys/fs/cgroup/memory``) or v2 (``/sys/fs/cgroup`` with the memory controller), made
under the root of the hierarchy and removed afterwards; needs root. ``unavailable`` says why one
cannot be made here.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

V1 = Path("/sys/fs/cgroup/memory")
V2 = Path("/sys/fs/cgroup")


def _hierarchy() -> tuple[Path, str] | None:
    if (V1 / "memory.limit_in_bytes").is_file():
        return V1, "v1"
    controllers = V2 / "cgroup.controllers"
    if controllers.is_file() and "memory" in controllers.read_text().split():
        return V2, "v2"
    return None


def unavailable() -> str:
    """Why a memory cgroup cannot be made here, or '' when it can."""
    if os.geteuid() != 0:
        return "a memory cgroup needs root"
    found = _hierarchy()
    if found is None:
        return "no cgroup memory controller is mounted"
    root, _ = found
    probe = root / f"broker-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError as exc:
        return f"cannot make a cgroup under {root}: {exc}"
    probe.rmdir()
    return ""


@contextlib.contextmanager
def memory_cgroup(limit: int) -> Iterator[Path]:
    """A cgroup whose members may use at most ``limit`` bytes (no swap): a process that writes
    its pid to ``<path>/cgroup.procs`` and takes more is killed by the kernel's OOM killer."""
    found = _hierarchy()
    if found is None:
        raise RuntimeError("no cgroup memory controller is mounted")
    root, version = found
    path = root / f"broker-poison-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        if version == "v1":
            (path / "memory.limit_in_bytes").write_text(str(limit))
            swap = path / "memory.memsw.limit_in_bytes"
            if swap.exists():
                with contextlib.suppress(OSError):
                    swap.write_text(str(limit))
        else:
            (path / "memory.max").write_text(str(limit))
            with contextlib.suppress(OSError):
                (path / "memory.swap.max").write_text("0")
        yield path
    finally:
        # A killed member leaves at once; a cgroup with members cannot be removed.
        deadline = time.monotonic() + 10
        while True:
            try:
                path.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
