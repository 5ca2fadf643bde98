"""Engine test helpers: the fixture workflows, a fixed clock, fake HTTP and mail."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from broker.engine.api import Engine, EngineServices
from broker.engine.model.definition import WorkflowDefinition
from broker.engine.model.lookup import DefinitionIndex
from broker.engine.parser import parse_workflow
from broker.engine.run.ports import EmailMessage, HttpRequest, HttpResponse

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "workflows"
NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def load(name: str) -> WorkflowDefinition:
    path = FIXTURES / f"{name}.json"
    return parse_workflow(json.loads(path.read_text()), file=path.name)


class FakeHttp:
    def __init__(self) -> None:
        self.requests: list[HttpRequest] = []
        self.failures: list[Exception] = []
        self.status = 200

    def send(self, request: HttpRequest) -> HttpResponse:
        self.requests.append(request)
        if self.failures:
            raise self.failures.pop(0)
        return HttpResponse(
            self.status, {"Content-Type": "application/json"}, b'{"ok":true}', {"ok": True}
        )


class FakeMailer:
    def __init__(self) -> None:
        self.sent: list[EmailMessage] = []

    def send(self, message: EmailMessage) -> None:
        self.sent.append(message)


@dataclasses.dataclass
class Harness:
    engine: Engine
    index: DefinitionIndex
    http: FakeHttp
    mailer: FakeMailer

    def start(self, name: str, **kwargs: Any) -> Any:
        return self.engine.start(
            self.index.by_definition_id(name) or load(name),
            instance_id=kwargs.pop("instance_id", f"{name}-1"),
            **kwargs,
        )


@pytest.fixture
def harness() -> Harness:
    index = DefinitionIndex(load(path.stem) for path in sorted(FIXTURES.glob("*.json")))
    http, mailer = FakeHttp(), FakeMailer()
    services = EngineServices(http=http, mailer=mailer, clock=lambda: NOW)
    return Harness(Engine(index, services), index, http, mailer)
