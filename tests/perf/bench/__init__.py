"""The benchmark (``make bench``, ``python -m tests.perf.bench``): the product measured end to end,
side by side with a raw Celery task.

``harness`` starts and stops a private stack on loopback, ``ingress``/``e2e`` drive the broker over
its HTTPS API, ``raw_celery`` drives a no-op Celery task on the same transport and worker settings,
``engine`` times the interpreter in process, ``report`` turns the figures into a table, JSON and
the last line, and ``commands`` the click commands. It lives in the tests, outside the installed
package and its ``broker`` command.
"""

from __future__ import annotations

from pathlib import Path

from broker.errors import ConfigError

#: the benchmark's own workflow, beside this module (it is not product configuration)
WORKFLOW = Path(__file__).resolve().parent / "bench-five-steps.json"
#: files the benchmark needs from the checkout (the gunicorn configs)
_MARKERS = (Path("config") / "gunicorn.conf.py", Path("tests") / "perf" / "bench")


def project_root() -> Path:
    """The checkout the benchmark runs from (it starts gunicorn with the checkout's configs)."""
    for candidate in (Path(__file__).resolve().parents[3], Path.cwd()):
        if all((candidate / marker).exists() for marker in _MARKERS):
            return candidate
    raise ConfigError(
        "the benchmark runs from the project's checkout: config/gunicorn.conf.py and "
        "tests/perf/bench were not found"
    )
