"""The soak's open-loop load: requests of every kind at a steady rate, whatever the stack does.

Each arrival is handled on a pool thread: a submission (retried with its ``Idempotency-Key``
while the ingress restarts or answers 503), then, a second after acceptance, its event or its
cancellation. A request counts as accepted only when the ingress answered 202 (or 200 for a
repeated key); only accepted requests can be lost.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import http.client
import json
import logging
import ssl
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from tests.soak.workloads import EVENT, TRIGGER_PATH, Kind, kind_of

logger = logging.getLogger(__name__)

#: how long one submission, event or cancellation keeps trying (an ingress restart, a database
#: restart: the ingress answers 503 or refuses the connection meanwhile)
RETRY_FOR = 90.0
FOLLOW_UP_DELAY = 1.0


@dataclasses.dataclass
class Accepted:
    request_id: str
    kind: Kind
    at: float  # seconds after the load started


class Client:
    """mTLS calls as the soak client; a fresh connection per call (the ingress restarts)."""

    def __init__(self, pki: Path, client: str, port: int) -> None:
        self.context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        self.context.load_cert_chain(pki / f"{client}.pem", pki / f"{client}.key")
        self.context.check_hostname = False
        self.port = port

    def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=30, context=self.context)
        try:
            payload = None if body is None else json.dumps(body).encode()
            sent = {"Content-Type": "application/json", **(headers or {})}
            conn.request(method, path, body=payload, headers=sent)
            response = conn.getresponse()
            raw = response.read()
            try:
                return response.status, json.loads(raw) if raw else None
            except ValueError:
                return response.status, raw[:200]
        finally:
            conn.close()

    def retrying(
        self,
        method: str,
        path: str,
        body: Any,
        ok: tuple[int, ...],
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any] | None:
        """Call until the answer is one of ``ok``; None when ``RETRY_FOR`` ran out."""
        deadline = time.monotonic() + RETRY_FOR
        while True:
            try:
                status, answer = self.call(method, path, body, headers)
                if status in ok:
                    return status, answer
                if status < 500 and status not in (408, 429):
                    logger.warning("%s %s answered %s: %s", method, path, status, answer)
                    return None
            except (OSError, http.client.HTTPException):
                pass
            if time.monotonic() > deadline:
                return None
            time.sleep(1.0)


class Load:
    """``rate`` arrivals a second, the kinds in turn (one in ``POISON_EVERY`` poison), until
    ``stop``."""

    def __init__(self, client: Client, rate: float, started: float) -> None:
        self.client = client
        self.rate = rate
        self.started = started
        self.lock = threading.Lock()
        self.accepted: list[Accepted] = []
        self.refused = 0
        self.follow_ups_failed = 0
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=48)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._arrivals, name="soak-load", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Stop arrivals and wait for the calls in progress (each bounded by ``RETRY_FOR``)."""
        self.stopping.set()
        self.thread.join()
        self.pool.shutdown(wait=True)

    def _arrivals(self) -> None:
        n = 0
        next_at = time.monotonic()
        while not self.stopping.is_set():
            kind = kind_of(n)
            self.pool.submit(self._one, kind, n)
            n += 1
            next_at += 1.0 / self.rate
            self.stopping.wait(max(0.0, next_at - time.monotonic()))

    def _one(self, kind: Kind, n: int) -> None:
        try:
            request_id = self._start(kind, n)
        except Exception:
            logger.exception("arrival %d (%s) failed", n, kind.request_type)
            request_id = None
        if request_id is None:
            with self.lock:
                self.refused += 1
            return
        with self.lock:
            self.accepted.append(Accepted(request_id, kind, time.monotonic() - self.started))
        if kind.follow_up is None:
            return
        time.sleep(FOLLOW_UP_DELAY)
        if kind.follow_up == "event":
            done = self.client.retrying(
                "POST", f"/events/{EVENT}", {"correlationId": request_id}, ok=(202,)
            )
        else:
            done = self.client.retrying(
                "POST", f"/requests/{request_id}/cancel", None, ok=(202, 409)
            )
        if done is None:
            with self.lock:
                self.follow_ups_failed += 1

    def _start(self, kind: Kind, n: int) -> str | None:
        if kind.trigger:
            # A trigger call has no idempotency key: retried only while the listener refuses
            # connections (nothing was accepted then).
            deadline = time.monotonic() + RETRY_FOR
            while True:
                try:
                    status, answer = self.client.call(
                        "POST", f"/workflows/{TRIGGER_PATH}", {"n": n}
                    )
                except ConnectionRefusedError:
                    if time.monotonic() > deadline:
                        return None
                    time.sleep(1.0)
                    continue
                except (OSError, http.client.HTTPException):
                    return None
                if status in (200, 201, 202) and isinstance(answer, dict):
                    return str(answer.get("correlationId")) if answer.get("correlationId") else None
                if status == 503 and time.monotonic() < deadline:
                    time.sleep(1.0)
                    continue
                logger.warning("trigger answered %s: %s", status, answer)
                return None
        body = {"requestType": kind.request_type, "keys": {}, "payload": {"n": n}}
        answered = self.client.retrying(
            "POST", "/requests", body, ok=(200, 202), headers={"Idempotency-Key": uuid.uuid4().hex}
        )
        return None if answered is None else str(answered[1]["correlationId"])

    def snapshot(self) -> list[Accepted]:
        with self.lock:
            return list(self.accepted)
