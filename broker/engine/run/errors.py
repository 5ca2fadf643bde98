"""The engine's own errors (each a ``BrokerError``, with no HTTP status): the runtime maps
``InstanceFinished`` and ``NothingToRetry`` to ``Conflict``, ``UnknownBookmark`` to ``NotFound``."""

from __future__ import annotations

from broker.errors import BrokerError


class EngineError(BrokerError):
    """Raised when the engine refuses a call on an instance's state; the base of its errors."""

    code = "engine_error"

    def __init__(self, message: str, *, instance_id: str) -> None:
        super().__init__(message)
        self.instance_id = instance_id


class InstanceFinished(EngineError):
    """Raised when a finished instance is asked to resume."""

    code = "instance_finished"

    def __init__(self, instance_id: str) -> None:
        super().__init__(f"workflow instance {instance_id} has finished", instance_id=instance_id)


class UnknownBookmark(EngineError):
    """Raised when an instance is resumed at a bookmark it does not hold."""

    code = "unknown_bookmark"

    def __init__(self, instance_id: str, bookmark_id: str) -> None:
        super().__init__(
            f"no bookmark {bookmark_id!r} in instance {instance_id}", instance_id=instance_id
        )
        self.bookmark_id = bookmark_id


class NothingToRetry(EngineError):
    """Raised when a retry finds no faulted or interrupted activity to run again."""

    code = "nothing_to_retry"

    def __init__(self, instance_id: str) -> None:
        super().__init__(
            f"workflow instance {instance_id} has nothing to retry", instance_id=instance_id
        )
