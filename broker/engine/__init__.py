"""The Elsa 3 interpreter, pure: ``model`` (definitions), ``expr`` (expressions), ``run`` (the
loop and its state), ``activities`` (and their catalog); ``api`` and ``testing`` on top."""

from broker.engine.api import Engine, EngineServices

__all__ = ["Engine", "EngineServices"]
