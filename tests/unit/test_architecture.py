"""The layering rules of docs/design.md, checked by import-linter (``make lint`` runs it too).

The contracts live in ``setup.cfg``. These tests prove they hold on the tree and that they bite: a
copy of the package with one forbidden import makes ``lint-imports`` fail, naming the contract.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.services import PROJECT_ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}  # noqa: TID251 - a child process's environment
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "setup.cfg"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    """The packages and the contracts, copied where a test may break them."""
    for package in ("broker", "tasks"):
        shutil.copytree(
            PROJECT_ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(PROJECT_ROOT / "setup.cfg", tmp_path / "setup.cfg")
    return tmp_path


def break_with(root: Path, module: str, line: str) -> None:
    path = root / Path(*module.split(".")).with_suffix(".py")
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_tree_keeps_every_contract() -> None:
    result = lint_imports(PROJECT_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" not in result.stdout.replace("0 broken", "")


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("broker.engine.model.values", "import sqlalchemy  # noqa", "The engine imports no I/O"),
        (
            "broker.engine.run.state",
            "from broker.store import db  # noqa",
            "The engine imports no I/O",
        ),
        ("broker.runtime.ids", "import tasks.workflow  # noqa", "broker never imports tasks"),
        (
            "broker.runtime.ids",
            "from broker.ingress import app  # noqa",
            "never import the HTTP adapters",
        ),
        (
            "broker.ingress.routes.events",
            "from broker.store.models import Request  # noqa",
            "The HTTP adapters never import the store's models",
        ),
        (
            "broker.console.pages",
            "import broker.store.models  # noqa",
            "The HTTP adapters never import the store's models",
        ),
        (
            "broker.errors",
            "from typing import TYPE_CHECKING  # noqa\n"
            "if TYPE_CHECKING:\n    import broker.settings",
            "No import cycles between modules",
        ),
        (
            "broker.engine.run.state",
            "from broker.engine.run import interpreter  # noqa",
            "No import cycles between modules",
        ),
        (
            "broker.store.models.requests",
            "from broker.runtime.requests import transitions  # noqa",
            "No import cycles between modules",
        ),
        (
            "broker.runtime.failures.dead_letters",
            "from broker.runtime.steps import runner  # noqa",
            "No import cycles between modules",
        ),
        (
            "broker.runtime.ids",
            "from broker.runtime.admin import paging  # noqa",
            "The runtime's packages are layers",
        ),
        (
            "broker.telemetry.logs",
            "from broker.outbound import urls  # noqa",
            "The broker packages are layers",
        ),
        (
            "broker.console.pages",
            "from broker.ingress import schemas  # noqa",
            "The ingress and the console are siblings",
        ),
        (
            "broker.ingress.routes.events",
            "from broker.console import roles  # noqa",
            "The ingress and the console are siblings",
        ),
        (
            "broker.runtime.steps.runner",
            "from broker.adapters import locks  # noqa",
            "The use-cases never import the infrastructure adapters",
        ),
        (
            "broker.runtime.ids",
            "import celery  # noqa",
            "The use-cases never import the infrastructure adapters",
        ),
        (
            "broker.adapters.health",
            "from broker.web import context  # noqa",
            "The infrastructure adapters never import a web app",
        ),
        (
            "broker.console.auth",
            "from broker.wiring import runtime  # noqa",
            "Only the entry points (cli, serving) import the wiring floor",
        ),
        (
            "broker.web.inputs",
            "from broker.ingress import schemas  # noqa",
            "The broker packages are layers",
        ),
        (
            "broker.outbound.urls",
            "from broker.registry import files  # noqa",
            "The broker packages are layers",
        ),
    ],
)
def test_a_forbidden_import_breaks_its_contract(
    tree_copy: Path, module: str, line: str, contract: str
) -> None:
    # Given a copy of the tree where one module makes a forbidden import
    break_with(tree_copy, module, line)
    # When the contracts are checked
    result = lint_imports(tree_copy)
    # Then the check fails and names the broken contract
    assert result.returncode != 0
    broken = [row for row in result.stdout.splitlines() if " BROKEN" in row]
    assert any(contract in row for row in broken), result.stdout


#: a module a newcomer reads in one sitting (docs/design.md section 1); migrations are history
MAX_MODULE_LINES = 450


def oversized_modules(root: Path) -> list[str]:
    found = []
    for package in ("broker", "tasks"):
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_MODULE_LINES:
                found.append(f"{path.relative_to(root)}: {lines} lines")
    return found


def test_no_module_is_over_the_line_limit() -> None:
    assert oversized_modules(PROJECT_ROOT) == []


def test_the_line_limit_notices_a_long_module(tree_copy: Path) -> None:
    long_module = tree_copy / "broker" / "long_module.py"
    long_module.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert oversized_modules(tree_copy) == [f"broker/long_module.py: {MAX_MODULE_LINES + 1} lines"]


#: the modules directly in broker/, named in docs/design.md section 1 (the rest live in packages)
GROUND_FLOOR = {
    "backends",
    "errors",
    "names",
    "rates",
    "redaction",
    "setting_keys",
    "settings",
}
#: at most this many modules (``__init__`` included) directly in one package folder
MAX_FOLDER_MODULES = 15


def test_broker_holds_only_the_ground_floor_modules_the_design_names() -> None:
    found = {p.stem for p in (PROJECT_ROOT / "broker").glob("*.py") if p.stem != "__init__"}
    assert found == GROUND_FLOOR
    assert len(GROUND_FLOOR) <= 8
    design = (PROJECT_ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    assert all(f"{name}.py" in design for name in GROUND_FLOOR)


def crowded_folders(root: Path) -> list[str]:
    found = []
    for package in ("broker", "tasks"):
        for init in sorted((root / package).rglob("__init__.py")):
            count = len(list(init.parent.glob("*.py")))
            if count > MAX_FOLDER_MODULES:
                found.append(f"{init.parent.relative_to(root)}: {count} modules")
    return found


def test_no_package_folder_holds_more_than_fifteen_modules() -> None:
    assert crowded_folders(PROJECT_ROOT) == []


def test_the_folder_limit_notices_a_crowded_folder(tree_copy: Path) -> None:
    folder = tree_copy / "broker" / "crowded"
    folder.mkdir()
    for n in range(MAX_FOLDER_MODULES + 1):
        (folder / ("__init__.py" if n == 0 else f"m{n}.py")).write_text("")
    assert crowded_folders(tree_copy) == [f"broker/crowded: {MAX_FOLDER_MODULES + 1} modules"]


def _assigns_all(path: Path) -> bool:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return True
    return False


def packages_without_all(root: Path) -> list[str]:
    return [
        str(init.relative_to(root))
        for package in ("broker", "tasks")
        for init in sorted((root / package).rglob("__init__.py"))
        if not _assigns_all(init)
    ]


def test_every_package_names_its_public_face_in_all() -> None:
    assert packages_without_all(PROJECT_ROOT) == []


def test_a_package_without_all_is_noticed(tree_copy: Path) -> None:
    (tree_copy / "broker" / "bare").mkdir()
    (tree_copy / "broker" / "bare" / "__init__.py").write_text(
        '"""Bare: names no ``__all__``."""\n'
    )
    assert packages_without_all(tree_copy) == ["broker/bare/__init__.py"]


#: a module docstring is a summary; the mechanism lives in docs/design.md
MAX_DOCSTRING_LINES = 3


def long_module_docstrings(root: Path) -> list[str]:
    found = []
    for package in ("broker", "tasks"):
        for path in sorted((root / package).rglob("*.py")):
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
            lines = len(doc.strip().splitlines()) if doc else 0
            if lines > MAX_DOCSTRING_LINES:
                found.append(f"{path.relative_to(root)}: {lines} lines")
    return found


def test_module_docstrings_are_short_summaries() -> None:
    assert long_module_docstrings(PROJECT_ROOT) == []


def test_a_long_module_docstring_is_noticed(tree_copy: Path) -> None:
    (tree_copy / "broker" / "wordy.py").write_text('"""One.\n\nTwo.\nThree.\n"""\n')
    assert long_module_docstrings(tree_copy) == ["broker/wordy.py: 4 lines"]


#: the long-lived parts only the wiring floor (``broker/wiring/``) builds, by the name of their
#: constructor or factory; the module that defines one may call it too (a factory's own body)
WIRING_OWNS = frozenset(
    {
        "Runtime",
        "make_engine",
        "make_session_factory",
        "WorkflowRegistry",
        "ClientRegistry",
        "TrustStore",
        "RateLimiter",
        "make_rate_limiter",
        "OutboundHttp",
        "TokenIssuer",
        "make_lock_provider",
        "create_celery",
        "make_mailer",
        "make_file_store",
    }
)
#: alembic runs its own environment script, outside any process the wiring builds
WIRING_EXEMPT = {"broker/store/migrations/env.py"}


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def constructors_outside_the_wiring(root: Path) -> list[str]:
    found = []
    for package in ("broker", "tasks"):
        for path in sorted((root / package).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            if where.startswith("broker/wiring/") or where in WIRING_EXEMPT:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            defined = {
                node.name
                for node in tree.body
                if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
            }
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                name = _called_name(node)
                if name in WIRING_OWNS and name not in defined:
                    found.append(f"{where}:{node.lineno}: {name}")
    return found


def test_only_the_wiring_floor_builds_the_long_lived_parts() -> None:
    assert constructors_outside_the_wiring(PROJECT_ROOT) == []


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("broker/console/request_types.py", "clients = ClientRegistry(None)  # noqa"),
        (
            "broker/ingress/app.py",
            "from broker.store import db\nfactory = db.make_session_factory(None)",
        ),
        ("tasks/workflow.py", "from broker.wiring import runtime\nruntime.Runtime(None)"),
    ],
)
def test_a_constructor_called_outside_the_wiring_floor_is_noticed(
    tree_copy: Path, module: str, line: str
) -> None:
    # Given a copy of the tree where one module builds a part the wiring floor owns
    path = tree_copy / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}\n")
    # When the tree is scanned
    found = constructors_outside_the_wiring(tree_copy)
    # Then the call is named, with its module
    assert len(found) == 1
    assert found[0].startswith(f"{module}:")


#: the modules that write a shared name out; everything else imports the constant
NAME_TABLES = ("broker/names.py", "broker/clients/scopes.py")


def _string_constants(tree: ast.AST) -> list[ast.Constant]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def names_written_twice(root: Path) -> list[str]:
    """Each name a table declares (trigger, task, queue and scope names), wherever else a string
    literal spells it out in ``broker`` or ``tasks``."""
    names = {
        node.value: table
        for table in NAME_TABLES
        for node in _string_constants(ast.parse((root / table).read_text(encoding="utf-8")))
    }
    found = []
    for package in ("broker", "tasks"):
        for path in sorted((root / package).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            if where in NAME_TABLES:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docstrings = {
                id(node.body[0].value)
                for node in ast.walk(tree)
                if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
                and node.body
                and isinstance(node.body[0], ast.Expr)
            }
            for node in _string_constants(tree):
                if node.value in names and id(node) not in docstrings:
                    found.append(f"{where}:{node.lineno}: {node.value} ({names[node.value]})")
    return found


def test_trigger_task_and_scope_names_are_written_once() -> None:
    assert names_written_twice(PROJECT_ROOT) == []


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("broker/runtime/bookmarks/queue.py", 'AGAIN = "Elsa.Event"'),
        ("tasks/workflow.py", 'AGAIN = "broker.run_request"'),
        ("broker/ingress/routes/admin.py", 'AGAIN = "read:dead-letters"'),
    ],
)
def test_a_name_written_out_a_second_time_is_noticed(
    tree_copy: Path, module: str, line: str
) -> None:
    path = tree_copy / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}\n")
    found = names_written_twice(tree_copy)
    assert len(found) == 1
    assert found[0].startswith(f"{module}:")


def test_trigger_spellings_come_from_the_activity_declarations() -> None:
    from broker.engine.activities.base import DECLARED
    from broker.registry.triggers import TRIGGER_NAMES

    declared = {
        spelling: found.trigger
        for found in DECLARED.values()
        if found.trigger is not None
        for spelling in (found.type_name, *found.aliases, *found.trigger_aliases)
    }
    assert dict(TRIGGER_NAMES) == declared
    assert {"Elsa.SignalReceived", "Timer", "Elsa.Scheduling.Cron"} <= TRIGGER_NAMES.keys()
    assert TRIGGER_NAMES["Elsa.SignalReceived"] == "Elsa.Event"
