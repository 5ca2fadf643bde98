"""``broker bench``: the product measured end to end, side by side with a raw Celery task.

``harness`` starts and stops a private stack on loopback, ``ingress``/``e2e`` drive the broker over
its HTTPS API, ``raw_celery`` drives a no-op Celery task on the same transport and worker settings,
``engine`` times the interpreter in process, ``report`` turns the figures into a table, JSON and
the last line, and ``commands`` is the click door. Nothing here is imported by the product.
"""

from __future__ import annotations

from pathlib import Path

from broker.errors import ConfigError

#: files the benchmark needs from the checkout (gunicorn configs, the shipped bench workflow)
_MARKERS = (Path("config") / "gunicorn.conf.py", Path("workflows") / "bench-five-steps.json")


def project_root() -> Path:
    """The checkout the benchmark runs from (it starts gunicorn with the checkout's configs)."""
    for candidate in (Path(__file__).resolve().parents[2], Path.cwd()):
        if all((candidate / marker).exists() for marker in _MARKERS):
            return candidate
    raise ConfigError(
        "the benchmark runs from the project's checkout: config/gunicorn.conf.py and "
        "workflows/bench-five-steps.json were not found"
    )
