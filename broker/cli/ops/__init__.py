"""Operator commands over the public API (``broker requests``, ``dead-letters``, ``instances``,
``runtime``) and ``broker outbox``, which reads the database (docs/design.md, section 1)."""

from broker.cli.ops.dead_letters import dead_letters
from broker.cli.ops.instances import instances
from broker.cli.ops.outbox import outbox
from broker.cli.ops.requests import requests
from broker.cli.ops.runtime import runtime

__all__ = ["dead_letters", "instances", "outbox", "requests", "runtime"]
