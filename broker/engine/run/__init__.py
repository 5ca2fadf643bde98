"""One run of the interpreter: the state document, what an activity sees, the loop, and what a
run returns."""

from broker.engine.run.activity_context import ActivityContext, Behaviour
from broker.engine.run.interpreter import Run
from broker.engine.run.ports import EngineServices
from broker.engine.run.results import RunResult

__all__ = ["ActivityContext", "Behaviour", "EngineServices", "Run", "RunResult"]
