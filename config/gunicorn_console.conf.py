"""gunicorn settings of the console listener, for operators who point gunicorn at this file.

The settings ship inside the package, which works from any folder:

    gunicorn -c python:broker.serving.console

This file only loads them; GUNICORN_CMD_ARGS and the command line override them as before.
"""

from broker.serving.console import *  # noqa: F403
