"""gunicorn settings of the three listeners, inside the package so they work from any folder
(``gunicorn -c python:broker.serving.public``, ``.internal``, ``.console``), and the workers'
metrics port."""

__all__ = ["common", "console", "internal", "metrics_port", "public"]
