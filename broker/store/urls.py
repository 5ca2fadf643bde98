"""Database URLs as the broker reads them: plain PostgreSQL URLs go to psycopg 3, and a URL that
names several servers (libpq's or SQLAlchemy's form) always reaches the one that takes writes."""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url

__all__ = ["MULTI_HOST_TARGET", "libpq_url", "normalize_url"]


#: where libpq connects when a URL names several hosts: to the one that takes writes, so a
#: promoted standby becomes the server the broker writes to (docs/design.md, section 8)
MULTI_HOST_TARGET = ("target_session_attrs", "read-write")


def normalize_url(url: str) -> URL:
    """The SQLAlchemy URL to connect with; plain PostgreSQL URLs are routed to psycopg 3.

    A PostgreSQL URL may name several servers, as libpq reads it
    (``postgresql://u@h1:5432,h2:5432/db``) or as SQLAlchemy does
    (``postgresql+psycopg://u@/db?host=h1:5432&host=h2:5432``); either becomes SQLAlchemy's
    form, with ``target_session_attrs=read-write`` unless the URL chose otherwise, so a
    connection always reaches the current primary and never a read-only standby.
    """
    text = url.strip()
    for prefix in ("postgresql://", "postgres://"):
        if text.startswith(prefix):
            text = "postgresql+psycopg://" + text[len(prefix) :]
            break
    hosts = _libpq_hosts(text)
    if hosts is not None:
        text = _without_hosts(text)
    parsed = make_url(text)
    if hosts is not None:
        parsed = parsed.update_query_pairs([("host", host) for host in hosts], append=True)
    if parsed.get_backend_name() == "postgresql" and _is_multi_host(parsed):
        key, value = MULTI_HOST_TARGET
        if key not in parsed.query:
            parsed = parsed.update_query_dict({key: value})
    return parsed


def libpq_url(url: str) -> str:
    """``url`` as libpq (psycopg.connect) takes it: the scheme without a driver name, and when
    it names several servers, them as ``h1:p1,h2:p2`` in the netloc with
    ``target_session_attrs`` as ``normalize_url`` adds it; any other URL is left as it is."""
    scheme, sep, rest = url.strip().partition("://")
    parsed = normalize_url(url).set(drivername="postgresql")
    hosts = parsed.query.get("host")
    if not _is_multi_host(parsed) or not isinstance(hosts, tuple):
        return f"{scheme.lower().split('+', 1)[0]}{sep}{rest}"
    rendered = parsed.difference_update_query(["host"]).render_as_string(hide_password=False)
    scheme, _, rest = rendered.partition("://")
    userinfo, at, path = rest.rpartition("@") if "@" in rest.split("/", 1)[0] else ("", "", rest)
    return f"{scheme}://{userinfo}{at}{','.join(hosts)}{path}"


def _libpq_hosts(url: str) -> list[str] | None:
    """The servers of a URL whose netloc names several (libpq's ``h1:p1,h2:p2``), else None."""
    _, sep, rest = url.partition("://")
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    hostlist = netloc.rpartition("@")[2]
    if not sep or "," not in hostlist:
        return None
    return [host for host in hostlist.split(",") if host]


def _without_hosts(url: str) -> str:
    """``url`` with its netloc's servers left out (user and password kept)."""
    scheme, _, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    if not slash:  # no database path: the query follows the servers
        netloc, mark, query = rest.partition("?")
        tail = f"?{query}" if mark else ""
    userinfo, at, _ = netloc.rpartition("@")
    return f"{scheme}://{userinfo}{at}/{tail}"


def _is_multi_host(url: URL) -> bool:
    host = url.query.get("host")
    return (isinstance(host, tuple) and len(host) > 1) or (isinstance(host, str) and "," in host)
