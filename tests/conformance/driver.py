"""Runs one conformance case on the workflow authors' testing kit (``broker.engine.testing``):
the case's files and ``httpRequests`` become a ``WorkflowTest``, its ``runMode`` and ``resume``
steps calls on the ``WorkflowRun``, which holds what an ``expect`` checks."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any
from unittest import mock

from broker.engine.model.definition import WorkflowDefinition
from broker.engine.model.lookup import DefinitionIndex
from broker.engine.model.resilience import parse_strategy
from broker.engine.run.interpreter import Run
from broker.engine.run.results import Bookmark
from broker.engine.testing import HttpAnswer, HttpTable, WorkflowRun, WorkflowTest
from tests.conformance.loader import Case, load_definitions

ENTRY_INSTANCE_ID = "entry-instance"
RUN_MODES = ("untilEnd", "once", "trigger", "steps")
#: activity executions one case may make before it fails as a runaway (a loop that never ends
#: fails its case instead of hanging the suite); ``maxActivityRuns`` in a case overrides it
MAX_ACTIVITY_RUNS = 20_000


class CaseError(AssertionError):
    """Raised when a case cannot be run as written (bad ``expected.json``, nothing to resume)."""


@dataclasses.dataclass(frozen=True)
class Phase:
    """One point where an ``expect`` is checked: after the run, or after a resume step."""

    label: str
    expect: Mapping[str, Any]
    run: WorkflowRun


def http_table(entries: list[Mapping[str, Any]]) -> HttpTable:
    """The case's ``httpRequests``, matched on method and URL (the first entry wins); an entry
    with ``responses`` answers its calls with them in turn (the last one again when they run
    out). A call with no entry fails as an unreachable server (``connect``)."""
    answers: dict[str, list[HttpAnswer]] = {}
    for entry in entries:
        key = f"{str(entry.get('method', 'GET')).upper()} {entry.get('url')}"
        answers.setdefault(key, [http_answer(one) for one in entry.get("responses") or [entry]])
    return HttpTable(answers, otherwise=HttpAnswer(error="connect"))


def http_answer(entry: Mapping[str, Any]) -> HttpAnswer:
    """One answer: ``status``, ``body`` (``bodyBase64`` for bytes), ``headers``, ``error``."""
    headers = {str(k): str(v) for k, v in (entry.get("headers") or {}).items()}
    body = entry.get("body")
    if "bodyBase64" in entry:
        body = base64.b64decode(entry["bodyBase64"])
    return HttpAnswer(
        int(entry.get("status", 200)), body, headers, error=entry.get("error") or None
    )


def workflow_test(case: Case) -> WorkflowTest:
    """The case's entry workflow, with all its files and its HTTP table and flowchart mode."""
    expected = case.expected
    definitions = list(load_definitions(case).values())
    index = DefinitionIndex(definitions)
    version_id = expected.get("entryDefinitionVersionId")
    entry: WorkflowDefinition | None = (
        index.by_version_id(version_id) if version_id else None
    ) or index.by_definition_id(expected["entryDefinitionId"])
    if entry is None:
        raise CaseError(f"{case.id}: the entry definition did not load")
    return WorkflowTest(
        entry,
        uses=definitions,
        http=http_table(list(expected.get("httpRequests") or [])),
        flowchart_mode=(expected.get("options") or {}).get("flowchartMode", "CounterBased"),
        standard_in=[str(line) for line in expected.get("standardIn") or ()],
        # Elsa's ``Resilience:Strategies`` configuration of the upstream test
        strategies=[parse_strategy(s) for s in expected.get("resilienceStrategies") or ()],
    )


class Budget:
    """Counts the activity executions of a case over all its engine calls; past the bound, the
    call fails with ``CaseError`` (a count, not a clock: the same on any machine). Each call is
    bounded on its own (``with budget:``), so no patch outlives it."""

    def __init__(self, case: Case) -> None:
        self.case_id = case.id
        self.limit = int(case.expected.get("maxActivityRuns", MAX_ACTIVITY_RUNS))
        self.count = 0
        self._patch: Any = None

    def __enter__(self) -> None:
        execute = Run.execute

        def counted(run: Run, ctx_id: str) -> None:
            self.count += 1
            if self.count > self.limit:
                raise CaseError(
                    f"{self.case_id}: more than {self.limit} activity executions (a runaway loop)"
                )
            execute(run, ctx_id)

        self._patch = mock.patch.object(Run, "execute", counted)
        self._patch.start()

    def __exit__(self, *exc: object) -> None:
        self._patch.stop()


def run_case(case: Case) -> Iterator[Phase]:
    """Run the case, yielding each phase to check as soon as it is reached; its engine calls
    together make at most ``maxActivityRuns`` activity executions."""
    budget = Budget(case)
    expected = case.expected
    run_mode = expected.get("runMode", "untilEnd")
    if run_mode not in RUN_MODES:
        raise CaseError(f"{case.id}: runMode must be one of {', '.join(RUN_MODES)}")
    flow = workflow_test(case)
    payload = expected.get("input") or {}
    with budget:
        if run_mode == "trigger":
            run = start_by_trigger(flow, expected["trigger"])
        else:
            # ``httpContext``: the upstream test runs the workflow inside an HTTP request (a mocked
            # HttpContext) that its response activities answer
            run = flow.start(
                payload,
                instance_id=ENTRY_INSTANCE_ID,
                http_request=bool(expected.get("httpContext")),
            )
        if run_mode == "untilEnd":
            resume_until_end(run, payload)
    yield Phase("run", expected.get("expect") or {}, run)

    for number, step in enumerate(expected.get("resume") or ()):
        label = f"resume[{number}]"
        with budget:
            if isinstance(step.get("http"), Mapping):  # a call to /workflows/{path}
                call = step["http"]
                run.call_endpoint(
                    call["method"], call["path"], call.get("body"), query=call.get("query")
                )
            elif isinstance(step.get("webhook"), Mapping):  # POST /webhooks
                run.deliver_webhook(step["webhook"]["eventType"], step["webhook"].get("payload"))
            else:
                for bookmark in matching_bookmarks(run, step, label):
                    run.resume(bookmark.id, step.get("input", step.get("payload")))
        yield Phase(label, step.get("expect") or {}, run)


def resume_until_end(run: WorkflowRun, payload: Any) -> None:
    """The upstream "run until end" helper: resume every open bookmark until none is left."""
    while run.status != "Finished" and run.bookmarks:
        for bookmark in list(run.bookmarks):
            run.resume(bookmark.id, payload)


def matching_bookmarks(run: WorkflowRun, step: Mapping[str, Any], label: str) -> list[Bookmark]:
    wanted = step.get("bookmark")
    if wanted is None and "event" in step:  # the corpus README's draft form
        wanted = {"type": "Elsa.Event", "name": step["event"]}
    if not isinstance(wanted, Mapping) or not wanted:
        raise CaseError(f"{label}.bookmark must name an activityId or a type")
    found = [b for b in run.bookmarks if bookmark_matches(b, wanted)]
    if not found:
        open_ = [(b.activity_id, b.name, dict(b.payload)) for b in run.bookmarks]
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


def start_by_trigger(flow: WorkflowTest, trigger: Mapping[str, Any]) -> WorkflowRun:
    """Deliver the case's stimulus to the matching trigger (HTTP: method and path)."""
    stimulus = trigger.get("http")
    if not isinstance(stimulus, Mapping):
        raise CaseError("trigger.http is the only stimulus a case can deliver")
    return flow.call_endpoint(
        stimulus["method"], stimulus["path"], stimulus.get("body"), instance_id=ENTRY_INSTANCE_ID
    )
