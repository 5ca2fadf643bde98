"""Runs a conformance case on the broker itself (``"driver": "broker"``), as elsa-core's component
tests run theirs on a whole server: the case's workflow files published from a folder into a
migrated SQLite database, the ingress (``/workflows/{path}``, ``/events/{name}``) and the console's
Elsa API (``/elsa/api``) called through their Flask test clients, and every outbox row and queued
stimulus run in process, as workers and beat would, before a call returns.

A case's ``steps`` are calls, each with the ``expect`` its response must meet:

- ``{"http": {"method", "path", "query" | "rawQuery", "headers", "body" | "json",
  "contentType", "noContentLength"}}``: a call to the ingress (``path`` under ``/workflows/``, or
  a path of its own when it starts with ``/``);
- ``{"api": {...}}``: the same to the Elsa API (``path`` under ``/elsa/api``), as an operator's
  API key (``"as": name``: another key's; ``"anonymous": true``: none);
- ``{"fireTimers": true}``: every timer and schedule trigger (Timer, Cron, StartAt) fires as
  when due;
- ``{"advanceClock": seconds}``: the console's clock moves ahead (its sessions expire).

``settings: {BROKER_...: value}``: settings of the case's broker. ``requestTypes: [file, ...]``:
workflows served as request types besides those with a trigger (started by ``POST /requests``).
``save: {name: "json:<path>" | "header:<name>"}`` keeps a value of the response; ``${name}`` in a
later step's strings stands for it.

``expect`` keys: ``status`` (the HTTP status), ``body`` (the exact text), ``bodyContains``
(texts), ``contentType`` (the media type), ``headers`` (``{name: value}``), ``json``
(``{dotted.path: value}``; a number in the path is a list index, ``name=X`` (``&`` more) the
list's first item with those values; ``{"$len": n}`` for a length, ``{"$nonEmpty": true}`` for a
list or object with an item, ``{"$absent": true}`` for a missing key), ``zipDefinitionIds``
(``{"contains", "excludes"}``: the definition ids of a zip's JSON files)."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from broker.console.api import simulate_response
from broker.ingress.auth import PEER_CERT
from broker.runtime.bookmarks import schedules
from broker.runtime.bookmarks.queue import fire_due_timers, process_queue
from broker.settings import Settings
from broker.store import credentials, db
from broker.wiring.runtime import Runtime
from broker.wiring.web import create_console_app as create_app
from broker.wiring.web import create_public_app
from tests.conformance.loader import Case, read_json, workflow_files
from tests.support.ingress import make_pki, settings_for, write_config
from tests.support.runtime import drain

DRIVER = "broker"
#: the client every ingress call presents (its rules are written for the case's workflows)
CLIENT = "ClientA"
API = "/elsa/api"
#: how many rounds of running outbox rows and queued stimuli one call may take
SETTLE_ROUNDS = 20
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_]+)\}")
_TRIGGERS = ("Elsa.HttpEndpoint", "Elsa.Http.HttpEndpoint", "Elsa.Event")


class StepError(AssertionError):
    """A step that cannot run as written, or whose response differs from its ``expect``."""


@functools.cache
def _template() -> Path:
    """A migrated SQLite database, made once per process; each case runs on a copy."""
    folder = Path(tempfile.mkdtemp(prefix="conformance-db-"))
    path = folder / "broker.db"
    db.upgrade(f"sqlite:///{path}")
    db.dispose_engines()
    return path


class InlineRuns:
    """The publisher of the apps: after a commit, every pending outbox row runs in process, then
    the bookmark queue (events, resumes), until nothing is left (a worker and beat, inline)."""

    dispatch_lease: float | None = None

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def publish(self, outbox_ids: Any) -> None:
        self.settle()

    def publish_new(self, messages: Any) -> None:
        self.settle()

    def settle(self) -> None:
        for _ in range(SETTLE_ROUNDS):
            ran = drain(self.runtime, limit=200)
            report = process_queue(self.runtime)
            if not ran and not getattr(report, "dispatched", 0) and not self._pending():
                return
        raise StepError(f"the outbox was not quiet after {SETTLE_ROUNDS} rounds")

    def _pending(self) -> bool:
        from sqlalchemy import func, select

        from broker.store.models import OutboxRow, OutboxState

        states = [OutboxState.PENDING.value, OutboxState.DISPATCHED.value]
        with db.transaction(self.runtime.factory, write=False) as session:
            count = session.scalar(
                select(func.count()).select_from(OutboxRow).where(OutboxRow.state.in_(states))
            )
        return bool(count)

    def fire_timers(self) -> None:
        import datetime as dt

        # beat's timer job with its clock far ahead: every timer and schedule trigger is due
        far = dt.datetime.now(dt.UTC) + dt.timedelta(days=3650)
        registry = self.runtime.registry
        with db.transaction(self.runtime.factory) as session:
            fire_due_timers(session, now=far)
            schedules.sync(session, registry, dt.datetime.now(dt.UTC))
            schedules.fire_due(session, registry, far)
        self.settle()


def _request_type(definition_id: str) -> str:
    return "Conformance" + re.sub(r"[^A-Za-z0-9]", "", definition_id)


def _has_trigger(node: Any) -> bool:
    if isinstance(node, Mapping):
        starts = (node.get("customProperties") or {}).get("canStartWorkflow") is True
        if starts and node.get("type") in _TRIGGERS:
            return True
        return any(_has_trigger(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_trigger(v) for v in node)
    return False


def _publish_files(case: Case, folder: Path) -> list[str]:
    """Copy the case's workflow files into ``folder``; a workflow with an HttpEndpoint or Event
    trigger, or one the case names in ``requestTypes``, is served as a request type (the ingress
    starts only those, and a client's events resume only its requests); answers the types."""
    folder.mkdir(parents=True)
    types = []
    named = case.expected.get("requestTypes") or []
    for path in workflow_files(case):
        document = read_json(path)
        properties = document.setdefault("customProperties", {})
        wanted = path.name in named or _has_trigger(document.get("root"))
        if wanted and not properties.get("requestType"):
            properties["requestType"] = _request_type(str(document.get("definitionId")))
        if properties.get("requestType"):
            types.append(str(properties["requestType"]))
        (folder / path.name).write_text(json.dumps(document), encoding="utf-8")
    return types


def _write_rules(path: Path, request_types: list[str]) -> None:
    rules = [
        {"clientId": CLIENT, "requestType": t, "requiredKeys": [], "allowAdditionalKeys": True}
        for t in request_types
    ]
    path.write_text(json.dumps({"requestTypes": rules}), encoding="utf-8")


class BrokerSystem:
    """The broker of one case: its database, runtime, ingress and console, and saved values."""

    def __init__(self, case: Case, root: Path) -> None:
        database = root / "var" / "broker.db"
        database.parent.mkdir(parents=True)
        shutil.copyfile(_template(), database)
        pki = make_pki(root / "pki")
        config = write_config(root / "config", pki)
        workflows = root / "workflows"
        _write_rules(Path(config["BROKER_REQUEST_TYPES_FILE"]), _publish_files(case, workflows))
        config["BROKER_WORKFLOW_PATHS"] = str(workflows)
        overrides = {str(k): str(v) for k, v in (case.expected.get("settings") or {}).items()}
        self.settings: Settings = settings_for(
            root / "var",
            pki,
            config,
            BROKER_HTTP_TRIGGER_WAIT="5",
            BROKER_CONSOLE_SECRET="conformance-" + "x" * 32,
            BROKER_HTTP_ALLOWLIST="127.0.0.1:*",
            **overrides,
        )
        from tests.support.doubles import NoSender

        self.runtime = Runtime(self.settings, sender=NoSender())
        problems = self.runtime.registry.problems
        if problems:
            raise StepError(f"{case.id}: workflow files refused: {problems}")
        self.runs = InlineRuns(self.runtime)
        self.pki = pki
        self.saved: dict[str, Any] = {}
        self.clock_offset = 0.0  # seconds the console's clock is ahead (advanceClock)
        self._keys: dict[str, str] = {}

    @functools.cached_property
    def ingress(self) -> FlaskClient:
        """The ingress's test client, presenting ``CLIENT``'s certificate (built on first use:
        building an app is most of a case's time)."""
        app = create_public_app(
            self.settings,
            session_factory=self.runtime.factory,
            registry=self.runtime.registry,
            publisher=self.runs,
            runtime=self.runtime,
        )
        client = app.test_client()
        client.environ_base[PEER_CERT] = self.pki.der(CLIENT)  # type: ignore[assignment]
        return client

    @functools.cached_property
    def console(self) -> FlaskClient:
        """The console's test client (its simulate-response sessions on the case's clock)."""
        app = create_app(
            self.settings,
            session_factory=self.runtime.factory,
            registry=self.runtime.registry,
            publisher=self.runs,
            runtime=self.runtime,
        )
        app.extensions[simulate_response.EXTENSION] = simulate_response.Sessions(
            capacity=self.settings.simulate_response_sessions,
            ttl=self.settings.simulate_response_session_ttl,
            clock=lambda: time.monotonic() + self.clock_offset,
        )
        return app.test_client()

    def api_headers(self, name: str) -> dict[str, str]:
        """The Authorization header of an operator's API key named ``name`` (made once)."""
        if name not in self._keys:
            with db.transaction(self.runtime.factory) as session:
                self._keys[name] = credentials.create_key(session, name, "operator")
        return {"Authorization": f"ApiKey {self._keys[name]}"}

    # Steps --------------------------------------------------------------------------------------

    def run_step(self, step: Mapping[str, Any], label: str) -> None:
        step = self.substitute(step)
        if step.get("fireTimers"):
            self.runs.fire_timers()
            return
        if "advanceClock" in step:
            self.clock_offset += float(step["advanceClock"])
            return
        if "http" in step:
            response = self.call(self.ingress, step["http"], "/workflows/", {})
        elif "api" in step:
            call = step["api"]
            anonymous = call.get("anonymous") is True
            headers = {} if anonymous else self.api_headers(str(call.get("as", "conformance")))
            response = self.call(self.console, call, API + "/", headers)
        else:
            raise StepError(f"{label}: a step is one of http, api, fireTimers")
        # what the call queued for beat (a stimulus, a timer) runs before the next step
        self.runs.settle()
        check_response(response, step.get("expect") or {}, label)
        for name, source in (step.get("save") or {}).items():
            self.saved[name] = extract(response, str(source), label)

    def call(
        self, client: FlaskClient, call: Mapping[str, Any], base: str, headers: Mapping[str, str]
    ) -> TestResponse:
        path = str(call["path"])
        url = path if path.startswith("/") and base != API + "/" else base + path.lstrip("/")
        if "rawQuery" in call:
            url += "?" + str(call["rawQuery"])
        kwargs: dict[str, Any] = {
            "method": str(call.get("method", "GET")).upper(),
            "headers": {
                **headers,
                **{str(k): str(v) for k, v in (call.get("headers") or {}).items()},
            },
        }
        if "query" in call:
            kwargs["query_string"] = call["query"]
        if "json" in call:
            kwargs["json"] = call["json"]
        elif "body" in call:
            kwargs["data"] = call["body"]
        if "contentType" in call:
            kwargs["content_type"] = call["contentType"]
        if call.get("noContentLength"):
            # a body streamed without a length (chunked), as an HttpContent that cannot compute one
            kwargs["environ_overrides"] = {"CONTENT_LENGTH": "", "wsgi.input_terminated": True}
        return client.open(url, **kwargs)

    def substitute(self, value: Any) -> Any:
        if isinstance(value, str):
            return _PLACEHOLDER.sub(lambda m: str(self.saved[m.group(1)]), value)
        if isinstance(value, Mapping):
            return {k: self.substitute(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.substitute(v) for v in value]
        return value

    def close(self) -> None:
        db.dispose_engines()


@contextlib.contextmanager
def broker_system(case: Case) -> Iterator[BrokerSystem]:
    root = Path(tempfile.mkdtemp(prefix=f"conformance-{case.id[:40]}-"))
    system = BrokerSystem(case, root)
    try:
        yield system
    finally:
        system.close()
        shutil.rmtree(root, ignore_errors=True)


def run_broker_case(case: Case) -> None:
    """Every step of the case, in order, each checked as soon as it answered."""
    steps = case.expected.get("steps")
    if not isinstance(steps, list) or not steps:
        raise StepError(f"{case.id}: a broker case lists its steps")
    with broker_system(case) as system:
        for number, step in enumerate(steps):
            system.run_step(step, f"steps[{number}]")


# Responses --------------------------------------------------------------------------------------

_ABSENT = object()


def json_at(document: Any, path: str) -> Any:
    """The value at a dotted path (a number is a list index, ``key=value`` (``&`` more) the first
    list item with those values); ``_ABSENT`` when there is none."""
    found = document
    for part in path.split(".") if path else ():
        if isinstance(found, list) and "=" in part:
            wanted = [c.partition("=")[::2] for c in part.split("&")]
            matches = [
                i
                for i in found
                if isinstance(i, Mapping) and all(str(i.get(k)) == v for k, v in wanted)
            ]
            if not matches:
                return _ABSENT
            found = matches[0]
        elif isinstance(found, list) and part.lstrip("-").isdigit():
            index = int(part)
            if not -len(found) <= index < len(found):
                return _ABSENT
            found = found[index]
        elif isinstance(found, Mapping) and part in found:
            found = found[part]
        else:
            return _ABSENT
    return found


def extract(response: TestResponse, source: str, label: str) -> Any:
    kind, _, where = source.partition(":")
    if kind == "header":
        found: Any = response.headers.get(where)
    elif kind == "json":
        found = json_at(response.get_json(silent=True), where)
    else:
        raise StepError(f"{label}.save: {source!r} is not json:<path> or header:<name>")
    if found is None or found is _ABSENT:
        raise StepError(f"{label}.save: the response has no {source}: {response.get_data()!r}")
    return found


def check_response(response: TestResponse, expect: Mapping[str, Any], label: str) -> None:
    text = response.get_data().decode("utf-8", errors="replace")
    shown = f"{response.status_code} {text[:400]!r}"
    unknown = sorted(set(expect) - set(_RESPONSE_CHECKS) - {"notes"})
    if unknown:
        raise StepError(f"{label}: unknown expect keys {unknown}")
    for key, value in expect.items():
        if key in _RESPONSE_CHECKS:
            try:
                _RESPONSE_CHECKS[key](response, text, value)
            except AssertionError as exc:
                raise StepError(f"{label}.{key}: {exc} (response {shown})") from None


def _status(response: TestResponse, text: str, value: Any) -> None:
    assert response.status_code == value, f"status {response.status_code}"


def _body(response: TestResponse, text: str, value: Any) -> None:
    assert text == value, f"body {text!r}"


def _body_contains(response: TestResponse, text: str, value: Any) -> None:
    missing = [part for part in value if part not in text]
    assert not missing, f"{missing} missing from the body"


def _content_type(response: TestResponse, text: str, value: Any) -> None:
    assert response.mimetype == value, f"content type {response.content_type!r}"


def _headers(response: TestResponse, text: str, value: Any) -> None:
    for name, wanted in value.items():
        actual = response.headers.get(name)
        assert actual == wanted, f"header {name}: {actual!r}"


def _json(response: TestResponse, text: str, value: Any) -> None:
    document = response.get_json(silent=True)
    assert document is not None, "the body is not JSON"
    for path, wanted in value.items():
        found = json_at(document, path)
        if isinstance(wanted, Mapping) and "$absent" in wanted:
            assert (found is _ABSENT) == bool(wanted["$absent"]), f"{path} is {found!r}"
            continue
        assert found is not _ABSENT, f"no {path} in {json.dumps(document)[:400]}"
        if isinstance(wanted, Mapping) and "$nonEmpty" in wanted:
            assert isinstance(found, list | Mapping), f"{path} is {found!r}"
            assert bool(found) == bool(wanted["$nonEmpty"]), f"{path} is {found!r}"
            continue
        if isinstance(wanted, Mapping) and "$len" in wanted:
            assert isinstance(found, list | Mapping), f"{path} is {found!r}"
            assert len(found) == wanted["$len"], f"{path} has {len(found)} items"
            continue
        assert found == wanted, f"{path} is {found!r}"


def _zip_definition_ids(response: TestResponse, text: str, value: Any) -> None:
    """``{"contains": [...], "excludes": [...]}``: the definition ids of the JSON files of a zip
    response."""
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(response.get_data())) as archive:
        found = [json.loads(archive.read(name)).get("definitionId") for name in archive.namelist()]
    missing = [d for d in value.get("contains", []) if d not in found]
    unwanted = [d for d in value.get("excludes", []) if d in found]
    assert not missing, f"zip holds {found}"
    assert not unwanted, f"zip holds {found}"


_RESPONSE_CHECKS = {
    "status": _status,
    "body": _body,
    "bodyContains": _body_contains,
    "contentType": _content_type,
    "headers": _headers,
    "json": _json,
    "zipDefinitionIds": _zip_definition_ids,
}
