"""A private PostgreSQL cluster for a test stack: stopped, killed and started at will, then removed.

The shared PostgreSQL service on 127.0.0.1:5432 serves every other test, so a test that takes
the database away mid-run brings its own: ``initdb`` in a fresh temporary folder, trust
authentication, listening on 127.0.0.1 on a free port with its socket inside that folder, and
``fsync`` off (the cluster lives for one test; durability across a machine crash is not what is
tested), unless the test asks for a ``durable`` cluster: production's ``fsync`` and
``synchronous_commit``, for a test that kills the server and counts what survived (``kill``: the
postmaster SIGKILLed, as a crash would). PostgreSQL refuses to run as root, so under root every
server command runs as the ``postgres`` account through ``runuser``, in a folder handed to that
account.

The same cluster serves the soak (listening on loopback and on a test bridge's address too) and
the multi-host tests (run inside a network namespace: ``wrap`` puts every server command in it).

``find_binaries`` answers where the server programs are, or why they cannot be used: the test
skips with that reason locally and fails under ``CI=true``, as ``require_service`` does.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.support.services import ON_CI, free_port
from tests.support.stack.process import alive, children_of

#: the account the server runs as when the test runs as root
SERVER_ACCOUNT = "postgres"
SUPERUSER = "postgres"
DATABASE = "broker"
COMMAND_TIMEOUT = 60.0
#: server options: small, quick, and loud enough in the log to explain a failure
SERVER_OPTIONS = (
    "-c fsync=off",
    "-c synchronous_commit=off",
    "-c full_page_writes=off",
    "-c max_connections=200",
    "-c shared_buffers=32MB",
    "-c log_min_messages=warning",
)
#: a durable cluster's options: a commit is on disk before the client hears of it
DURABLE_OPTIONS = (
    "-c fsync=on",
    "-c synchronous_commit=on",
    "-c full_page_writes=on",
    *(option for option in SERVER_OPTIONS if "fsync" not in option and "_commit" not in option
      and "full_page" not in option),
)  # fmt: skip
#: how long the server's processes may take to go after the postmaster was killed
KILL_TIMEOUT = 30.0


def find_binaries() -> tuple[Path | None, str]:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``initdb`` and ``pg_ctl`` (or
    the ones on PATH), with an empty reason; None and the reason when the cluster cannot run."""
    candidates = sorted(
        (Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")),
        key=lambda p: _version_key(p.parent.name),
        reverse=True,
    )
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    folder = next(
        (c for c in candidates if (c / "initdb").is_file() and (c / "pg_ctl").is_file()), None
    )
    if folder is None:
        return None, "the PostgreSQL server programs (initdb, pg_ctl) are not installed"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_ACCOUNT)
        except KeyError:
            return None, f"running as root and there is no {SERVER_ACCOUNT!r} account to run as"
        if shutil.which("runuser") is None:
            return None, "running as root and runuser is missing"
    return folder, ""


def require_binaries() -> Path:
    """The server programs' folder; skips (locally) or fails (under CI=true) without them."""
    folder, reason = find_binaries()
    if folder is not None:
        return folder
    if ON_CI:
        pytest.fail(f"{reason} (CI=true: a missing service is a failure)")
    pytest.skip(reason)


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


class PrivatePostgres:
    """One throwaway cluster: ``start``, ``stop`` (fast shutdown), ``start`` again, ``destroy``.

    ``listen`` are the addresses it listens on (the first is the one its URL names), ``trust``
    a /24 prefix whose clients it trusts besides loopback, ``wrap`` turns a server command into
    the one that runs it elsewhere (a network namespace), ``options`` replace the server options.
    """

    def __init__(
        self,
        binaries: Path,
        *,
        durable: bool = False,
        listen: Sequence[str] = ("127.0.0.1",),
        port: int | None = None,
        trust: str | None = None,
        wrap: Callable[[list[str]], list[str]] | None = None,
        options: Sequence[str] | None = None,
    ) -> None:
        self.binaries = binaries
        self.options = tuple(options or (DURABLE_OPTIONS if durable else SERVER_OPTIONS))
        self.listen = tuple(listen)
        self.address = self.listen[0]
        self.trust = trust
        self.wrap = wrap
        self.port = port or free_port()
        # Not under pytest's tmp_path: that folder is private to the test's user, and the server
        # account must be able to reach its data directory.
        self.folder = Path(tempfile.mkdtemp(prefix="broker-pg-"))
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self._account: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            self._account = pwd.getpwnam(SERVER_ACCOUNT)
            os.chown(self.folder, self._account.pw_uid, self._account.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{SUPERUSER}@{self.address}:{self.port}/{DATABASE}"

    def _run(
        self, program: str, *args: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binaries / program), *args]
        if self._account is not None:
            argv = ["runuser", "-u", SERVER_ACCOUNT, "--", *argv]
        if self.wrap is not None:
            argv = self.wrap(argv)
        result = subprocess.run(
            argv,
            cwd=self.folder,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"{program} {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}\n{self.log_tail()}"
            )
        return result

    def create(self) -> None:
        """``initdb`` the cluster, start it and create the test's database."""
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            SUPERUSER,
            "-E",
            "UTF8",
            "--no-sync",
        )
        if self.trust:  # initdb trusts only loopback and the socket
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {self.trust}.0/24 trust\n")
        self.start()
        self._run(
            "psql",
            "-h",
            self.address,
            "-p",
            str(self.port),
            "-U",
            SUPERUSER,
            "-d",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            f'CREATE DATABASE "{DATABASE}"',
        )

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = " ".join(
            (
                f"-p {self.port}",
                f"-k {self.folder}",
                f"-c listen_addresses={','.join(self.listen)}",
                *self.options,
            )
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            options,
            "-w",
            "-t",
            str(int(COMMAND_TIMEOUT)),
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: roll back open transactions, cut every client off)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def postmaster_pid(self) -> int:
        """The running postmaster's pid (the first line of its pid file)."""
        return int((self.data / "postmaster.pid").read_text().splitlines()[0])

    def kill(self) -> None:
        """SIGKILL the postmaster, as a crash would, and wait until every process of the server
        is gone (its backends notice and exit; any left after ``KILL_TIMEOUT`` are killed too),
        so ``start`` finds the shared memory free and runs crash recovery."""
        pid = self.postmaster_pid()
        children = children_of(pid)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_TIMEOUT
        while alive([pid, *children]) and time.monotonic() < deadline:
            time.sleep(0.1)
        for leftover in alive(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(leftover, signal.SIGKILL)
        while alive([pid, *children]):
            if time.monotonic() > deadline + 10:
                raise RuntimeError(f"the server's processes outlived SIGKILL: {alive(children)}")
            time.sleep(0.1)
        # A new postmaster refuses to start while the old pid still exists, and the dead one
        # stays a zombie until its parent (init) reaps it: wait for that, bounded.
        reaped = time.monotonic() + KILL_TIMEOUT
        while Path(f"/proc/{pid}").exists() and time.monotonic() < reaped:
            time.sleep(0.1)
        if Path(f"/proc/{pid}").exists():
            raise RuntimeError(f"the killed postmaster {pid} was not reaped")

    @property
    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def destroy(self) -> None:
        """Stop the server however it is and remove the folder; safe to call twice."""
        if self.data.is_dir():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                if self.running:
                    self.stop("immediate")
            self._kill_leftover()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _kill_leftover(self) -> None:
        # pg_ctl could not stop it (or timed out): the postmaster's pid file names the process.
        pid_file = self.data / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(pid_file.read_text().splitlines()[0])
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                os.kill(pid, 0)  # ProcessLookupError (an OSError) ends the wait
                time.sleep(0.1)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@contextlib.contextmanager
def private_postgres(*, durable: bool = False) -> Iterator[PrivatePostgres]:
    """A created and running private cluster, destroyed on exit whatever happened."""
    cluster = PrivatePostgres(require_binaries(), durable=durable)
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.destroy()
