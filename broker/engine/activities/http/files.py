"""Files over HTTP: DownloadHttpFile fetches one into the broker's file storage, and
WriteFileHttpResponse answers the pending HTTP request with one (or a zip of several)
(docs/design.md, "File storage")."""

from __future__ import annotations

import base64
import binascii
import email.message
import hashlib
import io
import mimetypes
import re
import zipfile
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

from broker.engine.activities.base import Behaviour, activity
from broker.engine.activities.http.endpoint import answering
from broker.engine.activities.http.outbound import (
    FAILURE_OUTCOMES,
    REQUEST_INPUTS,
    build_request,
    connected,
    flow_outcomes,
)
from broker.engine.model.specs import ActivitySpec, InputSpec, OutputSpec
from broker.engine.model.values import as_bool, as_text
from broker.engine.run.activity_context import ActivityContext
from broker.engine.run.ports import FileStore, HttpRequest, StoredFile
from broker.errors import RetryLater, WorkflowFault

#: response headers .NET keeps on the content (``HttpContent.Headers``), not on the response
CONTENT_HEADERS = frozenset({"allow", "expires", "last-modified"})
#: file name -> media type from Python's own table, not the host's mime.types (the same everywhere)
_TYPES = mimetypes.MimeTypes(filenames=())
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_ETAG = re.compile(r'^"[^"\x00-\x1f]*"$')


def file_id(ax: ActivityContext, kind: str) -> str:
    """The id of the file this activity instance stores: the same on a redone step, so a file
    is stored once."""
    digest = hashlib.sha256(f"{ax.instance_id}:{ax.id}".encode()).hexdigest()[:40]
    return f"{kind}-{digest}"


def storage(ax: ActivityContext) -> FileStore:
    store = ax.services.files
    if store is None:
        raise WorkflowFault("no file storage is configured", activity_id=ax.node.id)
    return store


def last_segment(url: str) -> str:
    """The last segment of the URL's path as .NET's ``Uri.Segments`` gives it (``/`` alone
    for the root, a trailing slash kept)."""
    path = urlsplit(url).path or "/"
    segments = re.findall(r"[^/]*/|[^/]+$", path)
    return segments[-1] if segments else "/"


def disposition_filename(value: str | None) -> str | None:
    """The ``filename`` of a Content-Disposition header (quoted or RFC 5987), or None."""
    if not value:
        return None
    message = email.message.Message()
    message["content-disposition"] = value
    found = message.get_filename()
    return str(found) if found else None


def media_type(value: str | None) -> str | None:
    return value.split(";", 1)[0].strip() or None if value else None


# DownloadHttpFile ---------------------------------------------------------------------------------


@activity(
    "Elsa.DownloadHttpFile",
    ActivitySpec(
        "HTTP",
        "Downloads a file from a given URL.",
        inputs=(
            InputSpec("Url", "String", "The URL to download the file from."),
            InputSpec(
                "Method",
                "String",
                "The HTTP method to use when sending the request.",
                options=("GET", "POST", "PUT"),
                default="GET",
            ),
            InputSpec(
                "ExpectedStatusCodes",
                "Int32[]",
                "A list of expected status codes to handle.",
                ui_hint="multitext",
                default=[200],
            ),
            InputSpec(
                "Content",
                "Object",
                "The content to send with the request. Can be a string, an object, a byte array "
                "or a stream.",
            ),
            InputSpec(
                "RequestContentType",
                "String",
                "The content type to use when sending the request.",
            ),
            *(i for i in REQUEST_INPUTS if i.name in ("Authorization", "RequestHeaders")),
            *(i for i in REQUEST_INPUTS if i.name == "DisableAuthorizationHeaderValidation"),
        ),
        outputs=(
            OutputSpec("Result", "HttpFile", "The downloaded file (a stored file reference)."),
            OutputSpec("Response", "Object", "The HTTP response."),
            OutputSpec("StatusCode", "Int32", "The HTTP response status code"),
            OutputSpec(
                "ResponseContentStream",
                "Object",
                "The downloaded content stream, if any.",
            ),
            OutputSpec(
                "ResponseContentBytes",
                "Byte[]",
                "The downloaded content bytes, if any.",
            ),
            OutputSpec("ResponseHeaders", "Object", "The response headers that were received."),
            OutputSpec(
                "ResponseContentHeaders",
                "Object",
                "The response content headers that were received.",
            ),
        ),
        outcomes=("Unmatched status code", "Failed to connect", "Timeout", "Done"),
        kind="Task",
        display_name="Download File",
    ),
)
class DownloadHttpFile(Behaviour):
    """Downloads through the outbound guard, up to the file cap (``BROKER_FILE_MAX_BYTES``), into
    the broker's file storage; its ``Result`` is the stored file's reference (Elsa's HttpFile),
    which WriteFileHttpResponse serves. Leaves as FlowSendHttpRequest does."""

    def execute(self, ax: ActivityContext) -> None:
        client = ax.services.http
        if client is None:
            raise WorkflowFault("no HTTP client is configured", activity_id=ax.node.id)
        store = storage(ax)
        request = build_request(ax, kind="requestContentType")
        # No Idempotency-Key: a download is not recorded as an effect (its body may be large);
        # a redone step downloads again and stores under the same file id.
        request = HttpRequest(
            method=request.method,
            url=request.url,
            headers=request.headers,
            body=request.body,
            max_response_bytes=store.max_bytes,
        )
        try:
            response = client.send(request)
        except RetryLater as exc:
            outcome = FAILURE_OUTCOMES.get(exc.reason or "")
            if outcome is None or not connected(ax, outcome):
                raise
            ax.set_output("error", exc.message)
            ax.complete(outcome)
            return
        headers = dict(response.headers)
        file: StoredFile | None = None
        if response.body:  # Elsa's HasContent: a body longer than zero
            content_type = (
                media_type(_header(headers, "Content-Type")) or "application/octet-stream"
            )
            filename = disposition_filename(_header(headers, "Content-Disposition"))
            file = store.put(
                file_id(ax, "download"),
                response.body,
                filename=filename or last_segment(request.url) or "file.dat",
                content_type=content_type,
                etag=_header(headers, "ETag"),
            )
        reference = file.to_json() if file is not None else None
        ax.set_output("result", reference)
        ax.set_output("responseContentStream", reference)
        ax.set_output("statusCode", response.status_code)
        ax.set_output("response", {"statusCode": response.status_code, "headers": headers})
        ax.set_output(
            "responseHeaders",
            {k: v for k, v in headers.items() if not _content_header(k)},
        )
        ax.set_output(
            "responseContentHeaders",
            {k: v for k, v in headers.items() if _content_header(k)},
        )
        if "responseContentBytes" in ax.node.outputs and file is not None:  # only when bound
            ax.set_output("responseContentBytes", base64.b64encode(response.body).decode("ascii"))
        ax.complete(*flow_outcomes(ax, response.status_code))


def _content_header(name: str) -> bool:
    lowered = name.lower()
    return lowered.startswith("content-") or lowered in CONTENT_HEADERS


def _header(headers: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    return next((str(v) for k, v in headers.items() if k.lower() == wanted), None)


# WriteFileHttpResponse ----------------------------------------------------------------------------


@activity(
    "Elsa.WriteFileHttpResponse",
    ActivitySpec(
        "HTTP",
        "Send one ore more files (zipped) to the HTTP response.",
        inputs=(
            InputSpec(
                "ContentType",
                "String",
                "The content type of the file to serve. Leave empty to let the system determine "
                "the content type.",
            ),
            InputSpec(
                "Filename",
                "String",
                "The name of the file to serve. Leave empty to let the system determine the file "
                "name.",
            ),
            InputSpec(
                "EntityTag",
                "String",
                "The Entity Tag of the file to serve. Leave empty to let the system determine the "
                "Entity Tag.",
            ),
            InputSpec(
                "Content",
                "Object",
                "The file content to serve. Supports various types, such as byte array, stream, "
                "string, Uri, Downloadable and a (mixed) array of the aforementioned types.",
            ),
            InputSpec(
                "EnableResumableDownloads",
                "Boolean",
                "Whether to enable resumable downloads. When enabled, the client can resume a "
                "download if the connection is lost.",
            ),
            InputSpec(
                "DownloadCorrelationId",
                "String",
                "The correlation ID of the download used to resume a download. If left empty, "
                "the x-download-id header will be used.",
            ),
        ),
        display_name="HTTP File Response",
    ),
    outbound=("Done",),
)
class WriteFileHttpResponse(Behaviour):
    """Answers the pending HTTP request with a file kept in the broker's file storage: text,
    bytes (a ``Byte[]`` input holds base64), a stored file reference, a URL (downloaded through
    the outbound guard), or a list of them (zipped). No content answers ``204``."""

    def execute(self, ax: ActivityContext) -> None:
        request = answering(ax)
        store = storage(ax)
        content = ax.get("content")
        etag = as_text(ax.get("entityTag")).strip() or None
        if etag is not None and not _ETAG.match(etag):
            # As .NET's EntityTagHeaderValue: a strong, quoted tag or nothing.
            raise WorkflowFault(
                f"The format of value '{etag}' is invalid.",
                fault_code="FormatException",
                activity_id=ax.node.id,
            )
        response: dict[str, Any] = {
            "content": None,
            "requestId": request.get("id"),
            "headers": {},
        }
        if content is None:
            response.update(statusCode=204, contentType=None)
            ax.state["httpResponse"] = response
            ax.complete()
            return
        if isinstance(content, list):
            data = zip_of([_downloadable(ax, item) for item in content])
            own: Downloadable = Downloadable(data, "download.zip", "application/zip", None)
            if not etag:
                digest = hashlib.md5(data, usedforsecurity=False).digest()  # Elsa's zip ETag
                etag = '"' + base64.b64encode(digest).decode() + '"'
        else:
            own = _downloadable(ax, content, raw_type=self._raw_type(ax))
        filename = as_text(ax.get("filename")).strip() or own.filename or "file.bin"
        content_type = (
            as_text(ax.get("contentType")).strip()
            or own.content_type
            or _TYPES.guess_type(filename)[0]
            or "application/octet-stream"
        )
        etag = etag or own.etag
        stored = store.put(
            file_id(ax, "response"),
            own.data,
            filename=filename,
            content_type=content_type,
            etag=etag,
        )
        headers = {"Content-Disposition": content_disposition(filename)}
        if as_bool(ax.get("enableResumableDownloads", False)):
            headers["Accept-Ranges"] = "bytes"
            if etag:
                headers["ETag"] = etag
        response.update(
            statusCode=200,
            contentType=content_type,
            file=stored.to_json(),
            headers=headers,
        )
        ax.state["httpResponse"] = response
        ax.complete()

    @staticmethod
    def _raw_type(ax: ActivityContext) -> str | None:
        spec = ax.node.inputs.get("content")
        return spec.type_name if spec is not None else None


class Downloadable:
    """One file to send (Elsa's ``Downloadable``): bytes and what is known about them."""

    __slots__ = ("content_type", "data", "etag", "filename")

    def __init__(
        self,
        data: bytes,
        filename: str | None,
        content_type: str | None,
        etag: str | None,
    ) -> None:
        self.data, self.filename, self.content_type, self.etag = (
            data,
            filename,
            content_type,
            etag,
        )


def _downloadable(ax: ActivityContext, item: Any, *, raw_type: str | None = None) -> Downloadable:
    """What one content value serves, as Elsa's downloadable content handlers read it."""
    stored = StoredFile.from_json(item)
    if stored is not None:
        found, data = storage(ax).read(stored.file_id)
        return Downloadable(data, found.filename, found.content_type, found.etag)
    if isinstance(item, str):
        if raw_type is not None and raw_type.lower().removeprefix("system.") == "byte[]":
            try:
                return Downloadable(base64.b64decode(item, validate=True), "file.bin", None, None)
            except binascii.Error as exc:
                raise WorkflowFault(
                    f"activity {ax.node.id!r}: the Byte[] content is not base64",
                    activity_id=ax.node.id,
                ) from exc
        if item.lower().startswith(("http://", "https://")):
            return _download(ax, item)
        return Downloadable(item.encode("utf-8"), "file.txt", None, None)
    if isinstance(item, Mapping) and isinstance(item.get("content"), str):  # a Downloadable
        return Downloadable(
            item["content"].encode("utf-8"),
            _text_or_none(item.get("filename")),
            _text_or_none(item.get("contentType")),
            _text_or_none(item.get("eTag")),
        )
    if isinstance(item, bytes):
        return Downloadable(item, "file.bin", None, None)
    raise WorkflowFault(
        f"activity {ax.node.id!r}: content of type {type(item).__name__} is not a file (text, "
        "base64 bytes, a stored file, a URL or a list of them)",
        activity_id=ax.node.id,
    )


def _download(ax: ActivityContext, url: str) -> Downloadable:
    """A URL's file, fetched through the outbound guard (Elsa's URL downloadable)."""
    client = ax.services.http
    if client is None:
        raise WorkflowFault("no HTTP client is configured", activity_id=ax.node.id)
    response = client.send(HttpRequest("GET", url, max_response_bytes=storage(ax).max_bytes))
    if not 200 <= response.status_code < 300:
        raise WorkflowFault(
            f"activity {ax.node.id!r}: downloading the file answered {response.status_code}",
            activity_id=ax.node.id,
        )
    headers = dict(response.headers)
    filename = disposition_filename(_header(headers, "Content-Disposition")) or last_segment(url)
    content_type = media_type(_header(headers, "Content-Type")) or _TYPES.guess_type(filename)[0]
    return Downloadable(response.body, filename, content_type, _header(headers, "ETag"))


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def zip_of(files: list[Downloadable]) -> bytes:
    """One zip archive of ``files``, each under its file name (``file-N.bin`` without one; a
    name taken already gets the file's index)."""
    buffer = io.BytesIO()
    taken: set[str] = set()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for index, file in enumerate(files):
            name = file.filename or f"file-{index}.bin"
            if name in taken:  # two texts are both file.txt: the second is file-1.txt
                stem, dot, suffix = name.rpartition(".")
                name = f"{stem}-{index}.{suffix}" if dot else f"{name}-{index}"
            taken.add(name)
            archive.writestr(name, file.data)
    return buffer.getvalue()


def content_disposition(filename: str) -> str:
    """``attachment; filename=...; filename*=UTF-8''...`` as ASP.NET's file results write it."""
    if _TOKEN.match(filename):
        plain = filename
    else:
        ascii_name = filename.encode("ascii", "replace").decode().replace("\\", "\\\\")
        plain = '"' + ascii_name.replace('"', '\\"') + '"'
    return f"attachment; filename={plain}; filename*=UTF-8''{quote(filename, safe='')}"
