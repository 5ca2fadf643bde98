"""Runs one conformance case in-process: loads its definitions, starts the entry as its
``runMode`` says, applies its ``resume`` steps, and records what an ``expect`` can check."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterator, Mapping
from typing import Any

from broker.engine.api import Engine, EngineServices
from broker.engine.model.definition import WorkflowDefinition
from broker.engine.model.lookup import DefinitionIndex
from broker.engine.run.ports import HttpRequest, HttpResponse
from broker.engine.run.results import Bookmark, ChildInstance, JournalEntry, RunResult
from broker.errors import RetryLater
from tests.conformance.loader import Case, load_definitions

ENTRY_INSTANCE_ID = "entry-instance"
FIXED_NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
RUN_MODES = ("untilEnd", "once", "trigger", "steps")


class CaseError(AssertionError):
    """Raised when a case cannot be run as written (bad ``expected.json``, nothing to resume)."""


@dataclasses.dataclass
class Observed:
    """What a run showed so far: the latest result and everything captured since the start."""

    result: RunResult
    lines: list[str] = dataclasses.field(default_factory=list)
    journal: list[JournalEntry] = dataclasses.field(default_factory=list)
    children: list[ChildInstance] = dataclasses.field(default_factory=list)
    http_calls: list[HttpRequest] = dataclasses.field(default_factory=list)

    def take(self, result: RunResult) -> None:
        self.result = result
        self.lines += result.write_lines
        self.journal += result.journal
        self.children += result.child_instances


@dataclasses.dataclass(frozen=True)
class Phase:
    """One point where an ``expect`` is checked: after the run, or after a resume step."""

    label: str
    expect: Mapping[str, Any]
    observed: Observed


class HttpTable:
    """Answers the engine's outbound HTTP calls from the case's ``httpRequests`` (no network).

    Matched on method and URL. An entry ``{"error": "connect" | "timeout"}`` fails the call as an
    unreachable or slow server would; a call with no entry fails as ``connect``."""

    def __init__(self, entries: list[Mapping[str, Any]]) -> None:
        self.entries = entries
        self.calls: list[HttpRequest] = []

    def send(self, request: HttpRequest) -> HttpResponse:
        self.calls.append(request)
        for entry in self.entries:
            if (
                str(entry.get("method", "GET")).upper() == request.method.upper()
                and entry.get("url") == request.url
            ):
                return self.answer(entry)
        raise RetryLater(
            f"no answer for {request.method} {request.url} in httpRequests", reason="connect"
        )

    def answer(self, entry: Mapping[str, Any]) -> HttpResponse:
        error = entry.get("error")
        if error:
            raise RetryLater(f"simulated {error} failure", reason=str(error))
        body = entry.get("body")
        headers = {str(k): str(v) for k, v in (entry.get("headers") or {}).items()}
        if isinstance(body, str):
            raw = body.encode()
        else:
            raw = json.dumps(body).encode() if body is not None else b""
            if body is not None:
                headers.setdefault("Content-Type", "application/json")
        return HttpResponse(int(entry.get("status", 200)), headers, raw, body)


def build_engine(case: Case, definitions: Mapping[str, WorkflowDefinition]) -> Engine:
    expected = case.expected
    mode = (expected.get("options") or {}).get("flowchartMode", "CounterBased")
    table = HttpTable(list(expected.get("httpRequests") or []))
    services = EngineServices(http=table, clock=lambda: FIXED_NOW)
    return Engine(DefinitionIndex(definitions.values()), services, flowchart_mode=mode)


def entry_definition(case: Case, engine: Engine) -> WorkflowDefinition:
    index = engine.definitions
    assert isinstance(index, DefinitionIndex)
    version_id = case.expected.get("entryDefinitionVersionId")
    entry = (index.by_version_id(version_id) if version_id else None) or index.by_definition_id(
        case.expected["entryDefinitionId"]
    )
    if entry is None:
        raise CaseError(f"{case.id}: the entry definition did not load")
    return entry


def run_case(case: Case) -> Iterator[Phase]:
    """Run the case, yielding each phase to check as soon as it is reached."""
    expected = case.expected
    run_mode = expected.get("runMode", "untilEnd")
    if run_mode not in RUN_MODES:
        raise CaseError(f"{case.id}: runMode must be one of {', '.join(RUN_MODES)}")
    engine = build_engine(case, load_definitions(case))
    table = engine.services.http
    assert isinstance(table, HttpTable)
    entry = entry_definition(case, engine)
    mode = engine.flowchart_mode
    options = {"flowchartMode": mode}
    payload = expected.get("input") or {}

    if run_mode == "trigger":
        result = start_by_trigger(engine, entry, expected["trigger"], options)
    else:
        result = engine.start(entry, instance_id=ENTRY_INSTANCE_ID, input=payload, options=options)
    observed = Observed(result, http_calls=table.calls)
    observed.take(result)
    if run_mode == "untilEnd":
        resume_until_end(engine, observed, payload)
    yield Phase("run", expected.get("expect") or {}, observed)

    for number, step in enumerate(expected.get("resume") or (), start=1):
        label = f"resume[{number - 1}]"
        matching = matching_bookmarks(observed.result, step, label)
        for bookmark in matching:
            if not any(b["id"] == bookmark.id for b in observed.result.state["bookmarks"]):
                continue  # closed by an earlier resume of this step
            observed.take(
                engine.resume(
                    observed.result.state,
                    bookmark_id=bookmark.id,
                    input=step.get("input", step.get("payload")),
                )
            )
        yield Phase(label, step.get("expect") or {}, observed)


def resume_until_end(engine: Engine, observed: Observed, payload: Any) -> None:
    """The upstream "run until end" helper: resume every open bookmark until none is left."""
    result = observed.result
    while result.status != "Finished" and result.bookmarks:
        for bookmark in list(result.bookmarks):
            if not any(b["id"] == bookmark.id for b in result.state["bookmarks"]):
                continue
            result = engine.resume(result.state, bookmark_id=bookmark.id, input=payload)
            observed.take(result)


def matching_bookmarks(result: RunResult, step: Mapping[str, Any], label: str) -> list[Bookmark]:
    wanted = step.get("bookmark")
    if wanted is None and "event" in step:  # the corpus README's draft form
        wanted = {"type": "Elsa.Event", "name": step["event"]}
    if not isinstance(wanted, Mapping) or not wanted:
        raise CaseError(f"{label}.bookmark must name an activityId or a type")
    found = [b for b in result.bookmarks if bookmark_matches(b, wanted)]
    if not found:
        open_ = [(b.activity_id, b.name, dict(b.payload)) for b in result.bookmarks]
        raise CaseError(f"{label}: no open bookmark matches {dict(wanted)}; open: {open_}")
    return found


def bookmark_matches(bookmark: Bookmark, wanted: Mapping[str, Any]) -> bool:
    if "activityId" in wanted and bookmark.activity_id != wanted["activityId"]:
        return False
    if "type" in wanted and bookmark.name != wanted["type"]:
        return False
    if "name" in wanted:
        names = {bookmark.payload.get(k) for k in ("eventName", "name", "taskName")}
        if wanted["name"] not in names:
            return False
    return True


def start_by_trigger(
    engine: Engine,
    entry: WorkflowDefinition,
    trigger: Mapping[str, Any],
    options: Mapping[str, Any],
) -> RunResult:
    """Deliver the case's stimulus to the matching trigger (HTTP: method and path)."""
    stimulus = trigger.get("http")
    if not isinstance(stimulus, Mapping):
        raise CaseError("trigger.http is the only stimulus a case can deliver")
    for node in entry.triggers():
        if node.type != "Elsa.HttpEndpoint":
            continue
        path_input = node.inputs.get("path")
        path = (path_input.expression if path_input else None) or {}
        methods = node.inputs.get("supportedMethods")
        allowed = (
            json.loads(methods.expression["value"]) if methods and methods.expression else ["GET"]
        )
        if (
            str(path.get("value")).strip("/") == str(stimulus["path"]).strip("/")
            and stimulus["method"] in allowed
        ):
            return engine.start(
                entry,
                instance_id=ENTRY_INSTANCE_ID,
                options=options,
                trigger={
                    "activityId": node.id,
                    "method": stimulus["method"],
                    "path": stimulus["path"],
                    "body": stimulus.get("body"),
                },
            )
    raise CaseError(f"no HTTP trigger matches {dict(stimulus)}")
