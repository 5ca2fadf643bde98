"""The Celery application of ``celery -A tasks worker|beat|flower`` (docs/design.md, section 1)."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from celery import Celery, Task, bootsteps, shared_task
from celery.exceptions import TimeLimitExceeded
from celery.signals import (
    celeryd_after_setup,
    import_modules,
    setup_logging,
    worker_process_init,
    worker_ready,
)
from celery.utils.time import get_exponential_backoff_interval

from broker.activities import DECLARED
from broker.errors import LockNotAcquired, StoreUnavailable
from broker.names import (
    DEFAULT_QUEUE,
    MAINTENANCE_QUEUE,
    MAINTENANCE_TASKS,
    RUN_REQUEST,
    WEBHOOK_QUEUE,
)
from broker.runtime import ids
from broker.runtime.outbox import deliveries
from broker.runtime.steps import activities, ceiling, heartbeat, poison
from broker.runtime.steps.heartbeat import leasing
from broker.settings import Settings, get_settings
from broker.telemetry import metrics, tracing
from broker.telemetry.logs import configure_logging, demote
from broker.wiring import worker
from broker.wiring.runtime import Runtime, connect, get_runtime

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def create_app(settings: Settings | None = None) -> Celery:
    app = worker.celery_app(settings)
    app.steps["worker"].add(Liveness)
    # OTEL_* turns traces on (the otel extra): a span per task, under its publisher's context.
    tracing.configure(tracing.SERVICE)
    tracing.connect_celery()
    return app


#: seconds between two touches of BROKER_WORKER_HEARTBEAT_FILE
LIVENESS_INTERVAL = 10.0


def touch(path: Path) -> None:
    """Set ``path``'s modification time to now (creating it); never raises."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError as exc:
        logger.warning("worker heartbeat file %s not touched: %s", path, exc)


def beat(path: Path | None) -> None:
    """One beat of the worker's loop: the heartbeat gauge (alerts), and the file when set."""
    metrics.record_worker_heartbeat()
    if path is not None:
        touch(path)


class Liveness(bootsteps.StartStopStep):  # type: ignore[misc]
    """Touches ``BROKER_WORKER_HEARTBEAT_FILE`` every ``LIVENESS_INTERVAL`` seconds from the
    worker's timer, which its event loop drives (Redis, AMQP): a probe reading the file's age
    costs a ``find``, not a Python process, and a stuck loop stops the touches. While the worker
    reconnects to its transport the touches pause too, so the probe allows minutes, not seconds:
    a transport blip must not restart every worker."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.tref: Any = None

    def start(self, worker: Any) -> None:
        setting = get_settings().worker_heartbeat_file
        path = Path(setting) if setting else None
        beat(path)
        self.tref = worker.timer.call_repeatedly(LIVENESS_INTERVAL, beat, (path,))

    def stop(self, worker: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None


def worker_queues(runtime: Runtime) -> list[str]:
    """The queues a worker consumes: default, maintenance, webhooks, every workflow's own (loaded,
    or stored with instances that may still run) and every declared activity's."""
    queues = {DEFAULT_QUEUE, MAINTENANCE_QUEUE, WEBHOOK_QUEUE}
    queues |= runtime.registry.queues()
    queues.update(declared.queue for declared in DECLARED.values() if declared.queue)
    return sorted(queues)


def _consume_workflow_queues(sender: Any, instance: Any, **_: Any) -> None:
    if instance.app.amqp.queues._consume_from is not None:
        # The operator chose the queues (`-Q`): a dedicated worker consumes only those.
        logger.info("worker %s consumes only the queues given with -Q", sender)
        return
    runtime = get_runtime()
    consumed = set(worker_queues(runtime))
    for queue in sorted(consumed):
        instance.app.amqp.queues.select_add(queue)
    app, hostname = instance.app, str(sender)

    def consume_new_queues() -> None:
        # A workflow published while the worker runs may name a queue it does not consume yet:
        # ask this worker (through its remote-control channel, so its own consumer thread does
        # it) to add it, or that workflow's requests would wait forever.
        for queue in worker_queues(runtime):
            if queue not in consumed:
                consumed.add(queue)
                logger.info("worker %s starts consuming queue %s", hostname, queue)
                app.control.add_consumer(queue, destination=[hostname], reply=False)

    runtime.registry.add_listener(consume_new_queues)


celeryd_after_setup.connect(_consume_workflow_queues)


def _configure_logging(loglevel: Any = None, **_: Any) -> None:
    """Workers and beat log as the listeners do (one JSON object per line, or text; messages and
    tracebacks redacted): Celery hands logging over to the broker's configuration, at the more
    verbose of ``--loglevel`` and ``BROKER_LOG_LEVEL``. Celery's lines about maintenance ticks
    (sent, received, succeeded) are DEBUG: a job that did something logs it itself."""
    configure_logging(get_settings(), level=loglevel)
    quiet_maintenance_ticks()


def quiet_maintenance_ticks() -> None:
    """Demote Celery's per-tick INFO lines of the maintenance jobs to DEBUG (beat's "Sending
    due task", the worker's "received" and "succeeded"); failures and workflow tasks stay."""
    jobs = frozenset(MAINTENANCE_TASKS)

    def sent(record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return str(record.msg).startswith("Scheduler: Sending due task") and bool(
            set(map(str, args)) & jobs
        )

    def handled(record: logging.LogRecord) -> bool:
        data = record.__dict__.get("data")
        return isinstance(data, dict) and data.get("name") in jobs

    demote("celery.beat", sent)
    demote("celery.worker.strategy", handled)
    demote("celery.app.trace", handled)


def _log_like_the_broker(**_: Any) -> None:
    """Commands that set up no logging of their own (Flower) log as the broker does too: Celery
    imports the app's modules once they start, the moment to install the broker's handler
    (tornado's plain one, which Flower's option parsing adds, is replaced)."""
    root = logging.getLogger()
    plain = [h for h in root.handlers if type(h.formatter).__module__.startswith("tornado")]
    if not root.handlers or len(plain) == len(root.handlers):
        configure_logging(get_settings())


setup_logging.connect(_configure_logging)
import_modules.connect(_log_like_the_broker)


#: While the database (or the lock backend: PostgreSQL's advisory locks during a failover, a
#: restarting Redis) is unreachable a task adapter is retried soon, with a capped backoff,
#: instead of failing and waiting for the relay's lease (the outbox row stays open either way).
STORE_RETRY = {
    "autoretry_for": (StoreUnavailable, LockNotAcquired),
    "retry_backoff": 1,
    "retry_backoff_max": 10,
    "retry_jitter": True,
    "max_retries": 30,
}


def task(name: str, **options: Any) -> Callable[[F], F]:
    """``shared_task`` with a type: registers a task adapter under ``name`` on every app."""
    return cast(Callable[[F], F], shared_task(name=name, **options))


def workflow_task(name: str, **options: Any) -> Callable[[F], F]:
    """A task adapter that does durable work (an outbox row's task: a RunTask call, a webhook
    attempt, a workflow step): retried quickly while the database is down, and counted by
    ``DurableTask`` when it kills its worker."""
    return task(name, **{"base": DurableTask, **STORE_RETRY, **options})


class DurableTask(Task):  # type: ignore[misc]
    """The base of every task adapter that runs an outbox row's work (docs/design.md, section 7:
    poison work). Before the work runs, the delivery's start is committed on the row
    (``deliveries.begin``), which counts the earlier deliveries that died (their worker process
    segfaulted, was OOM-killed, called ``os._exit``): at ``BROKER_MAX_WORKER_DEATHS`` the work is
    dead-lettered instead (``poison.bury``), so the pool stops losing children to it and the
    queue keeps moving. While the work runs its lease is beaten; when it raises, or returns
    without recording a result, its start is closed: only a death leaves it open.

    A new kind of durable work gets all of this by being declared with ``workflow_task`` (or
    ``base=DurableTask``) and taking its row's id as the keyword ``outbox_id``, as the outbox's
    messages pass it."""

    #: whether the work beats its row's lease itself (a workflow step, with its instance)
    beats_lease = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        outbox_id = kwargs.get("outbox_id")
        if not outbox_id or self.request.id is None:
            return super().__call__(*args, **kwargs)  # called directly, not delivered
        rt = get_runtime()
        retries = int(self.request.retries or 0)
        try:
            delivery = deliveries.begin(rt.factory, rt.settings, str(outbox_id), retries=retries)
        except (StoreUnavailable, LockNotAcquired) as exc:
            countdown = get_exponential_backoff_interval(
                factor=STORE_RETRY["retry_backoff"],
                retries=retries,
                maximum=STORE_RETRY["retry_backoff_max"],
                full_jitter=True,
            )
            raise self.retry(exc=exc, countdown=countdown) from exc
        # Called by Celery's tracer, which pushed this delivery's request: run ``run`` under it.
        if delivery is None:
            return self.run(*args, **kwargs)  # finished or unknown: the work recognises it
        log = {"outbox_id": delivery.outbox_id, "request_id": delivery.request_id}
        if delivery.busy:
            logger.info(
                "outbox row %s is being run by another live delivery; this one leaves it",
                delivery.outbox_id,
                extra=log,
            )
            return None
        if delivery.poisoned:
            poison.bury(rt, delivery)
            return None
        beating = contextlib.nullcontext() if self.beats_lease else leasing(rt, delivery.outbox_id)
        with deliveries.running(delivery.outbox_id) as work:
            try:
                with beating:
                    result = self.run(*args, **kwargs)
            except MemoryError:
                _die_of_memory(delivery.outbox_id)
                raise
            except BaseException:
                deliveries.end_quietly(rt.factory, delivery)
                raise
            if not work.finished:
                deliveries.end_quietly(rt.factory, delivery)
        return result


#: the exit status of a pool process that ran out of memory (as a shell reports a SIGKILL)
OUT_OF_MEMORY_EXIT = 137


def _mark_pool_process(**_: Any) -> None:
    heartbeat.mark_pool_process()


worker_process_init.connect(_mark_pool_process)


def _die_of_memory(outbox_id: str) -> None:
    """Work that ran out of memory (a ``MemoryError`` under a memory limit) ends its pool process
    as the kernel's OOM killer would: Celery would otherwise re-raise the error in the worker's
    main process, which stops the whole worker (and every redelivery would stop the next). The
    pool replaces the process, the start stays open, and the delivery counts as one that died."""
    if not heartbeat.in_pool_process():
        return  # the solo or threads pool: Celery's own handling applies
    logger.critical(
        "outbox row %s ran out of memory: its pool process exits", outbox_id,
        extra={"outbox_id": outbox_id},
    )  # fmt: skip
    heartbeat.end_process(OUT_OF_MEMORY_EXIT)


class KilledAtHardLimit(DurableTask):
    """The base of the task adapters whose work Celery's hard time limit may kill (the backstop
    of their own watchdog): when it does, ``on_failure`` runs in the worker's main process (on a
    Celery that reports it) and ``record_killed`` records the work's fault."""

    beats_lease = True
    #: what the log calls the work
    work = "work"

    def on_failure(
        self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        if not isinstance(exc, TimeLimitExceeded):
            return
        try:
            self.record_killed(tuple(args or ()), dict(kwargs or {}))
        except Exception:
            logger.error("fault of killed %s %s not recorded", self.work, task_id, exc_info=True)

    def record_killed(self, args: tuple[Any, ...], call: dict[str, Any]) -> None:
        raise NotImplementedError


class StepTask(KilledAtHardLimit):
    """A task adapter that runs one workflow step: when the hard limit kills it, its fault is
    recorded in case the step's own watchdog could not (``broker.runtime.steps.ceiling``)."""

    work = "step"

    def record_killed(self, args: tuple[Any, ...], call: dict[str, Any]) -> None:
        request_id = call.get("request_id")
        instance_id = call.get("instance_id")
        if self.name == RUN_REQUEST:
            request_id = request_id or (args[0] if args else None)
            instance_id = ids.instance_id_for_request(str(request_id)) if request_id else None
        elif instance_id is None and args:
            instance_id = args[0]
        if not instance_id:
            return
        outbox_id = call.get("outbox_id") or (args[1] if len(args) > 1 else None)
        ceiling.fault_overdue_step(
            get_runtime(),
            instance_id=str(instance_id),
            outbox_id=str(outbox_id) if outbox_id else None,
            request_id=str(request_id) if request_id else None,
        )


class ActivityTask(KilledAtHardLimit):
    """``broker.run_activity``: it beats its own lease under the activity's time limit; when the
    hard limit (the backstop for a call its watchdog could not reach: code holding the GIL) kills
    its process, the call is answered with its time-limit fault."""

    work = "activity call"

    def record_killed(self, args: tuple[Any, ...], call: dict[str, Any]) -> None:
        activities.fault_overdue_call(
            get_runtime(),
            outbox_id=call.get("outbox_id"),
            type_name=str(call["type_name"]),
            instance_id=str(call["instance_id"]),
            bookmark_id=str(call["bookmark_id"]),
        )


def step_task(name: str, **options: Any) -> Callable[[F], F]:
    """A workflow task adapter that runs one step: under the step ceiling (``STEP_TASKS``)."""
    return workflow_task(name, base=StepTask, **options)


def maintenance_job(fn: F) -> F:
    """A beat job skips a tick while the database is down: one warning, no traceback."""

    @functools.wraps(fn)
    def job(*args: Any, **kwargs: Any) -> Any:
        metrics.record_maintenance(fn.__name__)
        try:
            return fn(*args, **kwargs)
        except StoreUnavailable as exc:
            logger.warning("%s skipped this tick: %s", fn.__name__, exc)
            return None

    return cast(F, job)


def _serve_worker_metrics(sender: Any = None, **_: Any) -> None:
    """Serve this worker's own metrics when BROKER_WORKER_METRICS_BIND is set.

    The internal listener sums only the processes that share its PROMETHEUS_MULTIPROC_DIR, i.e.
    on its own host; a worker elsewhere (another container, pod or machine) is scraped here.
    """
    settings = get_settings()
    bind = settings.worker_metrics_bind
    if not bind:
        return
    from broker.adapters import health
    from broker.serving import metrics_port

    # /readyz there too: the readiness probe of a worker pod (database and transport).
    metrics_port.serve(
        bind, "BROKER_WORKER_METRICS_BIND", ready=health.probe(settings, connect(settings))
    )
    logger.info("worker %s serves /metrics, /healthz, /readyz on %s", sender, bind)


worker_ready.connect(_serve_worker_metrics)


def _warn_unless_sigterm_drains(sender: Any = None, **_: Any) -> None:
    """The drain needs Celery's soft shutdown, which SIGTERM starts only when remapped."""
    from billiard.common import REMAP_SIGTERM

    if REMAP_SIGTERM != "SIGQUIT":
        logger.warning(
            "worker %s: REMAP_SIGTERM is not SIGQUIT, so SIGTERM waits for running steps without "
            "bound instead of draining for BROKER_DRAIN_TIMEOUT (deploy/README.md)",
            sender,
        )


worker_ready.connect(_warn_unless_sigterm_drains)
