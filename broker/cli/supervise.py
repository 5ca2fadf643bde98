"""``broker run``: every role of the product in one foreground command (the embedded default)."""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import click

from broker.settings import Settings, get_settings

logger = logging.getLogger(__name__)

DEV_CLIENT = "DevClient"
DEV_CONSOLE_KEY = "dev"
DEV_CONSOLE_KEY_FILE = "console-dev-key"
STOP_GRACE_SECONDS = 20.0
PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Role:
    """One child process: its name and command line."""

    name: str
    argv: tuple[str, ...]


def roles(settings: Settings) -> list[Role]:
    """The command lines of the five roles, the same ones the README gives for production.

    The gunicorn settings are modules of the package (``python:broker.serving...``), so this
    works from any folder. Celery runs ``--quiet``: its banners are text, not log lines."""
    py = sys.executable

    def gunicorn(settings_module: str, app: str) -> tuple[str, ...]:
        # Access lines too: in development they show what each call did.
        config = f"python:broker.serving.{settings_module}"
        return (py, "-m", "gunicorn", "-c", config, "--access-logfile", "-", app)

    celery = (py, "-m", "celery", "-A", "tasks", "--quiet")
    return [
        Role("ingress", gunicorn("public", "broker.serving.wsgi:public")),
        Role("internal", gunicorn("internal", "broker.serving.wsgi:internal")),
        Role("console", gunicorn("console", "broker.serving.wsgi:console")),
        Role(
            "worker",
            (
                *celery,
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                str(settings.worker_concurrency),
                "-E",
            ),
        ),
        Role("beat", (*celery, "beat", "--loglevel", "INFO")),
    ]


def prepare(settings: Settings) -> None:
    """Everything a first run needs; each step is idempotent and fast when already done."""
    from broker.store import db

    settings.var_path.mkdir(parents=True, exist_ok=True)
    db.upgrade(settings.database_url)
    settings.resolved_callback_secret()
    settings.resolved_console_secret()
    _ensure_dev_certificates(settings)
    from broker.wiring import cli as cli_wiring

    registry = cli_wiring.workflow_registry(settings)
    for problem in registry.problems:
        click.echo(f"workflow problem: {problem.file}: {problem.reason}", err=True)


def _ensure_dev_certificates(settings: Settings) -> None:
    """In the broker's own development folder: create the CA, the server certificate and the
    DevClient (with every admin scope) where missing, and register DevClient. On an operator's
    PKI: check the files and create and register nothing."""
    from broker.clients import certificates as certs
    from broker.clients.scopes import ADMIN_SCOPES

    folder = certs.development_folder(settings)
    if folder is None:
        certs.check_pki(settings)
        logger.info("TLS from the operator's files; no development certificate or client")
        return
    if not Path(settings.tls_client_ca).exists():
        certs.init_ca(folder)
    if not (Path(settings.tls_cert).exists() and Path(settings.tls_key).exists()):
        certs.issue_server(folder, "localhost")
    if not (folder / f"{DEV_CLIENT}.pem").exists():
        certs.issue_client(folder, DEV_CLIENT)
    from broker.wiring import cli as cli_wiring

    certs.register_dev_client(
        cli_wiring.client_registry(settings),
        folder / f"{DEV_CLIENT}.pem",
        DEV_CLIENT,
        scopes=ADMIN_SCOPES,
    )
    certs.check_pki(settings)


def ensure_dev_console_key(settings: Settings) -> str:
    """The development console key (operator): kept in ``var/console-dev-key`` only, created on
    the first run and again whenever its row is gone (a new database, a revoked key)."""
    from broker.safety.private_files import read_private, write_private
    from broker.store import credentials, db, operator_actions

    path = settings.var_path / DEV_CONSOLE_KEY_FILE
    from broker.wiring import cli as cli_wiring

    factory = cli_wiring.session_factory(settings.database_url)
    with db.transaction(factory) as session:
        if path.exists() or path.is_symlink():
            # A link, or a file others may write, is refused (ConfigError), never trusted.
            key = read_private(path, "the development console key").strip()
            if credentials.find_key(session, key) is not None:
                return key
        if credentials.find(session, credentials.KEY, DEV_CONSOLE_KEY) is not None:
            credentials.remove(session, credentials.KEY, DEV_CONSOLE_KEY)
        key = credentials.create_key(session, DEV_CONSOLE_KEY, "operator")
        operator_actions.record(
            session,
            actor=operator_actions.cli_actor("broker run"),
            action="key.create",
            target=DEV_CONSOLE_KEY,
            summary={"role": "operator", "purpose": "development console key"},
        )
    write_private(path, key + "\n")
    return key


def console_url(settings: Settings) -> str:
    scheme = "https" if settings.console_tls_cert else "http"
    host, port = settings.console_bind.rsplit(":", 1)
    host = "127.0.0.1" if host in ("0.0.0.0", "") else host  # noqa: S104 - display only
    return f"{scheme}://{host}:{port}"


def write_profile(settings: Settings, console_key: str) -> Path | None:
    """Write the client settings of this run where ``broker`` finds them (``BROKER_PROFILE``,
    else ``var/cli-profile.json``): the public URL, DevClient's certificate and key, the CA, the
    console's URL and development key, and the ``BROKER_*`` keys this run was given (no secret).
    On an operator's PKI there is no client certificate of ours to name: nothing is written."""
    from broker.cli import profile
    from broker.cli.apiclient import default_endpoint
    from broker.clients import certificates as certs
    from broker.settings import given_keys

    if certs.development_folder(settings) is None:
        return None
    endpoint = default_endpoint(settings)
    absolute = {
        name: str(Path(value).absolute())
        for name, value in given_keys().items()
        if name.endswith(("_FILE", "_DIR", "_CERT", "_KEY", "_CA", "_PATHS"))
        and value
        and ":" not in value
    }
    return profile.write(
        profile.Profile(
            url=endpoint.url,
            cert=str(Path(endpoint.cert).absolute()),
            key=str(Path(endpoint.key).absolute()),
            ca=str(Path(endpoint.ca).absolute()),
            console_url=console_url(settings),
            console_key=console_key,
            settings=profile.shareable({**given_keys(), **absolute}),
        ),
        profile.default_path(settings),
    )


def console_text(settings: Settings) -> str:
    """Where the console is, and where its development key is kept: never the key itself (a
    terminal's scrollback, a CI log or a screen share would hold an operator's credential)."""
    from broker.console import assets

    key_file = settings.var_path / DEV_CONSOLE_KEY_FILE
    lines = [
        f"Console (Elsa Studio): {console_url(settings)}/sign-in",
        f"  sign in with the development key (operator) kept in {key_file}",
    ]
    if not assets.installed(settings, assets.STUDIO):
        lines.append(f"  {assets.INSTALL_HINT}")
    return "\n".join(lines)


def quick_start_text(settings: Settings) -> str:
    """Ready-to-paste commands: submit the shipped invoice example, poll it, approve it (on an
    operator's PKI: how to allowlist a client, as there is no DevClient)."""
    from broker.clients import certificates as certs

    folder = certs.development_folder(settings)
    if folder is None:
        return "\n".join(
            [
                "",
                "The broker is starting on your certificates "
                f"(client CA {settings.tls_client_ca}).",
                "Allowlist a client: `broker certs thumbprint CLIENT.pem` into "
                f"{settings.clients_file}.",
                f"Health: curl -s http://{settings.internal_bind}/healthz",
                "Stop everything with Ctrl-C.",
                "",
            ]
        )
    port = settings.public_bind.rsplit(":", 1)[1]
    tls = (
        f"--cacert {folder}/ca.pem --cert {folder}/{DEV_CLIENT}.pem --key {folder}/{DEV_CLIENT}.key"
    )
    base = f"https://localhost:{port}"
    body = (
        '{"requestType": "InvoiceProcess", "keys": {"InvoiceNumber": "INV-1", '
        '"VendorCode": "V-9"}, "payload": {"amount": 5000}}'
    )
    approve = '{"correlationId": "\'$ID\'", "payload": {"decision": "approved"}}'
    return "\n".join(
        [
            "",
            "The broker is starting. Try it from another terminal (in this folder):",
            f"  ID=$(curl -s {tls} -H 'Content-Type: application/json' \\",
            f"       -d '{body}' {base}/requests \\",
            "       | python3 -c 'import json,sys; "
            'print(json.load(sys.stdin)["correlationId"])\')',
            f"  curl -s {tls} {base}/requests/$ID        # Processing, subStatus Suspended",
            f"  curl -s {tls} -H 'Content-Type: application/json' \\",
            f"       -d '{approve}' {base}/events/approval",
            f"  curl -s {tls} {base}/requests/$ID        # Completed, decision approved",
            "Or with the broker command, in any shell in this folder (no exports needed):",
            "  ID=$(broker requests submit InvoiceProcess -k InvoiceNumber=INV-2 "
            "-k VendorCode=V-9 --payload '{\"amount\": 5000}')",
            "  broker requests get $ID",
            f"Health: curl -s http://{settings.internal_bind}/healthz",
            "Stop everything with Ctrl-C.",
            "",
        ]
    )


class Supervisor:
    """Starts child processes, forwards stop signals, and stops all when one dies."""

    def __init__(self, roles: Sequence[Role]) -> None:
        self.roles = list(roles)
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.stopping = False

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if not self.stopping:
            click.echo(f"\n{signal.Signals(signum).name}: stopping every role...", err=True)
        self.stopping = True

    def run(self) -> int:
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        _become_subreaper()
        code = 0
        try:
            for role in self.roles:
                # Each role leads its own process group, so stopping it also reaches its
                # grandchildren (gunicorn workers, the Celery pool) even if the leader dies first.
                self.children[role.name] = subprocess.Popen(role.argv, start_new_session=True)
                logger.info("started %s (pid %d)", role.name, self.children[role.name].pid)
            while not self.stopping:
                for name, child in self.children.items():
                    if child.poll() is not None:
                        click.echo(
                            f"{name} exited with code {child.returncode}; stopping the others",
                            err=True,
                        )
                        code = child.returncode or 1
                        self.stopping = True
                        break
                time.sleep(0.2)
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return code

    def stop(self) -> None:
        """SIGTERM every role, wait for the grace period, then SIGKILL whatever is left of their
        process groups."""
        for child in self.children.values():
            # The leader only: gunicorn and Celery stop their own workers and pool gracefully;
            # signalling the pool directly would turn a warm shutdown into a stuck one.
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for name, child in self.children.items():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("%s did not stop in time; killing pid %d", name, child.pid)
        # Leaders that exited may leave group members behind; none may survive us. As the
        # subreaper, orphans become our children, so they can be reaped here too.
        cutoff = time.monotonic() + 5
        while time.monotonic() < cutoff:
            alive = [c for c in self.children.values() if _signal_group(c.pid, signal.SIGKILL)]
            _reap_orphans()
            if not alive:
                break
            time.sleep(0.05)
        for child in self.children.values():
            if child.poll() is None:
                child.wait()


def _become_subreaper() -> None:
    """Make orphaned descendants our children (Linux), so none outlives the supervisor."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: group signals still reach them
        pass


def _reap_orphans() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to a process group; False when the group no longer exists."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    return True


@click.command()
@click.option(
    "--prepare-only",
    is_flag=True,
    help="Migrate, create certificates, load workflows; start nothing.",
)
def run(prepare_only: bool) -> None:
    """Start ingress, internal and console listeners, worker and beat (Ctrl-C stops all)."""
    from broker.errors import ConfigError
    from broker.telemetry.logs import configure_logging

    try:
        settings = get_settings()
        configure_logging(settings)
        prepare(settings)
        if prepare_only:
            return
        key = ensure_dev_console_key(settings)
        written = write_profile(settings, key)
    except ConfigError as error:
        # A refused setting or file (a placeholder secret, a linked key file): its message says
        # which and why, without a traceback.
        raise click.ClickException(error.message) from error
    click.echo(quick_start_text(settings), err=True)
    if written is not None:
        click.echo(f"The broker command's profile: {written} (no exports needed)", err=True)
    click.echo(console_text(settings) + "\n", err=True)
    _share_metrics_folder(settings)
    sys.exit(Supervisor(roles(settings)).run())


def _share_metrics_folder(settings: Settings) -> None:
    """One empty prometheus-client multiprocess folder for every role (read by the library)."""
    folder = (settings.var_path / "prometheus").resolve()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)  # noqa: TID251 - for the children


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("flower_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def flower(ctx: click.Context, flower_args: tuple[str, ...]) -> None:
    """Start Flower on 127.0.0.1:5555 (extra arguments go to Flower, e.g. --basic-auth=u:p)."""
    if importlib.util.find_spec("flower") is None:
        raise click.ClickException(
            "Flower is not installed: pip install 'elsa-celery-broker[flower]'"
        )
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "tasks",
        "flower",
        "--address=127.0.0.1",
        "--port=5555",
        *flower_args,
    ]
    # In a second shell, Flower watches the transport of the run whose profile is found.
    from broker.cli import profile

    found = profile.find(get_settings(), ctx.find_root().meta.get(profile.CONTEXT_KEY))
    env = {**(found.settings if found else {}), **os.environ}  # noqa: TID251 - for the child
    os.execve(sys.executable, argv, env)  # noqa: S606 - replaces this process with Flower
