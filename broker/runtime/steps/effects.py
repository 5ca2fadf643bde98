"""Side effects that complete are recorded at once, so a step redone after a crash replays them."""

from __future__ import annotations

import base64
import logging
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from broker.engine.run.ports import EmailMessage, HttpClient, HttpRequest, HttpResponse, Mailer
from broker.store.db import transaction
from broker.store.models import StepResult

logger = logging.getLogger(__name__)

#: prefixes of the StepResult keys of recorded effects
HTTP_KEY = "effect:http:"
MAIL_KEY = "effect:mail:"
#: the longest key a StepResult holds
MAX_KEY = 200


class _Recorder:
    """Reads and writes the recorded outcomes of one instance's effects."""

    def __init__(self, factory: sessionmaker[Session], instance_id: str) -> None:
        self.factory = factory
        self.instance_id = instance_id

    def recorded(self, key: str) -> StepResult | None:
        with transaction(self.factory, write=False) as session:
            found = session.get(StepResult, (self.instance_id, key))
            if found is not None:
                session.expunge(found)
            return found

    def record(self, key: str, output: Any) -> None:
        try:
            with transaction(self.factory) as session:
                session.add(StepResult(instance_id=self.instance_id, step_key=key, output=output))
        except IntegrityError:
            # A concurrent run of the same step recorded it first: the effect happened either way.
            logger.info("effect %s of instance %s was already recorded", key, self.instance_id)


def _key(prefix: str, identity: str | None) -> str | None:
    if not identity:
        return None
    key = prefix + identity
    return key if len(key) <= MAX_KEY else None


class RecordedHttp:
    """An ``HttpClient`` that answers a recorded response for a call made before."""

    def __init__(self, inner: HttpClient, factory: sessionmaker[Session], instance_id: str) -> None:
        self.inner = inner
        self.recorder = _Recorder(factory, instance_id)

    def send(self, request: HttpRequest) -> HttpResponse:
        identity = request.idempotency_key
        if identity and request.attempt:  # a resilience retry is a call of its own
            identity = f"{identity}#{request.attempt}"
        key = _key(HTTP_KEY, identity)
        if key is None:
            return self.inner.send(request)
        found = self.recorder.recorded(key)
        if found is not None and isinstance(found.output, dict):
            logger.info(
                "HTTP %s %s was made before (key %s); its recorded response is used",
                request.method,
                request.url,
                request.idempotency_key,
                extra={"instance_id": self.recorder.instance_id},
            )
            return _response_from(found.output)
        response = self.inner.send(request)
        self.recorder.record(key, _response_to(response))
        return response


class RecordedMailer:
    """A ``Mailer`` that does not send a message it sent before (same message id)."""

    def __init__(self, inner: Mailer, factory: sessionmaker[Session], instance_id: str) -> None:
        self.inner = inner
        self.recorder = _Recorder(factory, instance_id)

    def send(self, message: EmailMessage) -> None:
        key = _key(MAIL_KEY, message.message_id)
        if key is None:
            self.inner.send(message)
            return
        if self.recorder.recorded(key) is not None:
            logger.info(
                "e-mail %s was sent before; not sent again",
                message.message_id,
                extra={"instance_id": self.recorder.instance_id},
            )
            return
        self.inner.send(message)
        self.recorder.record(key, {"to": list(message.to), "subject": message.subject})


def _response_to(response: HttpResponse) -> dict[str, Any]:
    return {
        "statusCode": response.status_code,
        "headers": dict(response.headers),
        "body": base64.b64encode(response.body).decode("ascii"),
        "content": response.content,
    }


def _response_from(stored: dict[str, Any]) -> HttpResponse:
    return HttpResponse(
        status_code=int(stored["statusCode"]),
        headers=dict(stored.get("headers") or {}),
        body=base64.b64decode(stored.get("body") or ""),
        content=stored.get("content"),
    )
