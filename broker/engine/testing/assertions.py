"""The assertions a run of the authors' kit offers: its end, its waits, its outputs, its journal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Self

from broker.engine.run.results import (
    Bookmark,
    JournalEntry,
    RunResult,
    WorkflowStatus,
    WorkflowSubStatus,
)

__all__ = ["RunAssertions"]


class RunAssertions:
    """Each assertion returns the run, so they chain; a failed one says what the run holds."""

    journal: list[JournalEntry]

    @property
    def latest(self) -> RunResult:
        raise NotImplementedError

    @property
    def status(self) -> str:
        raise NotImplementedError

    @property
    def sub_status(self) -> str:
        raise NotImplementedError

    @property
    def output(self) -> Any:
        raise NotImplementedError

    @property
    def bookmarks(self) -> Sequence[Bookmark]:
        raise NotImplementedError

    def assert_finished(self) -> Self:
        """The workflow ended well (Finished, not Faulted or Cancelled)."""
        fault = self.latest.fault.message if self.latest.fault else None
        assert (self.status, self.sub_status) == (
            WorkflowStatus.FINISHED,
            WorkflowSubStatus.FINISHED,
        ), f"{self.status}/{self.sub_status}, fault: {fault}"
        return self

    def assert_faulted(self, message: str | None = None) -> Self:
        """The workflow faulted, with ``message`` in the fault's message when one is given."""
        assert self.sub_status == WorkflowSubStatus.FAULTED, f"{self.status}/{self.sub_status}"
        if message is not None:
            fault = self.latest.fault.message if self.latest.fault else ""
            assert message in fault, f"fault {fault!r} does not mention {message!r}"
        return self

    def assert_waiting_for(self, *activity_ids: str) -> Self:
        """The workflow is suspended on exactly these activities' bookmarks."""
        assert self.sub_status == WorkflowSubStatus.SUSPENDED, f"{self.status}/{self.sub_status}"
        assert sorted(b.activity_id for b in self.bookmarks) == sorted(activity_ids), self._waits()
        return self

    def assert_output(self, **expected: Any) -> Self:
        """Each named workflow output has the given value."""
        output = self.output if isinstance(self.output, Mapping) else {}
        for name, value in expected.items():
            assert output.get(name) == value, f"output {name!r} is {output.get(name)!r}"
        return self

    def assert_journal(self, *records: str) -> Self:
        """These ``"activityId:Event"`` records appear in the journal, in this order."""
        seen = [f"{e.activity_id}:{e.event_name}" for e in self.journal]
        position = 0
        for record in records:
            try:
                position = seen.index(record, position) + 1
            except ValueError:
                raise AssertionError(
                    f"{record!r} is not in the journal after {position}: {seen}"
                ) from None
        return self

    def _waits(self) -> str:
        waits = [f"{b.activity_id} ({b.name})" for b in self.bookmarks]
        return f"waiting on: {', '.join(waits) or 'nothing'}"
