"""The console under real gunicorn, driven by Debian's chromium through Playwright.

``console_stack`` starts the console listener (``config/gunicorn_console.conf.py``, as the README
starts it) on a free loopback port against a migrated SQLite database in a temporary folder, with
a copy of the shipped workflows, a key per role, a console user and a seeded invoice request.
The browser is ``/usr/bin/chromium`` (never a downloaded build). When chromium, Playwright or
Studio's files are missing the browser tests skip, and fail under CI=true. Screenshots go to
``var/screenshots/`` of the checkout.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import ssl
import subprocess
import sys
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
    process: subprocess.Popen[bytes]

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
    var = root / "var"
    base = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}  # noqa: TID251
    return {
        **base,
        "BROKER_VAR_DIR": str(var),
        "BROKER_DATABASE_URL": f"sqlite:///{var / 'broker.db'}",
        "BROKER_LOCK_URL": f"file://{var / 'locks'}",
        "BROKER_QUEUE_URL": "filesystem://",
        "BROKER_WORKFLOW_PATHS": str(root / "workflows"),
        "BROKER_CONSOLE_BIND": f"127.0.0.1:{port}",
        "BROKER_LOG_FORMAT": "text",
        "BROKER_SMTP_URL": f"file://{var / 'mail'}",
    }


def wait_ready(
    url: str,
    process: subprocess.Popen[bytes],
    log: Path,
    *,
    context: ssl.SSLContext | None = None,
) -> None:
    """Wait until ``url``/healthz answers; raise with the log when the process died or hung."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the console exited:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2, context=context) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the console did not answer in time:\n{log.read_text()}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


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
    log = root / "console.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn_console.conf.py"],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    stack = ConsoleStack(root, port, env, keys, request_id, process)
    try:
        wait_ready(stack.url, process, log)
        yield stack
    finally:
        stop(process)


@pytest.fixture(scope="module")
def browser(console_stack: ConsoleStack) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


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
