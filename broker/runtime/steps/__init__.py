"""Running workflow instances: the entry points, one fenced engine step, heartbeats, the step
ceiling, recorded effects, RunTask and remote execution."""

__all__ = [
    "callbacks",
    "ceiling",
    "effects",
    "heartbeat",
    "remote",
    "runner",
    "step",
    "usertasks",
]
