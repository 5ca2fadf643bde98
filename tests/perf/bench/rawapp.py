"""The raw Celery worker's app: ``celery -A tests.perf.bench.rawapp worker`` (the harness runs it).

It reads the same settings as the broker's worker, so it runs on the same transport with the
same worker options; see ``raw_celery.create_raw_app``.
"""

from broker.settings import get_settings
from tests.perf.bench.raw_celery import create_raw_app

app = create_raw_app(get_settings())

__all__ = ["app"]
