"""Watching workflow folders: file-system events, debounced into one reload per burst
(docs/design.md, section 9)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

logger = logging.getLogger(__name__)

# Events that change nothing on disk (watchdog reports opens and read-only closes on inotify).
_IGNORED_EVENTS = frozenset({"opened", "closed_no_write"})
_FOLDER_EVENTS = frozenset({"created", "deleted", "moved"})


class FolderWatcher:
    """Calls ``on_change`` after each burst of changes to ``*.json`` files under ``folders``."""

    def __init__(
        self,
        folders: Sequence[Path],
        on_change: Callable[[], None],
        *,
        quiet: float = 0.2,
        max_delay: float = 1.0,
    ) -> None:
        self._folders = list(folders)
        self._on_change = on_change
        self._quiet = quiet
        self._max_delay = max_delay
        self._cond = threading.Condition()
        self._first_event: float | None = None
        self._last_event = 0.0
        self._stopping = False
        self._observer: Observer | None = None  # type: ignore[valid-type]
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is not None:
            return
        observer = Observer()
        handler = _Handler(self)
        for folder in self._folders:
            if folder.is_dir():
                observer.schedule(handler, str(folder), recursive=True)
            else:
                logger.warning("workflow folder %s does not exist and is not watched", folder)
        observer.daemon = True
        observer.start()
        self._observer = observer
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="workflow-watcher", daemon=True)
        self._thread.start()
        logger.info("watching workflow folders %s", ", ".join(map(str, self._folders)))

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the observer and the reload thread, waiting at most ``timeout`` for each."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout)
            self._observer = None
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def notify(self) -> None:
        """Record a change; the reload follows once the burst is over."""
        now = time.monotonic()
        with self._cond:
            if self._first_event is None:
                self._first_event = now
            self._last_event = now
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._first_event is None and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                while not self._stopping:
                    now = time.monotonic()
                    assert self._first_event is not None
                    due = min(self._last_event + self._quiet, self._first_event + self._max_delay)
                    if now >= due:
                        break
                    self._cond.wait(due - now)
                if self._stopping:
                    return
                self._first_event = None
            try:
                self._on_change()
            except Exception:
                logger.exception("reloading the workflow folders failed; the previous view stays")


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: FolderWatcher) -> None:
        self._watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in _IGNORED_EVENTS:
            return
        if event.is_directory:
            if event.event_type in _FOLDER_EVENTS:
                self._watcher.notify()
            return
        paths = [event.src_path, getattr(event, "dest_path", "")]
        if any(_is_json(p) for p in paths):
            self._watcher.notify()


def _is_json(path: str | bytes) -> bool:
    text = path.decode(errors="replace") if isinstance(path, bytes) else path
    return text.lower().endswith(".json")
