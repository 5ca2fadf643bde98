"""Prometheus metrics of the ingress (the operations work adds more).

In gunicorn with several workers, set ``PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's own
switch) so ``/metrics`` sums every worker's values instead of answering for one of them.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    generate_latest,
)

ACCEPTED = Counter(
    "broker_requests_accepted", "Requests accepted, by request type", ["request_type"]
)
REJECTED = Counter(
    "broker_requests_rejected", "Submissions refused by authorization checks", ["reason"]
)
CALLBACKS = Counter("broker_callbacks", "Remote-executor callbacks, by outcome", ["outcome"])
RESPONSES = Counter(
    "broker_http_responses", "HTTP responses, by listener and status class", ["listener", "status"]
)


def exposition() -> tuple[bytes, str]:
    """The text exposition of every metric (all workers' in multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # noqa: TID251 - prometheus-client's switch
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
