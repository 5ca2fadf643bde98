"""Recorded activity inputs and outputs are masked and bounded before they are stored."""

from __future__ import annotations

import datetime as dt

from broker.engine.run.results import JournalEntry
from broker.runtime.persist import recorded_values
from broker.runtime.persist.recorded_values import MASK, MAX_VALUE_CHARS

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def entry(**values: dict[str, object]) -> JournalEntry:
    return JournalEntry("a", "ai", "Elsa.SendHttpRequest", None, "Completed", "Done", NOW, **values)


def test_credentials_in_inputs_are_masked_by_name_and_in_urls() -> None:
    inputs = {
        "url": "https://bob:hunter2@api.example/v1/items",
        "requestHeaders": {"Authorization": "Bearer abc", "Accept": "application/json"},
        "password": "hunter2",
        "content": [{"apiKey": "k-1", "name": "widget"}],
    }
    stored = recorded_values.payload(entry(inputs=inputs), None)
    assert stored == {
        "inputs": {
            "url": f"https://{MASK}@api.example/v1/items",
            "requestHeaders": {"Authorization": MASK, "Accept": "application/json"},
            "password": MASK,
            "content": [{"apiKey": MASK, "name": "widget"}],
        }
    }
    assert inputs["password"] == "hunter2"  # the engine's values are not changed


def test_a_long_value_is_cut_with_a_marker_and_short_ones_are_kept() -> None:
    long_list = list(range(5000))
    stored = recorded_values.payload(entry(outputs={"big": long_list, "n": 3}), {"x": 1})
    assert stored is not None
    assert stored["x"] == 1
    assert stored["outputs"]["n"] == 3
    big = stored["outputs"]["big"]
    assert isinstance(big, str)
    assert big.startswith("[0, 1, 2")
    assert len(big) <= MAX_VALUE_CHARS + 40
    assert big.endswith("characters]")


def test_an_entry_without_values_keeps_the_step_extra_as_it_is() -> None:
    extra = {"attempt": 2}
    assert recorded_values.payload(entry(), extra) is extra
    assert recorded_values.payload(entry(inputs={}), None) is None
