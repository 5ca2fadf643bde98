"""A harness for workflow authors' tests: run a workflow file in-process, deliver events, fire
timers at once, answer HTTP calls and Celery tasks from tables, and assert what came of it."""

from broker.engine.model.resilience import parse_strategies
from broker.engine.testing.fakes import HttpAnswer, HttpTable, MailOutbox, MemoryFiles
from broker.engine.testing.harness import WorkflowRun, WorkflowTest
from broker.engine.testing.loading import load_definition

__all__ = [
    "HttpAnswer",
    "HttpTable",
    "MailOutbox",
    "MemoryFiles",
    "WorkflowRun",
    "WorkflowTest",
    "load_definition",
    "parse_strategies",
]
