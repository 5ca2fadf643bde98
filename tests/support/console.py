"""Shared by the console tests (in process and in the browser): a stand-in for Studio's package
and a request of the shipped invoice example that ran part of its workflow, then faulted."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from broker.console import assets
from broker.registry.versions import PublishedWorkflow
from broker.settings import Settings
from broker.store.models import (
    ActivityExecution,
    DeadLetter,
    Request,
    RequestEvent,
    WorkflowInstance,
)

#: activities of invoice-process.json that ran for a big invoice waiting on approval
WALKED = ("receive", "small-enough", "ask-ap", "wait-approval")


def fake_assets(settings: Settings) -> None:
    """Package folders with the shapes the console serves: precompressed twins, fingerprints."""
    folder = assets.folder(settings, assets.STUDIO)
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
    mermaid = assets.folder(settings, assets.MERMAID)
    (mermaid / "dist").mkdir(parents=True)
    (mermaid / "dist" / "mermaid.min.js").write_text("// mermaid")
    (mermaid / "dist" / "mermaid.min.js.gz").write_bytes(b"gz")
    (mermaid / assets.MARKER).write_text(assets.MERMAID.integrity + "\n")


def seed_invoice_request(
    factory: sessionmaker[Session], published: PublishedWorkflow, request_id: str = "req-1"
) -> str:
    """A Faulted InvoiceProcess request: its journal, its instance's fault and a dead letter."""
    instance_id = f"inst-{request_id}"
    with factory.begin() as session:
        session.add(
            Request(
                id=request_id,
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
                instance_id=instance_id,
            )
        )
        session.add(
            WorkflowInstance(
                id=instance_id,
                definition_id=published.definition_id,
                definition_version_id=published.version_id,
                version=published.version,
                request_id=request_id,
                status="Finished",
                sub_status="Faulted",
                fault={"message": "approval service down", "activityId": "wait-approval"},
            )
        )
        session.add(
            RequestEvent(
                request_id=request_id,
                event_type="RequestSubmitted",
                source="ingress",
                message="Submitted by ClientA",
            )
        )
        session.add(
            RequestEvent(
                request_id=request_id,
                event_type="RequestFaulted",
                source="worker",
                message="approval service down",
            )
        )
        for sequence, activity in enumerate(WALKED, start=1):
            session.add(
                ActivityExecution(
                    instance_id=instance_id,
                    sequence=sequence,
                    activity_id=activity,
                    activity_type="Elsa.Activity",
                    activity_name=activity,
                    event_name="Completed",
                )
            )
        session.add(
            DeadLetter(
                id=f"dl-{request_id}",
                kind="request",
                reason="Exhausted",
                request_id=request_id,
                instance_id=instance_id,
                error="approval service down",
                data={"input": "secret"},
            )
        )
    return request_id
