"""Operator commands over the public API: ``broker requests``, ``dead-letters``, ``instances``,
``runtime``; and ``broker outbox``, which reads the database directly.

API commands present a client certificate. Without options they use the profile ``broker run``
wrote (``broker.cli.profile``: ``var/cli-profile.json``, ``BROKER_PROFILE`` or ``--profile``), else
the development defaults: ``--url https://localhost:<port of BROKER_PUBLIC_BIND>``,
``--cert DevClient.pem``, ``--key-file DevClient.key`` (next to the certificate) and
``--ca ca.pem``, all in the folder of BROKER_TLS_CLIENT_CA (``var/certs``). ``--key`` is taken
by request keys (``--key K=V``), so the private key is ``--key-file``; it defaults to the ``.key``
file beside ``--cert``.

Exit codes scripts can rely on: 0 success, 1 the API or the operation failed, 2 bad usage,
3 not found, 4 ``requests watch`` timed out. ``--json`` prints machine-readable output on stdout
and errors as the server's JSON body on stderr.

One module per command group; the shared plumbing is in ``connection`` (options, client, errors)
and ``output`` (JSON, tables, fields).
"""

from broker.cli.ops.dead_letters import dead_letters
from broker.cli.ops.instances import instances
from broker.cli.ops.outbox import outbox
from broker.cli.ops.requests import requests
from broker.cli.ops.runtime import runtime

__all__ = ["dead_letters", "instances", "outbox", "requests", "runtime"]
