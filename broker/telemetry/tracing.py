"""OpenTelemetry traces: one trace follows a request from the ingress to its webhook delivery; off
(one flag check per call) unless the ``otel`` extra is installed and ``OTEL_*`` names an exporter
(docs/design.md, section 8, "Traces")."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:
    from flask import Flask, Response

logger = logging.getLogger(__name__)

#: the key an outbox row's arguments carry the trace context under (removed before the task runs)
ARG = "_traceparent"
HEADER = "traceparent"
INSTRUMENTATION = "elsa-celery-broker"
#: the default ``service.name`` (``OTEL_SERVICE_NAME`` names each role otherwise)
SERVICE = "elsa-celery-broker"

#: the tracer while tracing is on (``configure`` or ``install``), else None
_tracer: Any = None
_provider: Any = None


def enabled() -> bool:
    return _tracer is not None


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces (an exporter named, or an OTLP endpoint)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def configure(service: str, environ: Mapping[str, str] | None = None) -> bool:
    """Turn tracing on in this process from the standard ``OTEL_*`` variables (the SDK reads the
    exporter's endpoint, headers, sampler and batch settings itself). ``service`` is the default
    ``service.name`` (``OTEL_SERVICE_NAME`` wins). False, and nothing done, when not asked for or
    when the ``otel`` extra is missing; idempotent."""
    env: Mapping[str, str] = os.environ if environ is None else environ  # noqa: TID251 - OTEL_*
    if enabled() or not wanted(env):
        return enabled()
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        logger.warning(
            "OTEL_* asks for traces but the otel extra is not installed "
            "(pip install 'elsa-celery-broker[otel]'): no traces"
        )
        return False
    resource = Resource.create(
        {"service.name": env.get("OTEL_SERVICE_NAME") or service}
    )  # OTEL_RESOURCE_ATTRIBUTES is merged in by the SDK
    provider = TracerProvider(resource=resource)
    for name in env.get("OTEL_TRACES_EXPORTER", "otlp").split(","):
        exporter = _exporter(name.strip().lower())
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    install(provider)
    logger.info("tracing on: service %s", resource.attributes.get("service.name"))
    return True


def _exporter(name: str) -> Any:
    if name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    logger.warning("OTEL_TRACES_EXPORTER %r is not supported (otlp, console): ignored", name)
    return None


def install(provider: Any) -> None:
    """Trace into ``provider`` (an SDK ``TracerProvider``; tests pass one with an in-memory
    exporter), and stamp every outbox row inserted from now on with the current context."""
    global _tracer, _provider
    _provider = provider
    _tracer = provider.get_tracer(INSTRUMENTATION)
    from sqlalchemy import event

    from broker.store.models import OutboxRow

    if not event.contains(OutboxRow, "before_insert", _stamp_row):
        event.listen(OutboxRow, "before_insert", _stamp_row)


def uninstall() -> None:
    """Tracing off again (tests)."""
    global _tracer, _provider
    _tracer = _provider = None
    from sqlalchemy import event

    from broker.store.models import OutboxRow

    if event.contains(OutboxRow, "before_insert", _stamp_row):
        event.remove(OutboxRow, "before_insert", _stamp_row)


# Spans --------------------------------------------------------------------------------------------


def _context_of(carrier: Mapping[str, str] | None) -> Any:
    if not carrier:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract(carrier=dict(carrier))


def _kind(kind: str) -> Any:
    from opentelemetry.trace import SpanKind

    return SpanKind[kind.upper()]


@contextlib.contextmanager
def span(
    name: str,
    *,
    kind: str = "internal",
    parent: str | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Any]:
    """A span around the block, current inside it; ``parent`` a ``traceparent`` to continue
    (else the current span's). Yields the span (None when tracing is off)."""
    if _tracer is None:
        yield None
        return
    context = _context_of({HEADER: parent}) if parent else None
    attrs = {k: v for k, v in (attributes or {}).items() if v is not None}
    with _tracer.start_as_current_span(
        name, context=context, kind=_kind(kind), attributes=attrs
    ) as current:
        yield current


def set_attribute(key: str, value: Any) -> None:
    """Annotate the current span (nothing when tracing is off)."""
    if _tracer is None or value is None:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attribute(key, value)


def current_traceparent() -> str | None:
    """The current span's ``traceparent`` (None when off or outside a span)."""
    if _tracer is None:
        return None
    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get(HEADER)


def inject(headers: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Add the current ``traceparent`` (and ``tracestate``) to ``headers``."""
    if _tracer is None:
        return headers
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    TraceContextTextMapPropagator().inject(headers)
    return headers


# Carriers: outbox rows, Celery messages, callback URLs --------------------------------------------


def stamp(args: dict[str, Any], traceparent: str | None = None) -> dict[str, Any]:
    """``args`` of an outbox row with the trace context it was made under (unchanged when off)."""
    if _tracer is None or ARG in args:
        return args
    found = traceparent or current_traceparent()
    return {**args, ARG: found} if found else args


def _stamp_row(_mapper: Any, _connection: Any, row: Any) -> None:
    if isinstance(row.args, dict) and ARG not in row.args:
        stamped = stamp(row.args)
        if stamped is not row.args:
            row.args = stamped


def split(args: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """An outbox row's arguments without the trace context, and that context."""
    kwargs = dict(args)
    found = kwargs.pop(ARG, None)
    return kwargs, found if isinstance(found, str) else None


@contextlib.contextmanager
def publishing(task_name: str, outbox_id: str, traceparent: str | None) -> Iterator[dict[str, str]]:
    """A producer span for one Celery publish, child of the context the row was written under;
    yields the message headers that carry it to the worker (empty when off)."""
    if _tracer is None:
        yield {}
        return
    with span(
        f"publish {task_name}",
        kind="producer",
        parent=traceparent,
        attributes={"messaging.system": "celery", "messaging.message.id": outbox_id},
    ):
        yield dict(inject({}))


def carry(url: str) -> str:
    """``url`` with the current ``traceparent`` as a query parameter (a remote executor that does
    not propagate trace headers still calls back into the trace); unchanged when off."""
    found = current_traceparent()
    if not found:
        return url
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != HEADER] + [(HEADER, found)]
    return urlunsplit(parts._replace(query=urlencode(query)))


# Celery: a consumer span around every task run ---------------------------------------------------

_running: dict[str, tuple[Any, Any]] = {}


def _task_parent(task: Any) -> str | None:
    request = getattr(task, "request", None)
    found = getattr(request, HEADER, None)
    if not found:
        headers = getattr(request, "headers", None)
        if isinstance(headers, Mapping):
            found = headers.get(HEADER)
    return found if isinstance(found, str) else None


def task_started(
    task_id: str | None = None, task: Any = None, kwargs: Any = None, **_: Any
) -> None:
    """Celery's ``task_prerun``: open the task's span under the publisher's context."""
    if _tracer is None or task is None or task_id is None:
        return
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    parent = _context_of({HEADER: p} if (p := _task_parent(task)) else None)
    current = _tracer.start_span(
        f"run {task.name}",
        context=parent,
        kind=_kind("consumer"),
        attributes={
            "messaging.system": "celery",
            "messaging.message.id": task_id,
            # the ids a task carries (never payloads), to find the request or instance
            **{
                f"broker.{name}": str(kwargs[name])
                for name in ("request_id", "instance_id", "delivery_id")
                if isinstance(kwargs, dict) and kwargs.get(name)
            },
        },
    )
    token = otel_context.attach(trace.set_span_in_context(current))
    _running[task_id] = (current, token)


def task_finished(task_id: str | None = None, state: str | None = None, **_: Any) -> None:
    """Celery's ``task_postrun``: close the task's span."""
    found = _running.pop(task_id or "", None)
    if found is None:
        return
    from opentelemetry import context as otel_context

    current, token = found
    if state:
        current.set_attribute("celery.state", state)
    current.end()
    with contextlib.suppress(Exception):  # detached in another context: nothing to restore
        otel_context.detach(token)


def connect_celery() -> None:
    """Trace every task this process runs (idempotent; nothing when tracing is off)."""
    if _tracer is None:
        return
    from celery.signals import task_postrun, task_prerun

    task_prerun.connect(task_started, weak=False, dispatch_uid="broker.telemetry.tracing.started")
    task_postrun.connect(
        task_finished, weak=False, dispatch_uid="broker.telemetry.tracing.finished"
    )


# Flask: a server span around every request -------------------------------------------------------


def instrument_flask(app: Flask, listener: str) -> None:
    """A server span per request of ``app``, continuing the caller's ``traceparent`` (a header,
    or the query parameter ``carry`` adds to callback URLs); nothing when tracing is off."""
    if _tracer is None:
        return
    from flask import g, request
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    @app.before_request
    def _start() -> None:
        carrier = {HEADER: request.headers.get(HEADER) or request.args.get(HEADER) or ""}
        if request.headers.get("tracestate"):
            carrier["tracestate"] = request.headers["tracestate"]
        route = request.url_rule.rule if request.url_rule is not None else request.path
        current = _tracer.start_span(
            f"{request.method} {route}",
            context=_context_of(carrier if carrier[HEADER] else None),
            kind=_kind("server"),
            attributes={
                "http.request.method": request.method,
                "http.route": route,
                "broker.listener": listener,
            },
        )
        g.broker_trace = (current, otel_context.attach(trace.set_span_in_context(current)))

    @app.after_request
    def _status(response: Response) -> Response:
        found = g.get("broker_trace")
        if found is not None:
            found[0].set_attribute("http.response.status_code", response.status_code)
        return response

    @app.teardown_request
    def _end(_error: BaseException | None = None) -> None:
        found = g.pop("broker_trace", None)
        if found is None:
            return
        current, token = found
        current.end()
        with contextlib.suppress(Exception):
            otel_context.detach(token)
