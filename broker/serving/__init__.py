"""gunicorn settings of the three listeners, shipped inside the package so that they work from any
folder: ``gunicorn -c python:broker.serving.public broker.ingress.wsgi:public`` (also
``.internal`` and ``.console``). ``config/gunicorn*.conf.py`` import them, for operators who point
gunicorn at those files.
"""
