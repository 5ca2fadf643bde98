"""The HTTP family: the request entry and its responses (``endpoint``), outbound calls
(``outbound``), files in and out (``files``) and incoming webhook events (``webhooks``)."""

__all__ = ["endpoint", "files", "outbound", "webhooks"]
