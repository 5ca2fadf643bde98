"""gunicorn settings of the public listener (mutual TLS), for operators who point gunicorn at this file.

The settings ship inside the package, which works from any folder:

    gunicorn -c python:broker.serving.public

This file only loads them; GUNICORN_CMD_ARGS and the command line override them as before.
"""

from broker.serving.public import *  # noqa: F403
