"""What test processes build once and share through the temporary folder (a migrated SQLite
file, a PKI): built under a name of its own, then renamed into place in one step, so a reader
never sees half of it."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path


def built_once(target: Path, build: Callable[[Path], None]) -> Path:
    """``target``, built by ``build`` (a file or a folder at the path it is given) unless some
    process already put it in place."""
    if target.exists():
        return target
    building = target.with_name(f"{target.name}.build-{uuid.uuid4().hex[:12]}")
    try:
        build(building)
        with contextlib.suppress(OSError):  # a folder another process put in place first stays
            os.rename(building, target)
    finally:
        if building.is_dir():
            shutil.rmtree(building, ignore_errors=True)
        else:
            building.unlink(missing_ok=True)
    return target
