"""Running workflow instances: the entry points, one fenced engine step, heartbeats, the step
ceiling, poison work, recorded effects, RunTask and remote execution."""

__all__ = [
    "callbacks",
    "ceiling",
    "effects",
    "heartbeat",
    "outside",
    "poison",
    "remote",
    "runner",
    "step",
    "usertasks",
]
