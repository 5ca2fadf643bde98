"""The worker's engine takes its limits and modes from the settings; its refusals are mapped."""

from __future__ import annotations

from typing import cast

import pytest

from broker.engine.api import Engine
from broker.engine.run.errors import EngineError, InstanceFinished, NothingToRetry, UnknownBookmark
from broker.errors import BrokerError, Conflict, NotFound
from broker.runtime.persist import Target
from broker.runtime.steps.effects import RecordedHttp, RecordedMailer
from broker.runtime.steps.step import Step, _run_step, build_engine
from broker.settings import Settings
from broker.wiring.runtime import Runtime


def test_the_engine_gets_the_configured_javascript_limits_and_flowchart_mode(
    settings: Settings,
) -> None:
    # Given settings that differ from every engine default
    custom = settings.replace(
        js_time_limit=0.25, js_memory_limit=8 * 1024 * 1024, flowchart_mode="TokenBased"
    )
    # When the runtime builds its engine
    engine = build_engine(Runtime(custom, registry=object()), "i1")
    # Then the engine runs with them
    assert engine.js_time_limit == 0.25
    assert engine.js_memory_limit == 8 * 1024 * 1024
    assert engine.flowchart_mode == "TokenBased"
    # And its HTTP calls and e-mails are recorded for that instance
    assert isinstance(engine.services.http, RecordedHttp)
    assert isinstance(engine.services.mailer, RecordedMailer)
    assert engine.services.http.recorder.instance_id == "i1"


@pytest.mark.parametrize(
    ("refusal", "answer", "status"),
    [
        (InstanceFinished("i1"), Conflict, 409),
        (NothingToRetry("i1"), Conflict, 409),
        (UnknownBookmark("i1", "b1"), NotFound, 404),
    ],
)
def test_the_engines_refusals_reach_callers_as_conflict_or_not_found(
    refusal: EngineError, answer: type[BrokerError], status: int
) -> None:
    # Given a step whose engine call refuses the instance's state
    def run(engine: Engine) -> None:
        raise refusal

    step = Step(target=cast(Target, None), run=run)
    # When the runtime runs it
    with pytest.raises(answer) as raised:
        _run_step(step, cast(Engine, None))
    # Then the caller gets the HTTP-facing error with the engine's message, and its cause chained
    assert raised.value.status == status
    assert raised.value.to_dict() == {"error": refusal.message, "code": answer.code}
    assert raised.value.__cause__ is refusal
