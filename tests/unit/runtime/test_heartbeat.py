"""The process heartbeat: one thread for every running step, the step ceiling's watchdog."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any, cast

from broker.runtime.steps.heartbeat import Heartbeat
from broker.wiring.runtime import Runtime
from tests.support.waits import wait_until


class Written:
    """An opening already written: the heartbeat has only beats and the ceiling to keep."""

    pending = False

    def write_now(self, rt: Runtime) -> None:  # pragma: no cover - never pending
        raise AssertionError("nothing to write")


class FakeLock:
    name = "instance:x"

    def extend(self, ttl: float | None = None) -> None:
        pass


def runtime() -> Runtime:
    # Beats only after an hour: these tests see the watchdog and the thread, never a beat.
    settings = SimpleNamespace(heartbeat_interval=3600.0, lock_ttl=3 * 3600.0)
    return cast(Runtime, SimpleNamespace(settings=settings))


def register(heartbeat: Heartbeat, deadline: float, overdue: Any) -> Any:
    return heartbeat.register(
        runtime(), "x", None, cast(Any, FakeLock()), Written(), deadline, overdue, open_delay=0.05
    )


def test_steps_share_one_thread_started_on_the_first_registration() -> None:
    heartbeat = Heartbeat()
    assert heartbeat.thread is None
    far = time.monotonic() + 3600
    first = register(heartbeat, far, lambda: None)
    thread = heartbeat.thread
    second = register(heartbeat, far, lambda: None)
    assert thread is not None
    assert thread.is_alive()
    assert heartbeat.thread is thread
    heartbeat.unregister(first)
    heartbeat.unregister(second)
    third = register(heartbeat, far, lambda: None)
    assert heartbeat.thread is thread
    heartbeat.unregister(third)


def test_a_step_past_its_deadline_is_faulted_once_and_beaten_no_more() -> None:
    heartbeat = Heartbeat()
    faults: list[float] = []
    fired = threading.Event()

    def overdue() -> None:
        faults.append(time.monotonic())
        fired.set()

    step = register(heartbeat, time.monotonic() + 0.2, overdue)
    other = register(heartbeat, time.monotonic() + 3600, lambda: None)
    wait_until(fired.is_set, timeout=5, what="the watchdog")
    time.sleep(0.3)
    assert len(faults) == 1
    assert step.stopped
    assert not other.stopped
    heartbeat.unregister(step)
    heartbeat.unregister(other)


def test_an_unregistered_step_is_never_faulted() -> None:
    heartbeat = Heartbeat()
    faults: list[str] = []
    step = register(heartbeat, time.monotonic() + 0.2, lambda: faults.append("x"))
    heartbeat.unregister(step)
    time.sleep(0.4)
    assert faults == []


class Pending:
    """An opening the heartbeat must write once the step has run for its open delay."""

    def __init__(self) -> None:
        self.written = threading.Event()

    @property
    def pending(self) -> bool:
        return not self.written.is_set()

    def write_now(self, rt: Runtime) -> None:
        self.written.set()


class CountedWakes(threading.Condition):
    """The heartbeat's condition, counting how often a registration wakes the thread."""

    wakes = 0

    def notify(self, n: int = 1) -> None:
        self.wakes += 1
        super().notify(n)


def test_a_step_due_before_the_thread_would_look_wakes_it_and_one_due_later_does_not() -> None:
    heartbeat = Heartbeat()
    wake = heartbeat._wake = CountedWakes()
    far = time.monotonic() + 3600
    # Given a thread waiting for a step due in an hour
    waiting = heartbeat.register(
        runtime(), "x", None, cast(Any, FakeLock()), Written(), far, lambda: None, open_delay=3600
    )
    wait_until(lambda: heartbeat._looks_at > time.monotonic() + 60, timeout=5, what="the wait")
    # When a step whose start must be written after 0.05 s registers
    opening = Pending()
    soon = heartbeat.register(
        runtime(), "y", None, cast(Any, FakeLock()), opening, far, lambda: None, open_delay=0.05
    )
    # Then the thread is woken for it and writes the start in time
    assert opening.written.wait(2)
    assert wake.wakes == 1
    # And once it waits for that hour again, a step due later does not wake it
    heartbeat.unregister(soon)
    wait_until(lambda: heartbeat._looks_at > time.monotonic() + 60, timeout=5, what="the wait")
    later = heartbeat.register(
        runtime(), "z", None, cast(Any, FakeLock()), Written(), far, lambda: None, open_delay=7200
    )
    assert wake.wakes == 1
    for step in (waiting, later):
        heartbeat.unregister(step)
