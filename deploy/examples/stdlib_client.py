#!/usr/bin/env python3
"""Submit a request to the broker and poll it, with nothing but the Python standard library.

    python deploy/examples/stdlib_client.py --url https://localhost:5001 \
        --ca var/certs/ca.pem --cert var/certs/DevClient.pem --key var/certs/DevClient.key \
        --type InvoiceProcess --key-value InvoiceNumber=INV-1 --key-value VendorCode=V-9 \
        --payload '{"amount": 250}' --wait 30

TLS 1.2 is pinned (minimum and maximum) to show that older clients get in; drop the two lines
to let the client negotiate TLS 1.3. Prints the final record as JSON; exits 0 when the request
was accepted and read back, 1 on any refusal.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

TERMINAL = {"Completed", "Faulted", "Cancelled"}


def tls_context(ca: str, cert: str, key: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=cert, keyfile=key)
    return context


def call(
    context: ssl.SSLContext,
    method: str,
    url: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(  # noqa: S310 - the URL is the operator's https URL
        url,
        data=data,
        method=method,
        headers={
            "Accept": "application/json",
            **({"Content-Type": "application/json"} if data else {}),
            **(headers or {}),
        },
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:  # noqa: S310
            raw = response.read()
            return response.status, dict(response.headers), json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        raw = error.read()
        return error.code, dict(error.headers), json.loads(raw) if raw else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="base URL of the public listener")
    parser.add_argument("--ca", required=True, help="CA that signed the server certificate")
    parser.add_argument("--cert", required=True, help="client certificate (PEM)")
    parser.add_argument("--key", required=True, help="client private key (PEM)")
    parser.add_argument("--type", required=True, dest="request_type", help="request type")
    parser.add_argument(
        "--key-value",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a request key (repeat)",
    )
    parser.add_argument("--payload", default=None, help="payload as a JSON object")
    parser.add_argument(
        "--wait", type=float, default=10.0, help="seconds to poll for a terminal status"
    )
    args = parser.parse_args(argv)

    context = tls_context(args.ca, args.cert, args.key)
    base = args.url.rstrip("/")
    keys = dict(item.split("=", 1) for item in args.key_value)
    body: dict[str, Any] = {"requestType": args.request_type, "keys": keys}
    if args.payload:
        body["payload"] = json.loads(args.payload)
    # An idempotency key makes a retry after a network error safe: the broker answers the same
    # record instead of creating a second one.
    status, headers, answer = call(
        context, "POST", f"{base}/requests", body, {"Idempotency-Key": str(uuid.uuid4())}
    )
    if status not in (200, 202):
        print(json.dumps({"status": status, "answer": answer}), file=sys.stderr)
        return 1
    location = headers.get("Location") or f"/requests/{answer['correlationId']}"
    deadline = time.monotonic() + args.wait
    delay = 0.2
    while True:
        status, _, record = call(context, "GET", f"{base}{location}")
        if status != 200:
            print(json.dumps({"status": status, "answer": record}), file=sys.stderr)
            return 1
        if record["status"] in TERMINAL or time.monotonic() >= deadline:
            break
        time.sleep(delay)
        delay = min(delay * 2, 2.0)
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
