"""The authors' kit's harness: a workflow run in-process, stepped by events, timers and resumes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from broker.engine.api import Engine, EngineServices
from broker.engine.model.definition import WorkflowDefinition
from broker.engine.model.lookup import DefinitionIndex
from broker.engine.model.resilience import HttpStrategy
from broker.engine.run.ports import EmailMessage, HttpRequest
from broker.engine.run.results import (
    Bookmark,
    ChildInstance,
    DispatchWorkflow,
    JournalEntry,
    Retry,
    RunResult,
    RunTask,
)
from broker.engine.testing.assertions import RunAssertions
from broker.engine.testing.fakes import (
    HttpAnswer,
    HttpTable,
    MailOutbox,
    MemoryFiles,
    check_fakes,
)
from broker.engine.testing.loading import endpoint_routes, load_definition
from broker.names import EVENT, HTTP_ENDPOINT, WEBHOOK_EVENT

EVENT_BOOKMARK = EVENT
#: the start of every clock in the harness, unless a test gives its own
DEFAULT_NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class WorkflowTest:
    """One workflow under test, with the definitions it uses (children, composite activities; the
    workflow may be among them, e.g. every file of a folder, indexed in the order given) and the
    tables that stand in for the outside world: ``http`` (a table's answers, or the table itself),
    ``tasks``, the clock, which stays at ``now`` until timers fire, and ``standard_in``, the
    lines ReadLine reads. ``flowchart_mode`` (``CounterBased`` or ``TokenBased``) holds for every
    instance, over what the files say; ``strategies`` are the resilience strategies an HTTP
    activity may name (by id), ``files`` the in-memory file storage (``MemoryFiles``) the file
    activities use, and ``activities`` stand-ins for the team's Python activities by type name
    (the others run for real; task-mode ones in-process, in the step)."""

    def __init__(
        self,
        workflow: WorkflowDefinition,
        *,
        uses: Iterable[WorkflowDefinition] = (),
        http: HttpTable | Mapping[str, HttpAnswer | int | Any] | None = None,
        tasks: Mapping[str, Callable[[Any], Any]] | None = None,
        now: dt.datetime = DEFAULT_NOW,
        flowchart_mode: str | None = None,
        standard_in: Iterable[str] = (),
        strategies: Iterable[HttpStrategy] = (),
        activities: Mapping[str, Callable[..., Any]] | None = None,
    ) -> None:
        self.workflow = workflow
        used = list(uses)
        if not any(definition is workflow for definition in used):
            used.append(workflow)
        self.definitions = DefinitionIndex(used)
        self.http = http if isinstance(http, HttpTable) else HttpTable(http)
        self.mail = MailOutbox()
        self.files = MemoryFiles()
        self.tasks = dict(tasks or {})
        self.now = now
        self.flowchart_mode = flowchart_mode
        #: the lines ReadLine reads, in order (then None, the end of the input)
        self.standard_in = list(standard_in)
        check_fakes(activities or {})
        services = EngineServices(
            http=self.http,
            mailer=self.mail,
            clock=lambda: self.now,
            write_line=None,
            read_line=lambda: self.standard_in.pop(0) if self.standard_in else None,
            files=self.files,
            strategies={strategy.id: strategy for strategy in strategies},
            activities=dict(activities or {}),
            inline_tasks=True,
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
        standard_in: Iterable[str] = (),
        strategies: Iterable[HttpStrategy] = (),
        activities: Mapping[str, Callable[..., Any]] | None = None,
    ) -> WorkflowTest:
        """The workflow in ``path``, validated as the broker loads it, and the files it uses."""
        return cls(
            load_definition(path),
            uses=[load_definition(other) for other in uses],
            http=http,
            tasks=tasks,
            now=now,
            flowchart_mode=flowchart_mode,
            standard_in=standard_in,
            strategies=strategies,
            activities=activities,
        )

    def submit(
        self,
        keys: Mapping[str, str] | None = None,
        payload: Any = None,
        *,
        request_id: str = "request-1",
    ) -> WorkflowRun:
        """Start the workflow as a request does (input ``{keys, payload}``, correlation id the
        request id, the submission the HTTP request it answers) and run it until it finishes or
        only waits remain."""
        return self._start(
            f"{request_id}-instance",
            input={"keys": dict(keys or {}), "payload": payload or {}},
            correlation_id=request_id,
            http_context={"id": request_id, "source": "request"},
        )

    def start(
        self,
        input: Mapping[str, Any] | None = None,
        *,
        correlation_id: str | None = None,
        instance_id: str = "instance-1",
        http_request: bool = False,
    ) -> WorkflowRun:
        """Start the workflow with ``input`` and run it until it finishes or only waits remain;
        with ``http_request`` it runs inside an HTTP request it may answer (an HttpContext, for
        WriteHttpResponse), else outside any (as a background start)."""
        context = {"id": f"{instance_id}-http", "source": "test"} if http_request else None
        return self._start(
            instance_id, input=input, correlation_id=correlation_id, http_context=context
        )

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
            if node.type == HTTP_ENDPOINT and wanted in endpoint_routes(node.inputs):
                trigger = {
                    "activityId": node.id,
                    "method": method,
                    "path": path,
                    "body": body,
                    "requestId": f"{instance_id}-http",
                }
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
        http_context: Mapping[str, Any] | None = None,
    ) -> WorkflowRun:
        run = WorkflowRun(self, instance_id)
        options = self.options()
        if http_context is not None:
            options["httpContext"] = dict(http_context)
        run.absorb(
            self.engine.start(
                self.workflow,
                instance_id=instance_id,
                input=input,
                correlation_id=correlation_id,
                trigger=trigger,
                options=options,
                write_lines=run.lines,
            )
        )
        return run

    def options(self) -> dict[str, Any]:
        """The engine's start options for every instance of the test (the flowchart mode)."""
        return {"flowchartMode": self.flowchart_mode} if self.flowchart_mode else {}


class WorkflowRun(RunAssertions):
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
        #: the children it dispatched (DispatchWorkflow, BulkDispatchWorkflows)
        self.children: list[WorkflowRun] = []
        #: the children ``ExecuteWorkflow`` ran in-process, as runs of their own
        self.executed: list[WorkflowRun] = []
        #: the parent run waiting for this one to finish, and the bookmark it waits on
        self.parent: WorkflowRun | None = None
        self.parent_bookmark: tuple[str, str] | None = None  # (bookmark id, bookmark name)
        #: every retry a resilience strategy asked for, in order (run at once: no waiting)
        self.strategy_retries: list[Retry] = []

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
        """The instances ``ExecuteWorkflow`` ran in-process, over the whole run, theirs
        included (a dispatched child is in ``children``)."""
        found = [child for result in self.results for child in result.child_instances]
        for run in self.executed:
            found.extend(run.child_instances)
        return found

    @property
    def http_calls(self) -> list[HttpRequest]:
        return self.test.http.calls

    @property
    def mail(self) -> list[EmailMessage]:
        return self.test.mail.messages

    @property
    def retry_pending(self) -> Retry | None:
        """The retry the broker's own policy would schedule (a connection the workflow does not
        handle), or None; ``retry()`` runs it."""
        return self.latest.retry

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

    def call_endpoint(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
        query: Mapping[str, str] | None = None,
    ) -> Self:
        """Resume the HttpEndpoint waiting for ``method`` ``path`` (as ``METHOD
        /workflows/{path}`` does for a waiting instance); the response it writes is
        ``latest.http_response``."""
        wanted = {"path": path.strip().strip("/").lower(), "method": method.strip().lower()}
        waiting = [
            b for b in self.bookmarks if b.name == HTTP_ENDPOINT and dict(b.payload) == wanted
        ]
        assert waiting, f"no HttpEndpoint waits for {method.upper()} {path} ({self._waits()})"
        assert len(waiting) == 1, f"{method.upper()} {path} is ambiguous ({self._waits()})"
        request = {
            "method": method.upper(),
            "path": "/" + wanted["path"],
            "body": body,
            "headers": dict(headers or {}),
            "query": dict(query or {}),
            "requestId": f"{self.instance_id}-http-{len(self.results)}",
        }
        return self.resume(waiting[0].id, request)

    def deliver_webhook(self, event_type: str, payload: Any = None) -> Self:
        """Resume every WebhookEventReceived waiting for ``event_type`` (as ``POST /webhooks``
        does with ``{"eventType": ..., "payload": ...}``)."""
        waiting = [
            b
            for b in self.bookmarks
            if b.name == WEBHOOK_EVENT and b.payload.get("eventType") == event_type
        ]
        assert waiting, f"no bookmark waits for the webhook event {event_type!r} ({self._waits()})"
        event = {
            "eventType": event_type,
            "payload": payload,
            "timestamp": self.test.now.isoformat(),
        }
        for bookmark in waiting:
            self.resume(bookmark.id, event)
        return self

    def retry(self) -> Self:
        """Run again the activity the broker's retry policy would retry (``retry_pending``)."""
        assert self.latest.retry is not None, "no retry is pending"
        self.absorb(self.test.engine.retry(self.latest.state, write_lines=self.lines))
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
                self.latest.state,
                bookmark_id=bookmark_id,
                input=input,
                write_lines=self.lines,
            )
        )
        return self

    def absorb(self, result: RunResult) -> None:
        """Take a step's result, then carry out what it asks of the runtime that the harness can
        do in-process: answer RunTask from the task table, run the children it dispatched, keep
        the children it ran in-process as runs, and wake a parent waiting for this run."""
        self.result = result
        self.results.append(result)
        self.journal.extend(result.journal)
        for child in result.child_instances:
            if child.result is not None:
                self._adopt(child)
        if result.retry is not None and result.retry.strategy is not None:
            # A resilience strategy's retry runs at once: the kit's clock does not wait.
            self.strategy_retries.append(result.retry)
            self.absorb(self.test.engine.retry(result.state, write_lines=self.lines))
            return
        for command in result.commands:
            if isinstance(command, RunTask) and command.task_name in self.test.tasks:
                answer = self.test.tasks[command.task_name](command.payload)
                self.resume(command.bookmark_id, answer)
            elif isinstance(command, DispatchWorkflow):
                self._run_child(command)
        if result.finished and self.parent is not None and self.parent_bookmark is not None:
            bookmark_id, name = self.parent_bookmark
            self.parent_bookmark = None
            self.parent.resume(bookmark_id, self._completion_input(name))

    def _completion_input(self, bookmark_name: str) -> Any:
        """What the parent is resumed with, as the runtime does: the output, or for
        BulkDispatchWorkflows Elsa's child-completed input (id, sub-status, output)."""
        if bookmark_name == "Elsa.BulkDispatchWorkflows":
            return {
                "WorkflowInstanceId": self.instance_id,
                "WorkflowSubStatus": self.sub_status,
                "WorkflowOutput": self.output,
            }
        return self.output

    def _adopt(self, child: ChildInstance) -> None:
        """A child ``ExecuteWorkflow`` ran in-process: a run of its own, which wakes this run
        when it finishes later and this run waits for it."""
        assert child.result is not None
        run = WorkflowRun(self.test, child.id)
        run.lines = self.lines
        if child.parent_bookmark_id is not None:
            run.parent = self
            run.parent_bookmark = (child.parent_bookmark_id, "Elsa.ExecuteWorkflow")
        self.executed.append(run)
        run.absorb(child.result)

    def _run_child(self, command: DispatchWorkflow) -> None:
        definition = self.test.definitions.by_definition_id(command.definition_id)
        assert definition is not None, f"no definition {command.definition_id!r} was given"
        child = WorkflowRun(self.test, command.child_instance_id)
        child.lines = self.lines
        if command.wait_for_completion and command.bookmark_id:
            bookmark = next((b for b in self.bookmarks if b.id == command.bookmark_id), None)
            child.parent = self
            child.parent_bookmark = (
                command.bookmark_id,
                bookmark.name if bookmark is not None else "Elsa.DispatchWorkflow",
            )
        self.children.append(child)
        child.absorb(
            self.test.engine.start(
                definition,
                instance_id=command.child_instance_id,
                input=command.input,
                correlation_id=command.correlation_id,
                parent_id=command.parent_instance_id,
                options={**self.test.options(), "properties": dict(command.properties)},
                write_lines=child.lines,
            )
        )
