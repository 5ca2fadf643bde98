"""The Flask plumbing the ingress and the console both stand on: the request's shared parts and
transaction (``context``), bounded body reading (``inputs``) and the lazily built app (``lazy``).
It imports neither of them; they never import each other."""

__all__ = ["context", "inputs", "lazy"]
