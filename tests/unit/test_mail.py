"""E-mail delivery: the file sink, the console, and a real SMTP round trip.

The SMTP tests talk to a small SMTP server started on 127.0.0.1 in a thread; it speaks just
enough of RFC 5321 (EHLO, AUTH PLAIN, MAIL, RCPT, DATA, QUIT) for smtplib, and can be told to
answer RCPT with a given code.
"""

from __future__ import annotations

import base64
import email
import email.policy
import logging
import socket
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.engine.run.ports import EmailMessage
from broker.errors import ConfigError, RetryLater, WorkflowFault
from broker.outbound.mail import (
    ConsoleMailer,
    FileMailer,
    SmtpMailer,
    make_mailer,
    message_id_header,
)
from broker.settings import Settings


class SmtpSink(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), SmtpHandler)
        self.received: list[dict[str, Any]] = []
        self.rcpt_reply = "250 OK"
        self.logins: list[str] = []


class SmtpHandler(socketserver.StreamRequestHandler):
    server: SmtpSink

    def reply(self, line: str) -> None:
        self.wfile.write(line.encode() + b"\r\n")

    def handle(self) -> None:
        envelope: dict[str, Any] = {"rcpt": []}
        self.reply("220 sink ESMTP")
        while line := self.rfile.readline():
            command = line.decode().rstrip("\r\n")
            verb = command.split(" ", 1)[0].upper()
            if verb == "EHLO":
                self.reply("250-sink")
                self.reply("250 AUTH PLAIN")
            elif verb == "AUTH":
                _, _, credentials = base64.b64decode(command.split()[2]).partition(b"\0")
                self.server.logins.append(credentials.decode())
                self.reply("235 accepted")
            elif verb == "MAIL":
                envelope["from"] = command[10:]
                self.reply("250 OK")
            elif verb == "RCPT":
                envelope["rcpt"].append(command[8:])
                self.reply(self.server.rcpt_reply)
            elif verb == "DATA":
                self.reply("354 go on")
                lines = []
                while (data := self.rfile.readline()) not in (b".\r\n", b""):
                    lines.append(data)
                envelope["data"] = b"".join(lines)
                self.server.received.append(envelope)
                envelope = {"rcpt": []}
                self.reply("250 queued")
            elif verb == "QUIT":
                self.reply("221 bye")
                return
            else:
                self.reply("250 OK")


@pytest.fixture
def smtp_sink() -> Iterator[SmtpSink]:
    server = SmtpSink()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def smtp_url(server: SmtpSink, credentials: str = "") -> str:
    return f"smtp://{credentials}127.0.0.1:{server.server_address[1]}?timeout=5"


MESSAGE = EmailMessage(
    to=("ann@example.com",),
    cc=("bob@example.com",),
    bcc=("audit@example.com",),
    subject="Invoice INV-1 approved",
    body="Hello Ann,\nthe invoice is approved.\n",
    message_id="instance-1.activity-2",
)


# SMTP ---------------------------------------------------------------------------------------------


def test_smtp_round_trip_delivers_to_every_recipient(
    settings: Settings, smtp_sink: SmtpSink
) -> None:
    # Given a mailer pointed at the local SMTP sink
    mailer = make_mailer(
        settings.replace(smtp_url=smtp_url(smtp_sink), smtp_from="Broker <broker@example.org>")
    )
    # When a message with To, Cc and Bcc is sent
    mailer.send(MESSAGE)
    # Then one transaction carried all three recipients, and Bcc stayed out of the headers
    [envelope] = smtp_sink.received
    assert envelope["from"] == "<broker@example.org>"
    assert envelope["rcpt"] == ["<ann@example.com>", "<bob@example.com>", "<audit@example.com>"]
    parsed = email.message_from_bytes(envelope["data"], policy=email.policy.default)
    assert parsed["Subject"] == "Invoice INV-1 approved"
    assert parsed["Message-ID"] == "<instance-1.activity-2@example.org>"
    assert parsed["Bcc"] is None
    assert "the invoice is approved." in parsed.get_content()


def test_smtp_credentials_from_the_url_are_used(settings: Settings, smtp_sink: SmtpSink) -> None:
    mailer = make_mailer(settings.replace(smtp_url=smtp_url(smtp_sink, "mailer:p%40ss@")))
    mailer.send(MESSAGE)
    assert smtp_sink.logins == ["mailer\0p@ss"]


def test_temporary_recipient_refusal_raises_retry_later(
    settings: Settings, smtp_sink: SmtpSink
) -> None:
    smtp_sink.rcpt_reply = "451 try again later"
    mailer = make_mailer(settings.replace(smtp_url=smtp_url(smtp_sink)))
    with pytest.raises(RetryLater, match="451"):
        mailer.send(MESSAGE)


def test_permanent_recipient_refusal_faults(settings: Settings, smtp_sink: SmtpSink) -> None:
    smtp_sink.rcpt_reply = "550 no such user"
    mailer = make_mailer(settings.replace(smtp_url=smtp_url(smtp_sink)))
    with pytest.raises(WorkflowFault, match="550"):
        mailer.send(MESSAGE)


def test_unreachable_smtp_server_raises_retry_later(settings: Settings) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound but not listening: the connection is refused
        port = sock.getsockname()[1]
        mailer = SmtpMailer("127.0.0.1", port, default_sender="b@example.org", timeout=5)
        with pytest.raises(RetryLater, match="unreachable"):
            mailer.send(MESSAGE)


# File sink ----------------------------------------------------------------------------------------


def test_file_sink_writes_one_eml_per_message_id(settings: Settings, tmp_path: Path) -> None:
    # Given a file mailer
    mailer = make_mailer(settings.replace(smtp_url=f"file://{tmp_path / 'mail'}"))
    # When the same message is sent twice (a retry) and another one once
    mailer.send(MESSAGE)
    mailer.send(MESSAGE)
    mailer.send(EmailMessage(to=("c@example.com",), subject="other", body="x", message_id="m-2"))
    # Then there are two files, and the retried one holds the whole message, Bcc included
    files = sorted((tmp_path / "mail").iterdir())
    assert len(files) == 2
    first = next(f for f in files if f.name.startswith("instance-1.activity-2"))
    parsed = email.message_from_bytes(first.read_bytes(), policy=email.policy.default)
    assert parsed["To"] == "ann@example.com"
    assert parsed["Bcc"] == "audit@example.com"


def test_messages_without_id_get_distinct_files(settings: Settings, tmp_path: Path) -> None:
    mailer = FileMailer(tmp_path, default_sender="b@example.org")
    message = EmailMessage(to=("c@example.com",), subject="s", body="b")
    mailer.send(message)
    mailer.send(message)
    assert len(list(tmp_path.glob("*.eml"))) == 2


def test_relative_file_folder_is_relative_to_the_working_directory(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    make_mailer(settings.replace(smtp_url="file://var/mail")).send(MESSAGE)
    assert len(list((tmp_path / "var" / "mail").glob("*.eml"))) == 1


def test_ids_that_sanitize_alike_do_not_share_a_file(tmp_path: Path) -> None:
    mailer = FileMailer(tmp_path, default_sender="b@example.org")
    assert mailer.path_for("<a/b@x>") != mailer.path_for("<a_b@x>")


# Console and validation -------------------------------------------------------------------------


def test_console_mailer_logs_the_message(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="broker.outbound.mail"):
        ConsoleMailer(default_sender="b@example.org").send(MESSAGE)
    assert "Invoice INV-1 approved" in caplog.text
    assert "audit@example.com" in caplog.text


def test_header_injection_in_the_subject_faults(tmp_path: Path) -> None:
    mailer = FileMailer(tmp_path, default_sender="b@example.org")
    evil = EmailMessage(to=("a@example.com",), subject="hi\r\nBcc: victim@example.com", body="")
    with pytest.raises(WorkflowFault, match="invalid e-mail"):
        mailer.send(evil)
    assert list(tmp_path.iterdir()) == []


def test_message_without_recipients_faults(tmp_path: Path) -> None:
    with pytest.raises(WorkflowFault, match="no recipient"):
        FileMailer(tmp_path, default_sender="b@example.org").send(
            EmailMessage(to=(), subject="s", body="b")
        )


def test_message_ids_are_completed_with_the_sender_domain() -> None:
    assert message_id_header("abc", "x@example.org") == "<abc@example.org>"
    assert message_id_header("<abc@host>", "x@example.org") == "<abc@host>"
    assert message_id_header(None, "x@example.org").endswith("@example.org>")


@pytest.mark.parametrize(
    "url",
    [
        "gopher://mail",
        "smtp://",
        "smtp://host?tls=1",
        "smtps://host?starttls=true",
        "file://",
        "smtp://host?timeout=soon",
    ],
)
def test_unusable_smtp_urls_are_refused(settings: Settings, url: str) -> None:
    with pytest.raises(ConfigError):
        make_mailer(settings.replace(smtp_url=url))


def test_smtp_url_options_are_read(settings: Settings) -> None:
    mailer = make_mailer(settings.replace(smtp_url="smtp://u:p@mail.example.org:587?starttls=1"))
    assert isinstance(mailer, SmtpMailer)
    assert (mailer.host, mailer.port, mailer.starttls, mailer.username, mailer.password) == (
        "mail.example.org",
        587,
        True,
        "u",
        "p",
    )
    secure = make_mailer(settings.replace(smtp_url="smtps://mail.example.org"))
    assert isinstance(secure, SmtpMailer)
    assert (secure.port, secure.implicit_tls) == (465, True)
