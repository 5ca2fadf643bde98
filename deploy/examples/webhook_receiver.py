#!/usr/bin/env python3
"""Receive the broker's webhooks and verify their signature, with nothing but the standard library.

    python deploy/examples/webhook_receiver.py --port 8090 --secret whsec_...

The broker signs each delivery as Standard Webhooks describes: ``webhook-signature`` holds one or
more ``v1,<base64>`` values (two while a secret is being rotated), each the HMAC-SHA256, keyed
with the base64-decoded part of the secret after ``whsec_``, of ``{webhook-id}.{webhook-timestamp}.{body}``.
``verify`` below is the whole check; copy it into your receiver. It also refuses a timestamp more
than five minutes away from now (a replayed old delivery). ``webhook-id`` stays the same on every
retry of one event: use it to ignore duplicates, as this receiver does.

Answers 204 for a valid delivery (the broker stops retrying), 400 for one that fails the check.
Prints each verified event as a JSON line. Stop with Ctrl-C.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import sys
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOLERANCE = 300  # seconds a delivery's timestamp may be away from now


class InvalidSignature(Exception):
    """The delivery was not signed with our secret, was changed, or is too old."""


def verify(
    secret: str, headers: Mapping[str, str], body: bytes, *, now: float | None = None
) -> dict[str, Any]:
    """The event of a delivery whose signature checks out; ``InvalidSignature`` otherwise."""
    lowered = {k.lower(): v for k, v in headers.items()}
    msg_id = lowered.get("webhook-id", "")
    stamp = lowered.get("webhook-timestamp", "")
    signatures = lowered.get("webhook-signature", "")
    if not (msg_id and stamp.isdigit() and signatures):
        raise InvalidSignature("missing webhook-id, webhook-timestamp or webhook-signature")
    if abs((time.time() if now is None else now) - int(stamp)) > TOLERANCE:
        raise InvalidSignature("timestamp too far from now")
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{stamp}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            event: dict[str, Any] = json.loads(body)
            return event
    raise InvalidSignature("no matching signature")


def make_handler(secret: str) -> type[BaseHTTPRequestHandler]:
    seen: set[str] = set()

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the http.server naming)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                event = verify(secret, dict(self.headers), body)
            except InvalidSignature as exc:
                self.send_response(400)
                self.end_headers()
                print(f"refused: {exc}", file=sys.stderr, flush=True)
                return
            msg_id = self.headers["webhook-id"]
            if msg_id not in seen:  # a retry of an event already handled is acknowledged only
                seen.add(msg_id)
                print(json.dumps({"webhookId": msg_id, **event}), flush=True)
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    return Receiver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--secret", required=True, help="the endpoint's whsec_... secret")
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(args.secret))
    print(f"listening on http://{args.host}:{server.server_port}/", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
