"""DownloadHttpFile and WriteFileHttpResponse in the authors' kit (in-memory file storage), and
WebhookEventReceived waiting for its event."""

from __future__ import annotations

import base64
import io
import zipfile
from typing import Any

import pytest

from broker.engine.parser import parse_workflow
from broker.engine.run.ports import StoredFile
from broker.engine.testing import HttpAnswer, WorkflowRun, WorkflowTest
from broker.errors import PayloadTooLarge
from tests.support.workflows import activity, flowchart, into, literal, obj, workflow

URL = "http://files.test/reports/annual.pdf"


def download(**inputs: Any) -> dict[str, Any]:
    inputs.setdefault("url", literal(URL))
    node = activity("download", "Elsa.DownloadHttpFile", **inputs)
    node.setdefault("expectedStatusCodes", obj([200]))
    node.setdefault("result", into("File"))
    node.setdefault("statusCode", into("Status"))
    return node


def run_download(answer: HttpAnswer, **inputs: Any) -> tuple[WorkflowTest, WorkflowRun]:
    document = flowchart(
        "download",
        [download(**inputs), activity("ok", "Elsa.WriteLine", text=literal("200"))],
        [("download", "200", "ok")],
        variables=("File", "Status"),
    )
    test = WorkflowTest(parse_workflow(document), http={URL: answer})
    return test, test.start()


def test_a_download_is_stored_and_its_result_names_the_stored_file() -> None:
    answer = HttpAnswer(
        200,
        b"Test file content",
        {
            "Content-Type": "application/pdf",
            "Content-Disposition": 'attachment; filename="document.pdf"',
            "ETag": '"v1"',
            "X-Request-Id": "abc123",
        },
    )
    test, run = run_download(answer)
    # Then the file is in the storage and the variable holds its reference
    reference = run.variables["File"]
    assert test.files.text(reference) == "Test file content"
    stored = StoredFile.from_json(reference)
    assert stored is not None
    assert (stored.filename, stored.content_type, stored.etag, stored.size) == (
        "document.pdf",
        "application/pdf",
        '"v1"',
        17,
    )
    # And the status routes (200 expected) and is an output
    assert run.lines == ["200"]
    assert run.variables["Status"] == 200


@pytest.mark.parametrize(
    ("url", "filename"),
    [
        ("http://files.test/downloads/image.png", "image.png"),
        ("http://files.test/download", "download"),
        ("http://files.test/", "/"),
    ],
)
def test_without_content_disposition_the_file_is_named_after_the_last_url_segment(
    url: str, filename: str
) -> None:
    document = workflow("d", [download(url=literal(url))])
    document["variables"] = [{"id": "File", "name": "File", "typeName": "Object"}]
    test = WorkflowTest(parse_workflow(document), http={url: HttpAnswer(200, b"data")})
    run = test.start()
    assert run.variables["File"]["filename"] == filename


def test_an_empty_answer_stores_nothing() -> None:
    _, run = run_download(HttpAnswer(200))
    assert run.variables["File"] is None


def test_a_download_over_the_file_cap_faults() -> None:
    document = workflow("d", [download()])
    test = WorkflowTest(parse_workflow(document), http={URL: HttpAnswer(200, b"x" * 32)})
    test.files.max_bytes = 16
    with pytest.raises(PayloadTooLarge):
        test.files.put("over", b"x" * 32, filename="f", content_type="text/plain")
    test.start().assert_faulted("exceeds")


def file_response(content: dict[str, Any] | None, **inputs: Any) -> dict[str, Any]:
    node = activity("respond", "Elsa.WriteFileHttpResponse", **inputs)
    if content is not None:
        node["content"] = content
    return node


def answered(*nodes: dict[str, Any], http: dict[str, Any] | None = None) -> tuple[Any, Any]:
    test = WorkflowTest(parse_workflow(workflow("files", list(nodes))), http=http)
    run = test.start(http_request=True)
    run.assert_finished()
    return test, run.latest.http_response


def body_of(test: WorkflowTest, response: dict[str, Any]) -> bytes:
    stored = StoredFile.from_json(response["file"])
    assert stored is not None
    return test.files.read(stored.file_id)[1]


def test_a_downloaded_file_is_served_with_its_name_and_type() -> None:
    answer = HttpAnswer(200, b"%PDF", {"Content-Type": "application/pdf"})
    test, response = answered(
        download(),
        file_response({"typeName": "Object", "expression": {"type": "Variable", "value": "File"}}),
        http={URL: answer},
    )
    assert body_of(test, response) == b"%PDF"
    assert response["contentType"] == "application/pdf"
    assert "filename=annual.pdf" in response["headers"]["Content-Disposition"]


def test_base64_bytes_are_served_under_the_given_name_with_a_type_from_it() -> None:
    content = {
        "typeName": "Byte[]",
        "expression": {"type": "Literal", "value": base64.b64encode(b"Hello World").decode()},
    }
    test, response = answered(file_response(content, filename=literal("document.pdf")))
    assert body_of(test, response) == b"Hello World"
    assert response["contentType"] == "application/pdf"


def test_several_files_are_zipped() -> None:
    content = obj(["File 1 content", "File 2 content"])
    test, response = answered(file_response(content, filename=literal("archive.zip")))
    assert response["contentType"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(body_of(test, response))) as archive:
        assert len(archive.namelist()) == 2


def test_no_content_answers_204() -> None:
    _, response = answered(file_response(None))
    assert response["statusCode"] == 204
    assert "file" not in response


def test_a_weak_entity_tag_faults_as_dotnet_refuses_it() -> None:
    node = file_response(literal("x"), entityTag=literal('W/"weak-etag"'))
    run = WorkflowTest(parse_workflow(workflow("f", [node]))).start(http_request=True)
    run.assert_faulted("""The format of value 'W/"weak-etag"' is invalid""")


def test_a_file_response_needs_a_request_to_answer() -> None:
    run = WorkflowTest(parse_workflow(workflow("f", [file_response(literal("x"))]))).start()
    run.assert_faulted("HTTP context was lost")


# WebhookEventReceived -----------------------------------------------------------------------------


def test_a_webhook_event_resumes_the_activity_waiting_for_its_type() -> None:
    node = activity("hook", "Elsa.WebhookEventReceived", eventType="order.created")
    node["payload"] = into("Order")
    document = workflow("hooked", [node])
    document["variables"] = [{"id": "Order", "name": "Order", "typeName": "Object"}]
    run = WorkflowTest(parse_workflow(document)).start()
    [bookmark] = run.bookmarks
    assert (bookmark.name, dict(bookmark.payload)) == (
        "Elsa.WebhookEventReceived",
        {"eventType": "order.created"},
    )
    run.deliver_webhook("order.created", {"id": 7})
    run.assert_finished()
    assert run.variables["Order"] == {"id": 7}
