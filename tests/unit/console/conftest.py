"""Fixtures of the in-process console tests: a migrated SQLite database, a key per role, a user,
a small stand-in for Studio's package (so these tests need neither npm nor the real files), the
console app and a request whose workflow ran part of the shipped invoice example."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from broker.console import assets
from broker.console.app import create_app
from broker.registry import WorkflowRegistry
from broker.settings import Settings
from broker.store import credentials, db
from broker.store.models import ActivityExecution, DeadLetter, Request, WorkflowInstance

PASSWORD = "correct horse battery staple"


class RecordingPublisher:
    """Remembers what the console asked to publish after a commit."""

    def __init__(self) -> None:
        self.published: list[str] = []

    def publish(self, outbox_ids: list[str]) -> None:
        self.published.extend(outbox_ids)


@dataclasses.dataclass(frozen=True)
class Keys:
    viewer: str
    designer: str
    operator: str

    def header(self, role: str) -> dict[str, str]:
        return {"Authorization": f"ApiKey {getattr(self, role)}"}


def fake_studio(folder: Path) -> None:
    """A package folder with the shapes the console serves: precompressed twins, a fingerprint."""
    framework = folder / "_framework"
    framework.mkdir(parents=True)
    (framework / "dotnet.runtime.v06hirbjsv.js").write_text("// runtime")
    (framework / "dotnet.runtime.v06hirbjsv.js.br").write_bytes(b"br-bytes")
    (framework / "dotnet.runtime.v06hirbjsv.js.gz").write_bytes(b"gz-bytes")
    (framework / "Elsa.Api.Client.mbze71icf3.wasm").write_bytes(b"\0asm-plain")
    (framework / "Elsa.Api.Client.mbze71icf3.wasm.br").write_bytes(b"\0asm-br")
    (framework / "blazor.webassembly.js").write_text("// boot")
    (framework / "icudt.oh1zvcfom8.dat").write_bytes(b"icu")
    (folder / "_content" / "MudBlazor").mkdir(parents=True)
    (folder / "_content" / "MudBlazor" / "MudBlazor.min.css").write_text("body{}")
    (folder / assets.MARKER).write_text(assets.STUDIO.integrity + "\n")


@pytest.fixture
def console_settings(settings: Settings, tmp_path: Path) -> Settings:
    installed = settings.replace(console_assets_dir=str(tmp_path / "assets"))
    fake_studio(assets.folder(installed, assets.STUDIO))
    mermaid = assets.folder(installed, assets.MERMAID)
    (mermaid / "dist").mkdir(parents=True)
    (mermaid / "dist" / "mermaid.min.js").write_text("// mermaid")
    (mermaid / assets.MARKER).write_text(assets.MERMAID.integrity + "\n")
    return installed


@pytest.fixture
def session_factory(console_settings: Settings) -> Iterator[sessionmaker[Session]]:
    db.upgrade(console_settings.database_url)
    yield db.make_session_factory(db.make_engine(console_settings.database_url))
    db.dispose_engines()


@pytest.fixture
def keys(session_factory: sessionmaker[Session]) -> Keys:
    with db.transaction(session_factory) as session:
        made = {role: credentials.create_key(session, role, role) for role in credentials.ROLES}
        credentials.add_user(session, "alice", "designer", PASSWORD)
    return Keys(**made)


@pytest.fixture
def registry(
    console_settings: Settings, session_factory: sessionmaker[Session]
) -> WorkflowRegistry:
    found = WorkflowRegistry(console_settings, session_factory)
    found.load()
    return found


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


@pytest.fixture
def console_app(
    console_settings: Settings,
    session_factory: sessionmaker[Session],
    registry: WorkflowRegistry,
    publisher: RecordingPublisher,
    keys: Keys,
) -> Flask:
    return create_app(
        console_settings, session_factory=session_factory, registry=registry, publisher=publisher
    )


@pytest.fixture
def client(console_app: Flask) -> FlaskClient:
    return console_app.test_client()


#: activities of invoice-process.json that ran for a big invoice waiting on approval
WALKED = ("receive", "small-enough", "ask-ap", "wait-approval")


@pytest.fixture
def invoice_request(session_factory: sessionmaker[Session], registry: WorkflowRegistry) -> str:
    """A request of the shipped InvoiceProcess, faulted at the approval wait, with a dead letter."""
    published = registry.for_request_type("InvoiceProcess")
    assert published is not None
    with session_factory.begin() as session:
        session.add(
            Request(
                id="req-1",
                client_id="ClientA",
                client_key="clienta",
                request_type="InvoiceProcess",
                request_type_key="invoiceprocess",
                keys={"InvoiceNumber": "INV-7", "VendorCode": "V-1"},
                status="Faulted",
                error_detail="approval service down",
                definition_id=published.definition_id,
                definition_version=published.version,
                definition_version_id=published.version_id,
                instance_id="inst-1",
            )
        )
        session.add(
            WorkflowInstance(
                id="inst-1",
                definition_id=published.definition_id,
                definition_version_id=published.version_id,
                version=published.version,
                request_id="req-1",
                status="Finished",
                sub_status="Faulted",
                fault={"message": "approval service down", "activityId": "wait-approval"},
            )
        )
        for sequence, activity in enumerate(WALKED, start=1):
            session.add(
                ActivityExecution(
                    instance_id="inst-1",
                    sequence=sequence,
                    activity_id=activity,
                    activity_type="Elsa.Activity",
                    activity_name=activity,
                    event_name="Completed",
                )
            )
        session.add(
            DeadLetter(
                id="dl-1",
                kind="request",
                reason="Exhausted",
                request_id="req-1",
                instance_id="inst-1",
                error="approval service down",
                data={"input": "secret"},
            )
        )
    return "req-1"
