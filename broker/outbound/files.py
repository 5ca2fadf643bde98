"""The broker's own storage for files: what DownloadHttpFile fetched and WriteFileHttpResponse
serves. A folder (``BROKER_FILE_STORAGE_URL=file://DIR``), files named by plain ids, a size cap,
and a purge of files past their retention (docs/design.md, "File storage")."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from broker.backends import BackendUrl, by_url
from broker.engine.run.ports import FILE_ID, StoredFile
from broker.errors import BadRequest, NotFound, PayloadTooLarge
from broker.settings import Settings

logger = logging.getLogger(__name__)

DATA, META = ".bin", ".json"


class FolderFiles:
    """A ``FileStore`` in one folder: ``<id>.bin`` holds the bytes, ``<id>.json`` what they are.
    Each is written to a temporary file and renamed, so a reader never sees half a file."""

    def __init__(self, folder: Path, *, max_bytes: int) -> None:
        self.folder = folder
        self.max_bytes = max_bytes

    def put(
        self,
        file_id: str,
        data: bytes,
        *,
        filename: str,
        content_type: str,
        etag: str | None = None,
    ) -> StoredFile:
        if len(data) > self.max_bytes:
            raise PayloadTooLarge(
                f"file {file_id!r} of {len(data)} bytes exceeds the {self.max_bytes}-byte cap "
                "(BROKER_FILE_MAX_BYTES)",
                limit=self.max_bytes,
            )
        stored = StoredFile(file_id, filename, content_type, len(data), etag)
        base = self._base(file_id)
        self.folder.mkdir(parents=True, exist_ok=True)
        _write_atomically(base.with_suffix(DATA), data)
        _write_atomically(base.with_suffix(META), json.dumps(stored.to_json()).encode())
        return stored

    def read(self, file_id: str) -> tuple[StoredFile, bytes]:
        base = self._base(file_id)
        try:
            meta = json.loads(base.with_suffix(META).read_bytes())
            data = base.with_suffix(DATA).read_bytes()
        except FileNotFoundError as exc:
            raise NotFound(f"file {file_id!r} is not stored (purged, or never stored)") from exc
        stored = StoredFile.from_json(meta)
        if stored is None:
            raise NotFound(f"file {file_id!r} has no readable description")
        return stored, data

    def purge(self, older_than: dt.datetime) -> int:
        """Remove the files last written before ``older_than``; answers how many. Safe to run
        twice or from two processes at once: a file already gone is skipped."""
        if not self.folder.is_dir():
            return 0
        cutoff = older_than.timestamp()
        removed = 0
        for meta in self.folder.glob(f"*{META}"):
            try:
                if meta.stat().st_mtime >= cutoff:
                    continue
            except FileNotFoundError:
                continue
            for part in (meta.with_suffix(DATA), meta):
                with contextlib.suppress(FileNotFoundError):
                    part.unlink()
            removed += 1
        for orphan in self.folder.glob(f"*{DATA}"):  # bytes whose description never landed
            try:
                if orphan.stat().st_mtime < cutoff and not orphan.with_suffix(META).exists():
                    orphan.unlink()
            except FileNotFoundError:
                pass
        if removed:
            logger.info("file storage: %d files past their retention removed", removed)
        return removed

    def _base(self, file_id: str) -> Path:
        """The path stem of ``file_id``; a name that could leave the folder is refused."""
        if not isinstance(file_id, str) or not FILE_ID.fullmatch(file_id):
            raise BadRequest(f"file id {file_id!r} is not a plain name", field="fileId")
        base = self.folder / file_id
        if base.parent.resolve() != self.folder.resolve():
            raise BadRequest(f"file id {file_id!r} is not a plain name", field="fileId")
        return base


def _write_atomically(path: Path, data: bytes) -> None:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _folder(url: BackendUrl, settings: Settings) -> FolderFiles:
    return FolderFiles(Path(url.folder("file://var/files")), max_bytes=settings.file_max_bytes)


#: the file storage backends, by scheme
FILE_BACKENDS: dict[str, Any] = {"file": _folder}


def make_file_store(settings: Settings) -> FolderFiles:
    """The storage ``BROKER_FILE_STORAGE_URL`` names; ``ConfigError`` for another scheme."""
    store: FolderFiles = by_url(
        "BROKER_FILE_STORAGE_URL", settings.file_storage_url, FILE_BACKENDS, settings
    )
    return store
