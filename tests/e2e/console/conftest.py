"""The console under real gunicorn, driven by Debian's chromium through Playwright.

``console_stack`` starts the console listener (``config/gunicorn_console.conf.py``, as the README
starts it) on a free loopback port against a migrated SQLite database in a temporary folder, with
a copy of the shipped workflows, a key per role, a console user and a seeded invoice request.
The browser is ``/usr/bin/chromium`` (never a downloaded build). When chromium, Playwright or
Studio's files are missing the browser tests skip, and fail under CI=true. Screenshots go to
``var/screenshots/`` of the checkout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.console import assets
from broker.registry import WorkflowRegistry
from broker.settings import Settings
from broker.store import credentials, db
from tests.e2e import live
from tests.support.console import seed_invoice_request
from tests.support.services import PROJECT_ROOT, free_port
from tests.support.stack import config, roles
from tests.support.stack.config import Ports
from tests.support.stack.process import Process
from tests.support.stack.roster import Stack

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = PROJECT_ROOT / "var" / "screenshots"
START_TIMEOUT = 60.0
PASSWORD = "correct horse battery staple"


def require_browser() -> None:
    """Skip (fail under CI) unless chromium, Playwright and Studio's files are all here."""
    missing = []
    if not Path(CHROMIUM).exists():
        missing.append("chromium (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright (make install-dev)")
    settings = Settings.from_env({})
    for package in assets.PACKAGES:
        if not assets.installed(settings, package):
            missing.append(f"{package.spec} (make install)")
    if not missing:
        return
    message = "browser tests need " + ", ".join(missing)
    if os.environ.get("CI") == "true":  # noqa: TID251 - the CI switch, as tests/support/services.py reads it
        pytest.fail(message)
    pytest.skip(message)


@dataclasses.dataclass
class ConsoleStack:
    root: Path
    port: int
    env: dict[str, str]
    keys: dict[str, str]
    request_id: str
    process: Process

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def settings(self) -> Settings:
        return Settings.from_env({k: v for k, v in self.env.items() if k.startswith("BROKER_")})

    @property
    def workflows(self) -> Path:
        return self.root / "workflows"

    def header(self, role: str) -> dict[str, str]:
        return {"Authorization": f"ApiKey {self.keys[role]}"}


def console_environment(root: Path, port: int) -> dict[str, str]:
    """The console's BROKER_* settings: embedded backends under ``root``, listening on ``port``."""
    return {
        **config.embedded(root / "var"),
        "BROKER_WORKFLOW_PATHS": str(root / "workflows"),
        "BROKER_CONSOLE_BIND": f"127.0.0.1:{port}",
    }


def wait_ready(url: str, process: Process, *, context: ssl.SSLContext | None = None) -> None:
    """Wait until ``url``/healthz answers; raise with the log when the process died or hung."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if not process.running:
            raise process.failure("exited")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2, context=context) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise process.failure("did not answer in time")


@pytest.fixture(scope="module")
def console_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleStack]:
    require_browser()
    root = tmp_path_factory.mktemp("console")
    shutil.copytree(PROJECT_ROOT / "workflows", root / "workflows")
    port = free_port()
    env = console_environment(root, port)
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("BROKER_")})
    settings.var_path.mkdir(parents=True)
    db.upgrade(settings.database_url)
    factory = db.make_session_factory(db.make_engine(settings.database_url))
    with db.transaction(factory) as session:
        keys = {role: credentials.create_key(session, role, role) for role in credentials.ROLES}
        credentials.add_user(session, "alice", "operator", PASSWORD)
    registry = WorkflowRegistry(settings, factory)
    registry.load()
    published = registry.for_request_type("InvoiceProcess")
    assert published is not None
    request_id = seed_invoice_request(factory, published)
    db.dispose_engines()
    roster = Stack(root, env, ports=Ports(console=port))
    process = roster.start("console", roles.listener("console"))
    stack = ConsoleStack(root, port, roster.env, keys, request_id, process)
    try:
        wait_ready(stack.url, process)
        yield stack
    finally:
        roster.close()


@contextlib.contextmanager
def launched_browser() -> Iterator[Any]:
    """Debian's chromium, headless, through Playwright; closed on the way out."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def browser(console_stack: ConsoleStack) -> Iterator[Any]:
    with launched_browser() as launched:
        yield launched


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


# Studio over a full stack (ingress, internal, worker, beat and the console) ---------------------


@dataclasses.dataclass
class StudioStack:
    stack: live.LiveStack
    port: int
    keys: dict[str, str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def workflows(self) -> Path:
        return self.stack.root / "workflows"

    def api(
        self, method: str, path: str, body: Any = None, role: str | None = "designer"
    ) -> tuple[int, Any]:
        """One call to the console's Elsa API with ``role``'s key (None: no credentials)."""
        headers = {"Content-Type": "application/json"}
        if role is not None:
            headers["Authorization"] = f"ApiKey {self.keys[role]}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}/elsa/api/{path}", data=data, headers=headers, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                return error.code, json.loads(raw) if raw else None
            except ValueError:
                return error.code, raw.decode(errors="replace")

    def files_of(self, definition_id: str) -> dict[str, int]:
        """The workflow files of a definition in the stack's folder: name -> version."""
        found = {}
        for path in sorted(self.workflows.rglob("*.json")):
            document = json.loads(path.read_text())
            if document.get("definitionId") == definition_id:
                found[path.name] = int(document.get("version", 0))
        return found


@contextlib.contextmanager
def running_studio(root: Path, **extra: str) -> Iterator[StudioStack]:
    """A full live stack (``live.running_stack``, ``extra`` settings on top) with the console
    as one more role, a key per console role and the workflow folder watched."""
    require_browser()
    with live.running_stack(root, BROKER_WATCH_WORKFLOWS="true", **extra) as stack:
        with db.transaction(stack.factory) as session:
            keys = {r: credentials.create_key(session, r, r) for r in credentials.ROLES}
        stack.roles.start("console", roles.listener("console", workers=1, threads=8))
        stack.roles.wait_listening()
        yield StudioStack(stack, stack.roles.ports.console, keys)


@contextlib.contextmanager
def authoring_studio(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[StudioStack]:
    """``running_studio`` whose only workflow folder starts empty: what the author saves in Studio
    is all there is."""
    root = tmp_path_factory.mktemp(name)
    authored = root / "authored"
    authored.mkdir()
    with running_studio(root, BROKER_WORKFLOW_PATHS=str(authored)) as studio:
        yield studio


def wait_for_ingress_version(
    stack: live.LiveStack, request_type: str, version: int, timeout: float = 30.0
) -> None:
    """Poll ``GET /request-types`` until the ingress serves ``version`` of ``request_type``."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        body = stack.call(live.DEV, "GET", "/request-types").body
        seen = next(
            (t["workflow"] for t in body["requestTypes"] if t["requestType"] == request_type), None
        )
        if seen is not None and seen["version"] == version:
            return
        time.sleep(0.3)
    raise AssertionError(f"the ingress still serves {seen} after {timeout}s\n{stack.tails()}")
