"""Finding a team's activity modules at start, and the start refused on a bad one."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.activities.discovery import activity_modules, load_activities
from broker.errors import ActivityDeclarationError
from broker.registry import WorkflowRegistry
from broker.settings import Settings


def module(folder: Path, name: str, text: str) -> None:
    (folder / f"{name}.py").write_text(text, encoding="utf-8")


def settings_for(tmp_path: Path, modules: str) -> Settings:
    return Settings.from_env(
        {
            "BROKER_VAR_DIR": str(tmp_path / "var"),
            "BROKER_TASK_MODULES": modules,
            "BROKER_WORKFLOW_PATHS": str(tmp_path / "wf"),
            "BROKER_WATCH_WORKFLOWS": "false",
        }
    )


def test_the_modules_are_the_task_modules_then_the_entry_points(tmp_path: Path) -> None:
    # Given the task modules setting, and the example package installed with its entry point
    settings = settings_for(tmp_path, "tasks,acme.jobs")
    # Then the broker's own task module is left out, the entry point's module comes after
    found = activity_modules(settings)
    assert found[0] == "acme.jobs"
    assert "order_activities.activities" in found
    assert "tasks" not in found


def test_a_module_listed_in_the_setting_is_imported_and_its_activities_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module(
        tmp_path,
        "team_found_acts",
        "from broker.activities import activity\n"
        "@activity('Found.Hello', category='Found')\n"
        "def hello(who: str) -> str:\n"
        "    return 'hi ' + who\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = load_activities(settings_for(tmp_path, "team_found_acts"))
    assert loaded["Found.Hello"].function("you") == "hi you"


def test_a_module_that_does_not_import_stops_the_start_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module(tmp_path, "team_broken_acts", "import a_package_nobody_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ActivityDeclarationError, match="'team_broken_acts' does not import"):
        load_activities(settings_for(tmp_path, "team_broken_acts"))


def test_a_bad_declaration_stops_the_registry_naming_the_module_and_the_activity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a module whose activity shadows a built-in Elsa activity
    module(
        tmp_path,
        "team_shadow_acts",
        "from broker.activities import activity\n"
        "@activity('Elsa.Delay', category='Bad')\n"
        "def delay(seconds: int) -> None:\n"
        "    return None\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    # When a process builds its workflow registry (the worker, the console and the ingress do)
    # Then it refuses to start, naming the module and the activity
    with pytest.raises(ActivityDeclarationError) as refused:
        WorkflowRegistry(settings_for(tmp_path, "team_shadow_acts"))
    assert "module 'team_shadow_acts'" in refused.value.message
    assert "'Elsa.Delay' shadows a built-in Elsa activity" in refused.value.message
