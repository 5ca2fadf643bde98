"""The worker's engine takes its limits and modes from the settings."""

from __future__ import annotations

from broker.runtime.effects import RecordedHttp, RecordedMailer
from broker.runtime.process import Runtime
from broker.runtime.steps import build_engine
from broker.settings import Settings


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
