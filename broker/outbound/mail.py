"""E-mail delivery for the SendEmail activity, chosen by ``BROKER_SMTP_URL``: SMTP, a folder of
``.eml`` files, or the log."""

from __future__ import annotations

import email.errors
import email.utils
import hashlib
import logging
import os
import re
import smtplib
import ssl
import tempfile
from collections.abc import Callable
from email.message import EmailMessage as MimeMessage
from pathlib import Path
from typing import NoReturn
from urllib.parse import parse_qs, unquote, urlsplit

from broker.backends import BackendUrl, by_url
from broker.engine.run.ports import EmailMessage, Mailer
from broker.errors import ConfigError, RetryLater, WorkflowFault
from broker.settings import Settings

logger = logging.getLogger(__name__)

SMTP_TIMEOUT = 30.0
SMTP_PORTS = {"smtp": 25, "smtps": 465}
_TRUE = {"1", "true", "yes", "on"}


def build_message(message: EmailMessage, default_sender: str) -> MimeMessage:
    """The MIME message for ``message``; Bcc recipients are left out of the headers.

    Raises ``WorkflowFault`` when there is no recipient or a header value is malformed (a line
    break in a subject or address would otherwise let a workflow inject headers).
    """
    if not (message.to or message.cc or message.bcc):
        raise WorkflowFault("e-mail has no recipient", category="Email")
    sender = message.sender or default_sender
    mime = MimeMessage()
    try:
        mime["From"] = sender
        if message.to:
            mime["To"] = ", ".join(message.to)
        if message.cc:
            mime["Cc"] = ", ".join(message.cc)
        mime["Subject"] = message.subject
        mime["Date"] = email.utils.formatdate(localtime=False, usegmt=True)
        mime["Message-ID"] = message_id_header(message.message_id, sender)
        mime.set_content(message.body)
    except (ValueError, TypeError, email.errors.HeaderParseError) as exc:
        raise WorkflowFault(f"invalid e-mail: {exc}", category="Email") from exc
    return mime


def message_id_header(message_id: str | None, sender: str) -> str:
    """``<id@domain>`` from a bare id (the sender's domain completes it), or a fresh one."""
    domain = email.utils.parseaddr(sender)[1].rpartition("@")[2] or "broker.local"
    if not message_id:
        return email.utils.make_msgid(domain=domain)
    text = message_id.strip().strip("<>")
    return f"<{text}>" if "@" in text else f"<{text}@{domain}>"


def recipients(message: EmailMessage) -> list[str]:
    """Envelope recipients: To, Cc and Bcc, each once, in order."""
    return list(dict.fromkeys([*message.to, *message.cc, *message.bcc]))


class SmtpMailer:
    """Delivers through an SMTP server, one connection per message."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        default_sender: str,
        implicit_tls: bool = False,
        starttls: bool = False,
        username: str | None = None,
        password: str | None = None,
        timeout: float = SMTP_TIMEOUT,
    ) -> None:
        self.host = host
        self.port = port
        self.default_sender = default_sender
        self.implicit_tls = implicit_tls
        self.starttls = starttls
        self.username = username
        self.password = password
        self.timeout = timeout

    def send(self, message: EmailMessage) -> None:
        mime = build_message(message, self.default_sender)
        where = f"{self.host}:{self.port}"
        try:
            with self._connect() as smtp:
                if self.starttls:
                    smtp.starttls(context=ssl.create_default_context())
                if self.username:
                    smtp.login(self.username, self.password or "")
                refused = smtp.send_message(mime, to_addrs=recipients(message))
        except smtplib.SMTPAuthenticationError as exc:
            raise ConfigError(f"SMTP server {where} refused the login: {exc}") from exc
        except smtplib.SMTPNotSupportedError as exc:
            raise ConfigError(f"SMTP server {where} does not support {exc}") from exc
        except ssl.SSLCertVerificationError as exc:
            raise ConfigError(f"SMTP server {where} has an untrusted certificate: {exc}") from exc
        except smtplib.SMTPRecipientsRefused as exc:
            codes = [code for code, _text in exc.recipients.values()]
            _raise_for_codes(codes, f"SMTP server {where} refused every recipient", exc)
        except smtplib.SMTPConnectError as exc:
            raise RetryLater(f"SMTP server {where} refused the connection: {exc}") from exc
        except smtplib.SMTPResponseException as exc:
            _raise_for_codes([exc.smtp_code], f"SMTP server {where} answered", exc)
        except OSError as exc:  # sockets, timeouts, TLS and the rest of smtplib's errors
            raise RetryLater(f"SMTP server {where} is unreachable: {exc}") from exc
        if refused:
            logger.warning(
                "mail %s: SMTP server %s refused some recipients: %s",
                mime["Message-ID"],
                where,
                sorted(refused),
            )
        logger.info("mail %s sent through %s", mime["Message-ID"], where)

    def _connect(self) -> smtplib.SMTP:
        if self.implicit_tls:
            return smtplib.SMTP_SSL(
                self.host, self.port, timeout=self.timeout, context=ssl.create_default_context()
            )
        return smtplib.SMTP(self.host, self.port, timeout=self.timeout)


def _raise_for_codes(codes: list[int], what: str, exc: smtplib.SMTPException) -> NoReturn:
    """4xx (try again later) retries; any other answer faults the activity for good."""
    if any(400 <= code < 500 for code in codes):
        raise RetryLater(f"{what} {codes} (temporary): {exc}") from exc
    raise WorkflowFault(f"{what} {codes}: {exc}", category="Email") from exc


class FileMailer:
    """Writes each message to ``DIR/<message-id>.eml`` (development and tests)."""

    def __init__(self, directory: Path, *, default_sender: str) -> None:
        self.directory = directory
        self.default_sender = default_sender

    def path_for(self, message_id_value: str) -> Path:
        """The file of a Message-ID: readable, and distinct even when two ids sanitize alike."""
        text = message_id_value.strip("<>")
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:100]
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        return self.directory / f"{safe}-{digest}.eml"

    def send(self, message: EmailMessage) -> None:
        mime = build_message(message, self.default_sender)
        if message.bcc:
            mime["Bcc"] = ", ".join(message.bcc)  # kept in the copy so developers can see it
        path = self.path_for(str(mime["Message-ID"]))
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # Write then rename, so a reader never sees half a message and a retry replaces it.
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(mime.as_bytes())
            os.replace(tmp, path)
        except OSError as exc:
            raise RetryLater(f"cannot write mail to {self.directory}: {exc}") from exc
        logger.info("mail %s written to %s", mime["Message-ID"], path)


class ConsoleMailer:
    """Logs each message instead of sending it."""

    def __init__(self, *, default_sender: str) -> None:
        self.default_sender = default_sender

    def send(self, message: EmailMessage) -> None:
        mime = build_message(message, self.default_sender)
        logger.info(
            "mail %s to %s (not sent, console mailer):\n%s",
            mime["Message-ID"],
            ", ".join(recipients(message)),
            mime.as_string(),
        )


def _file_mailer(url: BackendUrl, settings: Settings) -> Mailer:
    return FileMailer(Path(url.folder("file://var/mail")), default_sender=settings.smtp_from)


def _console_mailer(url: BackendUrl, settings: Settings) -> Mailer:
    return ConsoleMailer(default_sender=settings.smtp_from)


def _smtp(url: BackendUrl, settings: Settings) -> Mailer:
    return _smtp_mailer(url.url, url.scheme, settings.smtp_from)


#: the mail backends by URL scheme
MAIL_BACKENDS: dict[str, Callable[[BackendUrl, Settings], Mailer]] = {
    "smtp": _smtp,
    "smtps": _smtp,
    "file": _file_mailer,
    "console": _console_mailer,
}


def make_mailer(settings: Settings) -> Mailer:
    """The mailer ``settings.smtp_url`` names; raises ``ConfigError`` for an unusable URL."""
    return by_url("BROKER_SMTP_URL", settings.smtp_url, MAIL_BACKENDS, settings)


def _smtp_mailer(url: str, scheme: str, sender: str) -> SmtpMailer:
    try:
        parts = urlsplit(url)
        port = parts.port or SMTP_PORTS[scheme]
    except ValueError as exc:
        raise ConfigError(f"BROKER_SMTP_URL is malformed: {exc}") from exc
    if not parts.hostname:
        raise ConfigError("BROKER_SMTP_URL names no host")
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = sorted(set(options) - {"starttls", "timeout"})
    if unknown:
        raise ConfigError(f"BROKER_SMTP_URL has unknown options {unknown} (starttls, timeout)")
    starttls = options.get("starttls", "false").lower() in _TRUE
    if starttls and scheme == "smtps":
        raise ConfigError("BROKER_SMTP_URL: starttls applies to smtp://, smtps:// is TLS already")
    try:
        timeout = float(options.get("timeout", SMTP_TIMEOUT))
    except ValueError as exc:
        raise ConfigError(f"BROKER_SMTP_URL timeout is not a number: {exc}") from exc
    return SmtpMailer(
        parts.hostname,
        port,
        default_sender=sender,
        implicit_tls=scheme == "smtps",
        starttls=starttls,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        timeout=timeout,
    )
