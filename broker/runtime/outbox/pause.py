"""The operator's pause: a RuntimeFlag row every process reads, and the per-process cache of it."""

from __future__ import annotations

import threading
import time

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from broker.store.models import RuntimeFlag, utcnow

#: the RuntimeFlag row that pauses new submissions
PAUSED_FLAG = "paused"
#: seconds a process trusts the paused flag it last read (``is_paused_cached``): a pause set by
#: another process reaches the ingress and the task doors within this delay
PAUSED_CACHE_TTL = 1.0


def paused_flag(session: Session) -> RuntimeFlag | None:
    """The pause flag's row (None: never set), for a view that shows when it last changed."""
    return session.get(RuntimeFlag, PAUSED_FLAG)


def is_paused(session: Session) -> bool:
    flag = paused_flag(session)
    return bool(flag is not None and flag.value)


#: database (engine URL) -> (monotonic time read, paused); see ``is_paused_cached``
_paused_cache: dict[str, tuple[float, bool]] = {}
_paused_cache_lock = threading.Lock()


def is_paused_cached(session: Session, *, ttl: float = PAUSED_CACHE_TTL) -> bool:
    """``is_paused``, read at most once per ``ttl`` seconds per process and database.

    The hot paths (every submission, every task door) ask this; a pause or resume made by another
    process is seen within ``ttl``, one made by this process (``set_paused``) at once.
    """
    key = _cache_key(session.get_bind())
    now = time.monotonic()
    known = _fresh(key, now, ttl)
    if known is not None:
        return known
    paused = is_paused(session)
    with _paused_cache_lock:
        _paused_cache[key] = (now, paused)
    return paused


def paused_if_known(
    factory: sessionmaker[Session], *, ttl: float = PAUSED_CACHE_TTL
) -> bool | None:
    """The cached paused flag of ``factory``'s database while it is fresh, else None (then ask
    ``is_paused_cached`` in a transaction): a fresh answer needs no connection at all."""
    bind = factory.kw.get("bind")
    if bind is None:
        return None
    return _fresh(_cache_key(bind), time.monotonic(), ttl)


def _fresh(key: str, now: float, ttl: float) -> bool | None:
    with _paused_cache_lock:
        cached = _paused_cache.get(key)
    if cached is not None and now - cached[0] < ttl:
        return cached[1]
    return None


def forget_paused() -> None:
    """Drop the cached paused flags (after a change, and for tests)."""
    with _paused_cache_lock:
        _paused_cache.clear()


def _cache_key(bind: Engine | Connection) -> str:
    return bind.engine.url.render_as_string(hide_password=True)


def set_paused(session: Session, paused: bool) -> RuntimeFlag:
    """Pause or resume new work (a RuntimeFlag row every process reads)."""
    flag = session.get(RuntimeFlag, PAUSED_FLAG)
    if flag is None:
        flag = RuntimeFlag(name=PAUSED_FLAG, value=paused)
        session.add(flag)
    elif flag.value != paused:
        # a second pause (or resume) changes nothing: the runtime stays paused since the first,
        # as Elsa's quiescence signal keeps its PausedAt
        flag.value = paused
        flag.updated_at = utcnow()
    session.flush()
    forget_paused()
    return flag
