"""One heartbeat thread per worker process, beating for every step the process is running and
the outbox lease of every other piece of durable work it runs."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import NoReturn, Protocol

from sqlalchemy import bindparam, update

from broker.runtime.outbox import rows as outbox
from broker.runtime.parts import Steps
from broker.runtime.ports import Lock
from broker.store.db import transaction
from broker.store.models import WorkflowInstance, table_of, utcnow

logger = logging.getLogger(__name__)

#: how long unregistering waits for a beat of that step already in flight
UNREGISTER_WAIT_SECONDS = 5.0
#: the shortest interval between two beats of one step
MIN_INTERVAL = 0.5
#: the exit status of a pool process its watchdog ends (the work ran past its time limit), as
#: ``timeout(1)`` reports one
OVERDUE_EXIT = 124
#: seconds the watchdog gives the overdue work's fault to be recorded before it ends the process
#: anyway (the database hangs): well inside Celery's hard limit (``STEP_KILL_GRACE``)
RECORD_GRACE_SECONDS = 2.5

#: whether this is a prefork pool process, which its watchdog may end (``mark_pool_process``)
_pool_process = False


def mark_pool_process() -> None:
    """This process is one of the prefork pool's (Celery's ``worker_process_init``): work that
    runs past its time limit ends it once its fault is recorded, and the pool starts another."""
    global _pool_process
    _pool_process = True


def _descendants(root: int) -> list[int]:
    """The processes ``root`` started, and theirs, from ``/proc`` (none where there is none)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    # ``pid (comm) state ppid ...``: comm may hold spaces and parentheses
                    fields = stat.read().rpartition(b")")[2].split()
            except OSError:
                continue  # it ended meanwhile
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    pending = list(children.get(root, ()))
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, ()))
    return found


def in_pool_process() -> bool:
    return _pool_process


def end_process(status: int) -> NoReturn:
    """End this pool process at once (no unwinding, no finalizers: whatever the work is stuck in
    stays stuck, and no lock it might take on the way out is left held), and every process it
    started (the work's own children, whatever session they are in), logs flushed first."""
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    os._exit(status)


_INSTANCES = table_of(WorkflowInstance)
_BEAT_INSTANCE = (
    update(_INSTANCES)
    .where(_INSTANCES.c.id == bindparam("instance_id"))
    .values(heartbeat_at=bindparam("now"))
)


class Opening(Protocol):
    """What the heartbeat needs of a step's opening (``steps.Opening``)."""

    @property
    def pending(self) -> bool: ...

    def write_now(self, rt: Steps) -> None: ...


@dataclasses.dataclass(eq=False)
class Beating:
    """One registered step: what to beat, when next, and whether it still beats (a piece of work
    that is no step has no instance: only its outbox row's lease is beaten)."""

    rt: Steps
    instance_id: str | None
    outbox_id: str | None
    lock: Lock
    opening: Opening
    deadline: float
    #: records the work's fault at the deadline; answers whether the work is still running (its
    #: process then ends, ``_end_overdue``)
    overdue: Callable[[], bool]
    interval: float
    #: when the thread wakes next for this step, and when its next beat is due
    due: float
    next_beat: float
    #: called at the first wake (after the open delay): the step runs long
    release: Callable[[], None] | None = None
    stopped: bool = False
    #: held while the thread works for this step, so unregistering waits for that work
    busy: threading.Lock = dataclasses.field(default_factory=threading.Lock)


class Heartbeat:
    """The process's heartbeat: one thread for all registered steps."""

    def __init__(self) -> None:
        self._steps: set[Beating] = set()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        #: when the thread looks at the steps next (``math.inf``: only when woken; 0: it is
        #: awake and looks before it waits again), so a step due later need not wake it
        self._looks_at = 0.0

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def register(
        self,
        rt: Steps,
        instance_id: str | None,
        outbox_id: str | None,
        lock: Lock,
        opening: Opening,
        deadline: float,
        overdue: Callable[[], bool],
        *,
        open_delay: float,
        release: Callable[[], None] | None = None,
    ) -> Beating:
        """Beat for this step from now on, until ``unregister``; after ``open_delay`` seconds a
        pending ``opening`` is written and ``release`` called (the step runs long)."""
        interval = max(MIN_INTERVAL, min(rt.settings.heartbeat_interval, rt.settings.lock_ttl / 3))
        now = time.monotonic()
        step = Beating(
            rt, instance_id, outbox_id, lock, opening, deadline, overdue, interval,
            due=min(now + open_delay, deadline), next_beat=min(now + interval, deadline),
            release=release,
        )  # fmt: skip
        with self._wake:
            self._steps.add(step)
            self._ensure_thread()
            # Steps come and go a hundred times a second: wake the thread only when it would
            # otherwise look too late for this one (a thread switch per step costs more than
            # the registration).
            if step.due < self._looks_at:
                self._wake.notify()
        return step

    def unregister(self, step: Beating) -> None:
        """Stop beating ``step``, waiting (a bounded while) for a beat of it already running."""
        with self._wake:
            step.stopped = True
            self._steps.discard(step)
        if step.busy.acquire(timeout=UNREGISTER_WAIT_SECONDS):
            step.busy.release()

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._looks_at = 0.0
            self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._wake:
                step = self._next_due()
                while step is None or step.due > time.monotonic():
                    self._looks_at = math.inf if step is None else step.due
                    timeout = None if step is None else step.due - time.monotonic()
                    self._wake.wait(timeout)
                    self._looks_at = 0.0
                    step = self._next_due()
                step.busy.acquire()
            try:
                if not step.stopped:
                    self._beat(step)
            finally:
                step.busy.release()

    def _next_due(self) -> Beating | None:
        return min(self._steps, key=lambda s: s.due, default=None)

    def _beat(self, step: Beating) -> None:
        now = time.monotonic()
        if step.release is not None:
            release, step.release = step.release, None
            try:
                release()
            except Exception:
                logger.warning("instance %s: release failed", step.instance_id, exc_info=True)
        if step.opening.pending:
            try:
                step.opening.write_now(step.rt)
            except Exception:
                logger.warning("start of instance %s not written", step.instance_id, exc_info=True)
            self._reschedule(step, now)
            return
        if now >= step.deadline:
            self._drop(step)
            _end_overdue(step)
            return
        if now < step.next_beat:  # woke for the open delay, before the first beat
            with self._wake:
                step.due = step.next_beat
            return
        try:
            with transaction(step.rt.factory) as session:
                if step.instance_id is not None:
                    session.execute(
                        _BEAT_INSTANCE, {"instance_id": step.instance_id, "now": utcnow()}
                    )
                if step.outbox_id is not None:
                    outbox.extend_lease(session, step.outbox_id, step.rt.settings.outbox_lease)
            step.lock.extend(step.rt.settings.lock_ttl)
        except Exception:
            logger.warning(
                "heartbeat of instance %s (outbox row %s) failed",
                step.instance_id,
                step.outbox_id,
                exc_info=True,
            )
        self._reschedule(step, now)

    def _reschedule(self, step: Beating, now: float) -> None:
        with self._wake:
            step.due = step.next_beat = min(now + step.interval, step.deadline)

    def _drop(self, step: Beating) -> None:
        """The step is over its deadline: beat it no more (its fault is being recorded)."""
        with self._wake:
            step.stopped = True
            self._steps.discard(step)


def _end_overdue(step: Beating) -> None:
    """Record the fault of work past its deadline; in a pool process, then end the process: the
    work is stuck in something that will not return (a blocking call without a timeout), and
    ending it here, at once, frees its pool slot before Celery's hard limit would kill it in the
    middle of unwinding (docs/activities.md, time limits). A backstop ends it anyway when the
    fault cannot be recorded in time; the work's row then stays open and counts as a death."""
    backstop = None
    if _pool_process:
        backstop = threading.Timer(RECORD_GRACE_SECONDS, _end_unrecorded, args=(step,))
        backstop.daemon = True
        backstop.start()
    try:
        running = step.overdue()
    except Exception:
        logger.error("fault of overdue instance %s not recorded", step.instance_id, exc_info=True)
        running = True
    if not _pool_process:
        return
    if not running:
        assert backstop is not None
        backstop.cancel()  # the work ended on its own meanwhile
        return
    logger.error(
        "%s ran past its time limit: its pool process exits and the pool starts another",
        _work_of(step),
        extra={"instance_id": step.instance_id, "outbox_id": step.outbox_id},
    )
    end_process(OVERDUE_EXIT)


def _end_unrecorded(step: Beating) -> None:
    logger.error(
        "%s ran past its time limit and its fault was not recorded in %.1fs: its pool process "
        "exits",
        _work_of(step),
        RECORD_GRACE_SECONDS,
        extra={"instance_id": step.instance_id, "outbox_id": step.outbox_id},
    )
    end_process(OVERDUE_EXIT)


def _work_of(step: Beating) -> str:
    """``instance I (outbox row O)``, or ``outbox row O`` for work that is no step."""
    row = f"outbox row {step.outbox_id}"
    return f"instance {step.instance_id} ({row})" if step.instance_id else row


_HEARTBEAT = Heartbeat()


def process_heartbeat() -> Heartbeat:
    """The heartbeat of this process."""
    return _HEARTBEAT


def _reset_after_fork() -> None:
    # A forked child (Celery's prefork pool) has none of its parent's threads, and the parent's
    # locks may have been held at the fork: the child starts a heartbeat of its own.
    global _HEARTBEAT
    _HEARTBEAT = Heartbeat()


os.register_at_fork(after_in_child=_reset_after_fork)


@contextlib.contextmanager
def beating(
    rt: Steps,
    instance_id: str,
    outbox_id: str | None,
    lock: Lock,
    opening: Opening,
    deadline: float,
    overdue: Callable[[], bool],
    *,
    open_delay: float,
    release: Callable[[], None] | None = None,
) -> Iterator[None]:
    """Beat for a step while the ``with`` block runs its engine (docs/design.md, section 1)."""
    heartbeat = _HEARTBEAT
    step = heartbeat.register(
        rt, instance_id, outbox_id, lock, opening, deadline, overdue,
        open_delay=open_delay, release=release,
    )  # fmt: skip
    try:
        yield
    finally:
        heartbeat.unregister(step)


class _NoLock:
    """The lock of work that holds none (only its outbox lease is beaten)."""

    name = ""

    def extend(self, ttl: float | None = None) -> None:
        """Nothing to extend."""

    def release(self) -> None:
        """Nothing to release."""

    def owned(self) -> bool:
        return True

    def __enter__(self) -> _NoLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Nothing to release."""


class _Opened:
    """The opening of work that is no request's first step: nothing to write."""

    pending = False

    def write_now(self, rt: Steps) -> None:
        """Nothing to write."""


@contextlib.contextmanager
def leasing(
    rt: Steps,
    outbox_id: str,
    *,
    limit: float | None = None,
    overdue: Callable[[], bool] | None = None,
) -> Iterator[None]:
    """Beat ``outbox_id``'s lease while the ``with`` block runs a piece of durable work that is no
    workflow step (a RunTask call, a webhook attempt, a task-mode activity), for at most ``limit``
    seconds (the step ceiling unless told): the relay then knows the delivery is alive, and a
    delivery that stops beating died (``broker.runtime.outbox.deliveries``). At the limit
    ``overdue`` records the work's fault (and the pool process ends); without one the lease is
    no longer beaten."""
    heartbeat = _HEARTBEAT
    interval = max(MIN_INTERVAL, min(rt.settings.heartbeat_interval, rt.settings.lock_ttl / 3))
    deadline = time.monotonic() + (limit if limit is not None else rt.settings.step_time_limit)
    work = heartbeat.register(
        rt, None, outbox_id, _NoLock(), _Opened(), deadline, overdue or _stop_beating,
        open_delay=interval,
    )  # fmt: skip
    try:
        yield
    finally:
        heartbeat.unregister(work)


def _stop_beating() -> bool:
    """Past the ceiling a piece of work that is no step is no longer beaten: its lease runs out,
    and the relay publishes its row again, counting the delivery as one that died."""
    return False
