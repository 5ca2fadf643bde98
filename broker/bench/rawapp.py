"""The raw Celery worker's app: ``celery -A broker.bench.rawapp worker`` (started by the harness).

It reads the same settings as the broker's worker, so it runs on the same transport with the
same worker options; see ``raw_celery.create_raw_app``.
"""

from broker.bench.raw_celery import create_raw_app
from broker.settings import get_settings

app = create_raw_app(get_settings())

__all__ = ["app"]
