"""Files that hold a secret or steer the broker (generated secrets, the development console key,
the CLI profile): written whole at ``0600`` through a fresh file that is renamed into place, never
through a link; read only when no one else can have written them."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from broker.errors import ConfigError

#: the mode of every private file the broker writes
PRIVATE_MODE = 0o600
_FRESH = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def write_private(path: Path, data: str | bytes) -> Path:
    """Write ``data`` to ``path``, readable and writable by this user only.

    The bytes go into a new file beside ``path`` (``O_EXCL|O_NOFOLLOW``: never one that exists,
    never through a link), created at ``0600``, flushed to disk, then renamed over ``path``: a
    link, a file of another mode or a half-written file at ``path`` is replaced, not followed or
    reused. Answers ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    scratch = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(scratch, _FRESH, PRIVATE_MODE)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), PRIVATE_MODE)  # whatever the umask
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(scratch, path)
    except BaseException:
        with contextlib.suppress(OSError):
            scratch.unlink()
        raise
    return path


def create_private(path: Path, data: str | bytes) -> bool:
    """Create ``path`` with ``data`` at ``0600`` unless something is there already (a file or a
    link, which is left alone); answers whether this call created it. For values made once, that
    concurrent first runs must agree on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd = os.open(path, _FRESH, PRIVATE_MODE)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), PRIVATE_MODE)
        handle.write(raw)
        handle.flush()
        os.fsync(handle.fileno())
    return True


def read_private(path: Path, what: str) -> str:
    """The text of ``path`` when only this user can have written it: a regular file (not a link)
    owned by this user (or root), writable by no group and no other user. ``ConfigError``
    naming ``what`` and the reason otherwise; ``FileNotFoundError`` when it is not there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        if path.is_symlink():
            raise ConfigError(
                f"{what} {path} is a symbolic link; refusing to read it", path=str(path)
            ) from exc
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror}", path=str(path)) from exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        problem = _untrusted(info)
        if problem is not None:
            raise ConfigError(f"{what} {path} {problem}; refusing to read it", path=str(path))
        raw = handle.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path} is not UTF-8 text", path=str(path)) from exc


def _untrusted(info: os.stat_result) -> str | None:
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_uid not in (os.getuid(), 0):
        return f"belongs to another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"can be written by other users (mode {stat.S_IMODE(info.st_mode):04o})"
    return None
