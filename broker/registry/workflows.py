"""The workflow registry: the folders' workflows by request type, definition and version, reloaded
into a fresh index swapped in at once; its rules are in docs/design.md, section 1."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from broker.activities import load_activities
from broker.errors import StoreUnavailable, WorkflowDefinitionError
from broker.registry.files import (
    Problem,
    WorkflowFile,
    read_workflow_file,
    scan_folder,
    unresolved_activity,
)
from broker.registry.versions import (
    PublishedWorkflow,
    SessionFactory,
    derived_version_id,
    from_file,
    load_newest_published,
    load_version,
    next_version,
    publish,
    stored_queues,
)
from broker.registry.watcher import FolderWatcher
from broker.settings import Settings

logger = logging.getLogger(__name__)

Listener = Callable[[], None]


@dataclasses.dataclass(frozen=True)
class _Index:
    """One immutable view of the folders; replaced whole on every reload."""

    by_request_type: dict[str, PublishedWorkflow]  # lower-cased request type
    by_definition: dict[str, PublishedWorkflow]
    problems: tuple[Problem, ...]


@dataclasses.dataclass(frozen=True)
class _Candidate:
    folder: int  # position in workflow_paths
    file: WorkflowFile


class WorkflowRegistry:
    """Workflow definitions from the configured folders, published as versions."""

    def __init__(
        self,
        settings: Settings,
        session_factory: SessionFactory | None = None,
        *,
        quiet: float = 0.2,
        max_delay: float = 1.0,
    ) -> None:
        load_activities(settings)  # a team's Python activities: a bad one stops the process here
        self._folders = [Path(p) for p in settings.workflow_paths]
        self._factory = session_factory
        self._quiet = quiet
        self._max_delay = max_delay
        self._index = _Index({}, {}, ())
        self._load_lock = threading.Lock()
        self._versions_lock = threading.Lock()
        self._last_good: dict[str, WorkflowFile] = {}  # by file path
        self._published: dict[tuple[str, str], PublishedWorkflow] = {}  # (definition, hash)
        self._versions: dict[str, PublishedWorkflow] = {}  # every version seen, by version id
        self._listeners: list[Listener] = []
        self._watcher: FolderWatcher | None = None

    # Loading -------------------------------------------------------------------------------------

    def load(self) -> None:
        """Scan the folders, publish what changed, and swap in the new view."""
        with self._load_lock:
            problems: list[Problem] = []
            candidates = self._scan(problems)
            definitions, request_types = _resolve(candidates, problems)
            by_definition = self._publish_each(definitions, problems)
            by_request_type = {
                k: by_definition[c.file.definition_id]
                for k, c in request_types.items()
                if c.file.definition_id in by_definition
            }
            self._index = _Index(by_request_type, by_definition, tuple(problems))
        for problem in problems:
            logger.warning("workflow file %s skipped: %s", problem.file, problem.reason)
        logger.info(
            "workflow registry loaded: %d definition(s), %d request type(s), %d problem(s)",
            len(by_definition),
            len(by_request_type),
            len(problems),
        )
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:
                logger.exception("workflow registry listener %r failed", listener)

    def _scan(self, problems: list[Problem]) -> list[_Candidate]:
        candidates: list[_Candidate] = []
        seen: set[str] = set()
        previous = dict(self._last_good)
        for position, folder in enumerate(self._folders):
            if not folder.is_dir():
                problems.append(Problem(str(folder), "workflow folder does not exist"))
                continue
            for path in scan_folder(folder):
                wf = self._read(path, problems)
                if wf is not None:
                    seen.add(wf.source_path)
                    self._last_good[wf.source_path] = wf
                    candidates.append(_Candidate(position, wf))
        for gone in set(self._last_good) - seen:
            del self._last_good[gone]
        return self._resolve_activity_types(candidates, previous, problems)

    def _resolve_activity_types(
        self,
        candidates: list[_Candidate],
        previous: dict[str, WorkflowFile],
        problems: list[Problem],
    ) -> list[_Candidate]:
        """Refuse a file using an activity type no loaded file defines; its last good stays."""
        files = [c.file for c in candidates]
        kept: list[_Candidate] = []
        for candidate in candidates:
            error = unresolved_activity(candidate.file, files)
            if error is None:
                kept.append(candidate)
                continue
            problems.append(Problem(candidate.file.source_path, f"{error.path}: {error.reason}"))
            fallback = previous.get(candidate.file.source_path)
            if (
                fallback is not None
                and fallback is not candidate.file
                and unresolved_activity(fallback, files) is None
            ):
                logger.warning("keeping the last good version of %s", fallback.source_path)
                self._last_good[fallback.source_path] = fallback
                kept.append(dataclasses.replace(candidate, file=fallback))
                continue
            self._last_good.pop(candidate.file.source_path, None)
        return kept

    def _read(self, path: Path, problems: list[Problem]) -> WorkflowFile | None:
        """The file's content, or its last good content when it is invalid now (else None)."""
        try:
            return read_workflow_file(path)
        except FileNotFoundError:
            return None  # deleted while we scanned: the next reload sees it gone
        except WorkflowDefinitionError as exc:
            where = "" if exc.path == "$" else f"{exc.path}: "
            problems.append(Problem(str(path), where + exc.reason))
        except OSError as exc:
            problems.append(Problem(str(path), f"the file cannot be read: {exc.strerror}"))
        except Exception as exc:
            # One file must never take the others down: whatever reading it raised, it alone is
            # refused (and named), and every other definition loads.
            logger.exception("workflow file %s could not be loaded", path)
            problems.append(Problem(str(path), f"the file could not be loaded: {_brief(exc)}"))
        last_good = self._last_good.get(str(path))
        if last_good is not None:
            logger.warning("keeping the last good version of %s", path)
        return last_good

    def _publish_each(
        self, definitions: dict[str, _Candidate], problems: list[Problem]
    ) -> dict[str, PublishedWorkflow]:
        """Publish every winning file; one the store refuses is refused alone (the database
        being down is not the file's fault: that still fails the load, the last view stays)."""
        published: dict[str, PublishedWorkflow] = {}
        for definition_id, candidate in definitions.items():
            try:
                published[definition_id] = self._publish(candidate.file)
            except StoreUnavailable:
                raise
            except Exception as exc:
                logger.exception(
                    "workflow file %s could not be published", candidate.file.source_path
                )
                self._last_good.pop(candidate.file.source_path, None)
                problems.append(
                    Problem(candidate.file.source_path, f"could not be published: {_brief(exc)}")
                )
        return published

    def _publish(self, wf: WorkflowFile) -> PublishedWorkflow:
        current = self._index.by_definition.get(wf.definition_id)
        if current is not None and current.content_hash == wf.content_hash:
            if current.source_path != wf.source_path:
                current = dataclasses.replace(current, source_path=wf.source_path)
            return current
        # New content, or content seen before that comes back (a revert): publishing is
        # idempotent, and in the database it also moves is_latest back to the stored version.
        key = (wf.definition_id, wf.content_hash)
        if self._factory is not None:
            published = publish(self._factory, wf)
        else:
            published = self._published.get(key) or self._publish_in_memory(wf)
        self._published[key] = published
        with self._versions_lock:
            self._versions[published.version_id] = published
        return published

    def _publish_in_memory(self, wf: WorkflowFile) -> PublishedWorkflow:
        with self._versions_lock:
            versions = [
                v.version for v in self._versions.values() if v.definition_id == wf.definition_id
            ]
            version_id = wf.file_version_id
            if version_id is None or version_id in self._versions:
                version_id = derived_version_id(wf.definition_id, wf.content_hash)
        return from_file(
            wf,
            version_id=version_id,
            version=next_version(max(versions, default=None), wf.file_version),
        )

    # Lookups -------------------------------------------------------------------------------------

    def for_request_type(self, name: str) -> PublishedWorkflow | None:
        """The latest workflow registered for a request type (case-insensitive)."""
        return self._index.by_request_type.get(name.lower())

    def get_version(self, version_id: str) -> PublishedWorkflow | None:
        """A version by id: from memory, else from the database (older or deleted versions)."""
        with self._versions_lock:
            found = self._versions.get(version_id)
        if found is not None or self._factory is None:
            return found
        found = load_version(self._factory, version_id)
        if found is not None:
            with self._versions_lock:  # versions never change once stored
                self._versions[version_id] = found
        return found

    def get_definition(
        self, definition_id: str, *, published: bool = True
    ) -> PublishedWorkflow | None:
        """A loaded definition: its newest published version, or else its latest one."""
        current = self._index.by_definition.get(definition_id)
        if current is None or current.published or not published:
            return current
        # The file is a draft: fall back to the newest version that was published.
        if self._factory is not None:
            return load_newest_published(self._factory, definition_id)
        with self._versions_lock:
            candidates = [
                v
                for v in self._versions.values()
                if v.definition_id == definition_id and v.published
            ]
        return max(candidates, key=lambda v: v.version, default=None)

    def request_types(self) -> list[PublishedWorkflow]:
        """The workflows that serve a request type, sorted by request type."""
        index = self._index.by_request_type
        return [index[key] for key in sorted(index)]

    def definitions(self) -> list[PublishedWorkflow]:
        """Every loaded definition, sorted by definition id."""
        index = self._index.by_definition
        return [index[key] for key in sorted(index)]

    def queues(self) -> set[str]:
        """The queue of every loaded definition and of every stored version: a worker consumes
        them all, so an instance whose workflow file went bad (an activity that gained a
        required input) or was removed still runs its steps. Without the database: the loaded
        ones."""
        queues = {workflow.queue for workflow in self.definitions()}
        if self._factory is not None:
            try:
                queues |= stored_queues(self._factory)
            except StoreUnavailable:
                logger.warning("the stored workflow versions' queues could not be read")
        return queues

    @property
    def problems(self) -> list[Problem]:
        """The files (and folders) the last load skipped, with the reason."""
        return list(self._index.problems)

    def shown_problems(self) -> list[Problem]:
        """``problems`` as the console shows them: each file named within its workflow folder
        (``invoices/deep.json``), never by where the folder is on the server."""
        shown = []
        for problem in self._index.problems:
            path = Path(problem.file)
            name = path.name
            for folder in self._folders:
                if path == folder or folder in path.parents:
                    name = str(path.relative_to(folder)) if path != folder else folder.name
                    break
            shown.append(Problem(name or path.name, problem.reason))
        return shown

    # Watching ------------------------------------------------------------------------------------

    def add_listener(self, fn: Listener) -> None:
        """Call ``fn()`` after every reload (from the reloading thread)."""
        self._listeners.append(fn)

    def watch(self) -> None:
        """Reload automatically when a workflow file changes (idempotent).

        Call ``load()`` first; whether to watch at all is the caller's choice
        (``settings.watch_workflows``).
        """
        if self._watcher is None:
            self._watcher = FolderWatcher(
                self._folders, self.load, quiet=self._quiet, max_delay=self._max_delay
            )
        self._watcher.start()

    def stop(self) -> None:
        """Stop watching (idempotent)."""
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None


def _brief(exc: Exception) -> str:
    """An unexpected error in a line a problem list can show (its type, its first line)."""
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    return f"{type(exc).__name__}: {first}"[:300] if first else type(exc).__name__


def _resolve(
    candidates: list[_Candidate], problems: list[Problem]
) -> tuple[dict[str, _Candidate], dict[str, _Candidate]]:
    """Pick the winning file per definition id and per request type (docs/design.md, section 1)."""
    definitions: dict[str, _Candidate] = {}
    for candidate in candidates:
        wf = candidate.file
        previous = definitions.get(wf.definition_id)
        if previous is not None and previous.folder == candidate.folder:
            problems.append(
                Problem(
                    wf.source_path,
                    f"definitionId {wf.definition_id!r} is "
                    f"already defined by {previous.file.source_path}",
                )
            )
            continue
        if previous is not None:
            logger.info(
                "definition %s from %s overrides %s",
                wf.definition_id,
                wf.source_path,
                previous.file.source_path,
            )
        definitions[wf.definition_id] = candidate
    request_types: dict[str, _Candidate] = {}
    for candidate in sorted(definitions.values(), key=lambda c: (c.folder, c.file.source_path)):
        wf = candidate.file
        if wf.request_type is None:
            continue
        key = wf.request_type.lower()
        previous = request_types.get(key)
        if previous is not None and previous.folder == candidate.folder:
            problems.append(
                Problem(
                    wf.source_path,
                    f"request type {wf.request_type!r} is "
                    f"already claimed by {previous.file.source_path}",
                )
            )
            continue
        request_types[key] = candidate
    return definitions, request_types
