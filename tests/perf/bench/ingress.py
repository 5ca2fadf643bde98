"""Load against the public API: a keep-alive mTLS client, and the threaded driver both sides use.

``Api`` is one persistent HTTPS connection presenting the bench client's certificate (stdlib
``http.client`` over ``ssl``: lighter than ``requests``, so the client steals less of the two cores
from the server it measures). ``burst`` runs a sender on N threads, each with its own connection,
for a number of calls or a number of seconds, and records every call's latency. The ingress
figure is the number of 202s per second from 8 such connections.
"""

from __future__ import annotations

import dataclasses
import http.client
import itertools
import json
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

from broker.errors import BrokerError
from tests.perf.bench.harness import REQUEST_TYPE, Stack
from tests.perf.bench.processes import Deadline
from tests.perf.bench.report import Ingress, Latency

#: how many calls may fail before a burst gives up (a broken stack must not spin for minutes)
MAX_ERRORS = 50


class Api:
    """One keep-alive connection to the public listener as the bench client."""

    def __init__(self, port: int, context: ssl.SSLContext, timeout: float = 30.0) -> None:
        self.port = port
        self.context = context
        self.timeout = timeout
        self.conn = self._connect()

    def _connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.context, timeout=self.timeout
        )

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        for attempt in (1, 2):
            try:
                self.conn.request(method, path, body=payload, headers=headers)
                response = self.conn.getresponse()
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
            except (http.client.RemoteDisconnected, ConnectionError, http.client.BadStatusLine):
                # The server closed an idle keep-alive connection: reconnect once.
                self.conn.close()
                self.conn = self._connect()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def submit(self, n: int) -> str:
        """POST one BenchFiveSteps request; its correlation id (raises unless 202)."""
        body = {"requestType": REQUEST_TYPE, "keys": {}, "payload": {"n": n}}
        status, answer = self.call("POST", "/requests", body)
        if status != 202:
            raise BrokerError(f"submit answered {status}: {answer}", status=status)
        return str(answer["correlationId"])

    def status(self, request_id: str) -> str:
        status, answer = self.call("GET", f"/requests/{request_id}")
        if status != 200:
            raise BrokerError(f"GET /requests/{request_id} answered {status}: {answer}")
        return str(answer["status"])

    def close(self) -> None:
        self.conn.close()


@dataclasses.dataclass(frozen=True)
class Burst:
    """What a burst of calls returned: per-call latencies (seconds), results, errors, wall time."""

    latencies: list[float]
    results: list[Any]
    errors: int
    seconds: float
    first_error: str | None = None


def burst(
    make_sender: Callable[[], tuple[Callable[[int], Any], Callable[[], None]]],
    *,
    threads: int,
    deadline: Deadline,
    count: int | None = None,
    seconds: float | None = None,
) -> Burst:
    """Call a sender from ``threads`` threads until ``count`` calls or ``seconds`` have passed.

    ``make_sender`` runs once per thread and answers (send, close): a thread's own connection.
    """
    if count is None and seconds is None:
        raise ValueError("a burst needs a count or a duration")
    numbers = itertools.count()
    lock = threading.Lock()
    latencies: list[float] = []
    results: list[Any] = []
    errors: list[str] = []
    started = time.perf_counter()

    def work() -> None:
        send, close = make_sender()
        mine: list[float] = []
        found: list[Any] = []
        try:
            while deadline.remaining() > 0 and len(errors) < MAX_ERRORS:
                n = next(numbers)
                if count is not None and n >= count:
                    break
                if seconds is not None and time.perf_counter() - started >= seconds:
                    break
                t0 = time.perf_counter()
                try:
                    result = send(n)
                except Exception as exc:
                    with lock:
                        errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                mine.append(time.perf_counter() - t0)
                found.append(result)
        finally:
            close()
            with lock:
                latencies.extend(mine)
                results.extend(found)

    workers = [threading.Thread(target=work, name=f"bench-{i}") for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    deadline.check("sending a burst")
    return Burst(latencies, results, len(errors), elapsed, errors[0] if errors else None)


def api_sender(stack: Stack) -> Callable[[], tuple[Callable[[int], Any], Callable[[], None]]]:
    context = stack.client_context()

    def make() -> tuple[Callable[[int], Any], Callable[[], None]]:
        api = Api(stack.public_port, context)
        return api.submit, api.close

    return make


def measure_ingress(
    stack: Stack, *, seconds: float, threads: int, deadline: Deadline, limit: int | None = None
) -> Ingress:
    """Accepted submissions per second through the HTTPS API, ``threads`` keep-alive clients,
    for ``seconds`` or ``limit`` submissions, whichever comes first."""
    sender = api_sender(stack)
    # Warm up: TLS handshakes, connection pools, the first query plans.
    burst(sender, threads=threads, count=threads * 4, deadline=deadline)
    result = burst(sender, threads=threads, seconds=seconds, count=limit, deadline=deadline)
    if result.errors and not result.results:
        raise BrokerError(f"every submission failed: {result.first_error}")
    return Ingress(
        accepted=len(result.results),
        errors=result.errors,
        seconds=result.seconds,
        latency=Latency.of(result.latencies),
    )
