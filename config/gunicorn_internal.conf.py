"""gunicorn settings of the internal listener, for operators who point gunicorn at this file.

The settings ship inside the package, which works from any folder:

    gunicorn -c python:broker.serving.internal

This file only loads them; GUNICORN_CMD_ARGS and the command line override them as before.
"""

from broker.serving.internal import *  # noqa: F403
