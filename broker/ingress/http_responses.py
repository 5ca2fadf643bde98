"""What a workflow's WriteHttpResponse or WriteFileHttpResponse wrote, as the HTTP response of
the call it answers (``/workflows/{path}``): text or JSON, or a stored file with its
Content-Disposition, ETag and byte ranges (docs/design.md, "File storage")."""

from __future__ import annotations

import json
import re
from typing import Any

from flask import Request, Response

from broker.engine.run.ports import StoredFile
from broker.outbound.files import FolderFiles

#: headers the renderer sets itself; a workflow's own value for them is ignored
OWN_HEADERS = frozenset({"content-length", "content-type", "transfer-encoding"})
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def render(files: FolderFiles, response: dict[str, Any], request: Request) -> Response:
    """The Flask response for a written ``httpResponse``."""
    stored = StoredFile.from_json(response.get("file"))
    out = _file(files, stored, response, request) if stored is not None else _content(response)
    for name, value in (response.get("headers") or {}).items():
        if name.lower() not in OWN_HEADERS:
            out.headers[name] = value
    return out


def _content(response: dict[str, Any]) -> Response:
    content = response.get("content")
    content_type = response.get("contentType")
    if isinstance(content, dict | list) or (content_type or "").endswith("json"):
        text = content if isinstance(content, str) else json.dumps(content)
        content_type = content_type or "application/json"
    else:
        text = "" if content is None else str(content)
        content_type = content_type or "text/plain; charset=utf-8"
    status = int(response.get("statusCode") or 200)
    return Response(text, status=status, content_type=content_type)


def _file(
    files: FolderFiles, stored: StoredFile, response: dict[str, Any], request: Request
) -> Response:
    """The stored file, whole or (resumable downloads) the byte range the caller asked for."""
    _, data = files.read(stored.file_id)
    content_type = response.get("contentType") or stored.content_type
    headers = response.get("headers") or {}
    resumable = any(k.lower() == "accept-ranges" for k in headers)
    wanted = request.headers.get("Range", "")
    if resumable and wanted:
        etag = next((v for k, v in headers.items() if k.lower() == "etag"), None)
        if_range = request.headers.get("If-Range")
        if if_range is None or if_range == etag:
            return _range(data, wanted, content_type)
    return Response(data, status=int(response.get("statusCode") or 200), content_type=content_type)


def _range(data: bytes, wanted: str, content_type: str) -> Response:
    """A single byte range (``206``), or ``416`` when it lies outside the file."""
    size = len(data)
    match = _RANGE.match(wanted.strip())
    if match is None or not (match[1] or match[2]):
        return Response(data, status=200, content_type=content_type)  # several ranges: all
    if match[1]:
        start = int(match[1])
        end = min(int(match[2]), size - 1) if match[2] else size - 1
    else:  # the last N bytes
        start, end = max(0, size - int(match[2])), size - 1
    if start >= size or start > end:
        out = Response(b"", status=416, content_type=content_type)
        out.headers["Content-Range"] = f"bytes */{size}"
        return out
    out = Response(data[start : end + 1], status=206, content_type=content_type)
    out.headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    return out
