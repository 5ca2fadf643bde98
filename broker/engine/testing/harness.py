"""The authors' kit's harness: a workflow run in-process, stepped by events, timers and resumes."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from broker.engine.api import Engine, EngineServices
from broker.engine.model.definition import WorkflowDefinition
from broker.engine.model.lookup import DefinitionIndex
from broker.engine.parser import parse_workflow
from broker.engine.run.ports import EmailMessage, HttpRequest
from broker.engine.run.results import (
    Bookmark,
    ChildInstance,
    DispatchWorkflow,
    JournalEntry,
    RunResult,
    RunTask,
    WorkflowStatus,
    WorkflowSubStatus,
)
from broker.engine.testing.fakes import HttpAnswer, HttpTable, MailOutbox

EVENT_BOOKMARK = "Elsa.Event"
BULK_DISPATCH_BOOKMARK = "Elsa.BulkDispatchWorkflows"
#: the start of every clock in the harness, unless a test gives its own
DEFAULT_NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class WorkflowTest:
    """One workflow under test, with the definitions it uses (children, composite activities; the
    workflow may be among them, e.g. every file of a folder, indexed in the order given) and the
    tables that stand in for the outside world: ``http`` (a table's answers, or the table itself),
    ``tasks``, and the clock, which stays at ``now`` until timers fire. ``flowchart_mode``
    (``CounterBased`` or ``TokenBased``) holds for every instance, over what the files say."""

    def __init__(
        self,
        workflow: WorkflowDefinition,
        *,
        uses: Iterable[WorkflowDefinition] = (),
        http: HttpTable | Mapping[str, HttpAnswer | int | Any] | None = None,
        tasks: Mapping[str, Callable[[Any], Any]] | None = None,
        now: dt.datetime = DEFAULT_NOW,
        flowchart_mode: str | None = None,
    ) -> None:
        self.workflow = workflow
        used = list(uses)
        if not any(definition is workflow for definition in used):
            used.append(workflow)
        self.definitions = DefinitionIndex(used)
        self.http = http if isinstance(http, HttpTable) else HttpTable(http)
        self.mail = MailOutbox()
        self.tasks = dict(tasks or {})
        self.now = now
        self.flowchart_mode = flowchart_mode
        services = EngineServices(
            http=self.http, mailer=self.mail, clock=lambda: self.now, write_line=None
        )
        self.engine = Engine(
            self.definitions, services, flowchart_mode=flowchart_mode or "CounterBased"
        )

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        *,
        uses: Sequence[str | Path] = (),
        http: HttpTable | Mapping[str, HttpAnswer | int | Any] | None = None,
        tasks: Mapping[str, Callable[[Any], Any]] | None = None,
        now: dt.datetime = DEFAULT_NOW,
        flowchart_mode: str | None = None,
    ) -> WorkflowTest:
        """The workflow in ``path``, validated as the broker loads it, and the files it uses."""
        return cls(
            load_definition(path),
            uses=[load_definition(other) for other in uses],
            http=http,
            tasks=tasks,
            now=now,
            flowchart_mode=flowchart_mode,
        )

    def submit(
        self,
        keys: Mapping[str, str] | None = None,
        payload: Any = None,
        *,
        request_id: str = "request-1",
    ) -> WorkflowRun:
        """Start the workflow as a request does (input ``{keys, payload}``, correlation id the
        request id) and run it until it finishes or only waits remain."""
        return self.start(
            input={"keys": dict(keys or {}), "payload": payload or {}},
            correlation_id=request_id,
            instance_id=f"{request_id}-instance",
        )

    def start(
        self,
        input: Mapping[str, Any] | None = None,
        *,
        correlation_id: str | None = None,
        instance_id: str = "instance-1",
    ) -> WorkflowRun:
        """Start the workflow with ``input`` and run it until it finishes or only waits remain."""
        return self._start(instance_id, input=input, correlation_id=correlation_id)

    def call_endpoint(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
        instance_id: str = "instance-1",
    ) -> WorkflowRun:
        """Start the workflow through its ``HttpEndpoint`` trigger for ``method`` and ``path``
        (matched as the broker indexes them, in any case), as ``METHOD /workflows/{path}``
        does; the response it writes is ``run.latest.http_response``."""
        wanted = (method.upper(), path.strip("/").lower())
        for node in self.workflow.triggers():
            if node.type == "Elsa.HttpEndpoint" and wanted in _endpoint_routes(node.inputs):
                trigger = {"activityId": node.id, "method": method, "path": path, "body": body}
                if headers is not None:
                    trigger["headers"] = dict(headers)
                return self._start(instance_id, trigger=trigger)
        raise AssertionError(f"no HttpEndpoint trigger serves {method.upper()} {path}")

    def _start(
        self,
        instance_id: str,
        *,
        input: Mapping[str, Any] | None = None,
        correlation_id: str | None = None,
        trigger: Mapping[str, Any] | None = None,
    ) -> WorkflowRun:
        run = WorkflowRun(self, instance_id)
        run.absorb(
            self.engine.start(
                self.workflow,
                instance_id=instance_id,
                input=input,
                correlation_id=correlation_id,
                trigger=trigger,
                options=self.options(),
                write_lines=run.lines,
            )
        )
        return run

    def options(self) -> dict[str, Any]:
        """The engine's start options for every instance of the test (the flowchart mode)."""
        return {"flowchartMode": self.flowchart_mode} if self.flowchart_mode else {}


class WorkflowRun:
    """One instance of the workflow under test: its latest result, and everything it wrote, called
    and recorded along the way."""

    def __init__(self, test: WorkflowTest, instance_id: str) -> None:
        self.test = test
        self.instance_id = instance_id
        self.lines: list[str] = []
        self.journal: list[JournalEntry] = []
        self.result: RunResult | None = None
        #: every step's result in order: the start, each resume, each task answer
        self.results: list[RunResult] = []
        self.children: list[WorkflowRun] = []

    # What the run is now ------------------------------------------------------------------------

    @property
    def latest(self) -> RunResult:
        assert self.result is not None, "the workflow has not started"
        return self.result

    @property
    def status(self) -> str:
        return self.latest.status

    @property
    def sub_status(self) -> str:
        return self.latest.sub_status

    @property
    def output(self) -> Any:
        return self.latest.output

    @property
    def bookmarks(self) -> tuple[Bookmark, ...]:
        return self.latest.bookmarks

    @property
    def variables(self) -> dict[str, Any]:
        state = self.latest.state
        root = state["contexts"].get(state.get("rootContextId"))
        found = root["scope"]["vars"] if root else state.get("variables") or {}
        return dict(found)

    @property
    def child_instances(self) -> list[ChildInstance]:
        """The instances ``ExecuteWorkflow`` ran in-process, over the whole run (a dispatched
        child is in ``children``)."""
        return [child for result in self.results for child in result.child_instances]

    @property
    def http_calls(self) -> list[HttpRequest]:
        return self.test.http.calls

    @property
    def mail(self) -> list[EmailMessage]:
        return self.test.mail.messages

    # Stimuli ------------------------------------------------------------------------------------

    def deliver_event(self, name: str, payload: Any = None) -> Self:
        """Resume every bookmark waiting for the event ``name`` (as ``POST /events/{name}``)."""
        waiting = [
            b
            for b in self.bookmarks
            if b.name == EVENT_BOOKMARK and b.payload.get("eventName") == name
        ]
        assert waiting, f"no bookmark waits for the event {name!r} ({self._waits()})"
        for bookmark in waiting:
            self.resume(bookmark.id, payload)
        return self

    def fire_timers(self) -> Self:
        """Fire every due-time bookmark (Delay, Timer, StartAt, Cron) at once: the clock moves to
        the latest due time, as if the wait had passed."""
        timed = [b for b in self.bookmarks if b.due_at is not None]
        assert timed, f"no timer is waiting ({self._waits()})"
        self.test.now = max(self.test.now, *(b.due_at for b in timed if b.due_at is not None))
        for bookmark in timed:
            self.resume(bookmark.id)
        return self

    def resume(self, bookmark_id: str, input: Any = None) -> Self:
        """Resume one bookmark with ``input``; a bookmark an earlier resume removed is skipped."""
        if not any(b.id == bookmark_id for b in self.bookmarks):
            return self
        self.absorb(
            self.test.engine.resume(
                self.latest.state, bookmark_id=bookmark_id, input=input, write_lines=self.lines
            )
        )
        return self

    def absorb(self, result: RunResult) -> None:
        """Take a step's result, then carry out what it asks of the runtime that the harness can
        do in-process: answer RunTask from the task table, run a child it waits for."""
        self.result = result
        self.results.append(result)
        self.journal.extend(result.journal)
        for command in result.commands:
            if isinstance(command, RunTask) and command.task_name in self.test.tasks:
                answer = self.test.tasks[command.task_name](command.payload)
                self.resume(command.bookmark_id, answer)
            elif isinstance(command, DispatchWorkflow):
                self._run_child(command)

    def _run_child(self, command: DispatchWorkflow) -> None:
        definition = self.test.definitions.by_definition_id(command.definition_id)
        assert definition is not None, f"no definition {command.definition_id!r} was given"
        child = WorkflowRun(self.test, command.child_instance_id)
        child.lines = self.lines
        child.absorb(
            self.test.engine.start(
                definition,
                instance_id=command.child_instance_id,
                input=command.input,
                correlation_id=command.correlation_id,
                parent_id=command.parent_instance_id,
                options=self.test.options(),
                write_lines=child.lines,
            )
        )
        self.children.append(child)
        if command.wait_for_completion and command.bookmark_id and child.status == "Finished":
            self.resume(command.bookmark_id, self._completion_input(command.bookmark_id, child))

    def _completion_input(self, bookmark_id: str, child: WorkflowRun) -> Any:
        """What the runtime resumes a waiting parent with: for BulkDispatchWorkflows, Elsa's
        child-completed input (its port is chosen by the child's sub-status); else the output."""
        bookmark = next((b for b in self.bookmarks if b.id == bookmark_id), None)
        if bookmark is None or bookmark.name != BULK_DISPATCH_BOOKMARK:
            return child.output
        return {
            "WorkflowInstanceId": child.instance_id,
            "WorkflowSubStatus": child.sub_status,
            "WorkflowOutput": child.output,
        }

    # Assertions ---------------------------------------------------------------------------------

    def assert_finished(self) -> Self:
        """The workflow ended well (Finished, not Faulted or Cancelled)."""
        fault = self.latest.fault.message if self.latest.fault else None
        assert (self.status, self.sub_status) == (
            WorkflowStatus.FINISHED,
            WorkflowSubStatus.FINISHED,
        ), f"{self.status}/{self.sub_status}, fault: {fault}"
        return self

    def assert_faulted(self, message: str | None = None) -> Self:
        """The workflow faulted, with ``message`` in the fault's message when one is given."""
        assert self.sub_status == WorkflowSubStatus.FAULTED, f"{self.status}/{self.sub_status}"
        if message is not None:
            fault = self.latest.fault.message if self.latest.fault else ""
            assert message in fault, f"fault {fault!r} does not mention {message!r}"
        return self

    def assert_waiting_for(self, *activity_ids: str) -> Self:
        """The workflow is suspended on exactly these activities' bookmarks."""
        assert self.sub_status == WorkflowSubStatus.SUSPENDED, f"{self.status}/{self.sub_status}"
        assert sorted(b.activity_id for b in self.bookmarks) == sorted(activity_ids), self._waits()
        return self

    def assert_output(self, **expected: Any) -> Self:
        """Each named workflow output has the given value."""
        output = self.output if isinstance(self.output, Mapping) else {}
        for name, value in expected.items():
            assert output.get(name) == value, f"output {name!r} is {output.get(name)!r}"
        return self

    def assert_journal(self, *records: str) -> Self:
        """These ``"activityId:Event"`` records appear in the journal, in this order."""
        seen = [f"{e.activity_id}:{e.event_name}" for e in self.journal]
        position = 0
        for record in records:
            try:
                position = seen.index(record, position) + 1
            except ValueError:
                raise AssertionError(
                    f"{record!r} is not in the journal after {position}: {seen}"
                ) from None
        return self

    def _waits(self) -> str:
        waits = [f"{b.activity_id} ({b.name})" for b in self.bookmarks]
        return f"waiting on: {', '.join(waits) or 'nothing'}"


def load_definition(path: str | Path) -> WorkflowDefinition:
    """A workflow file parsed and validated as the broker loads it."""
    source = Path(path)
    return parse_workflow(json.loads(source.read_text(encoding="utf-8-sig")), file=source.name)


def _endpoint_routes(inputs: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(METHOD, lower-cased path) pairs an HttpEndpoint serves, from its literal inputs."""
    path = _literal(inputs.get("path"))
    methods = _literal(inputs.get("supportedMethods"))
    methods = [methods] if isinstance(methods, str) else methods or ["GET"]
    if not isinstance(path, str) or not isinstance(methods, list):
        return set()
    route = path.strip("/").lower()
    return {(str(method).upper(), route) for method in methods}


def _literal(value: Any) -> Any:
    """An input's value when it is written in the file (Literal, Object, Json), else None."""
    expression = getattr(value, "expression", None)
    if not isinstance(expression, Mapping):
        return None
    kind, found = expression.get("type"), expression.get("value")
    if kind in ("Object", "Json") and isinstance(found, str):
        return json.loads(found)
    return found if kind in ("Literal", "Object", "Json") else None
