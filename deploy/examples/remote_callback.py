"""How a remote executor reports a result to the broker, with the Python standard library only.

The broker POSTs each remotely executed request to ``BROKER_ELSA_DISPATCH_URL`` as
``{"definitionId", "correlationId", "message": {"requestType", "keys", "payload"}, "callbackUrl",
"callbackToken"}``. When the work is done, the executor POSTs ``{"status": "Completed" | "Faulted",
"result": any, "error": str | null}`` to ``callbackUrl``, signed with ``callbackToken`` as Standard
Webhooks prescribes (any Standard Webhooks library signs the same way). A token is good for its
request and for the latest dispatch of it only: when the broker dispatches the same correlation id
again, keep the new token.

    python3 remote_callback.py CALLBACK_URL CALLBACK_TOKEN Completed '{"approved": true}'
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any


def signature_headers(
    token: str, body: bytes, msg_id: str | None = None, timestamp: int | None = None
) -> dict[str, str]:
    """The Standard Webhooks headers of ``body``: HMAC-SHA256 of ``id.timestamp.body`` under the
    token's key (the base64 after ``whsec_``). Resend a message with the same ``msg_id``."""
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    timestamp = int(time.time()) if timestamp is None else timestamp
    key = base64.b64decode(token.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": "v1," + base64.b64encode(mac).decode("ascii"),
    }


def report(
    callback_url: str,
    token: str,
    status: str,
    result: Any = None,
    error: str | None = None,
    timeout: float = 10.0,
) -> int:
    """POST the signed result; answers the HTTP status (204 accepted; 401 refused: bad signature,
    clock more than five minutes off, a replayed webhook-id or a superseded token; 409 the
    request is already finished)."""
    body = json.dumps({"status": status, "result": result, "error": error}).encode()
    headers = {"Content-Type": "application/json", **signature_headers(token, body)}
    request = urllib.request.Request(callback_url, body, headers, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as refused:
        return int(refused.code)


if __name__ == "__main__":
    url, token, status = sys.argv[1:4]
    outcome = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
    sys.exit(0 if report(url, token, status, outcome) == 204 else 1)
