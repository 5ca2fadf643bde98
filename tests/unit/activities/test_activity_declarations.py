"""``@activity``: what a declaration says, what Studio's descriptor shows, and the declarations
refused with the activity named."""

from __future__ import annotations

from typing import Any

import pytest

from broker.activities import Input, Result, Retry, activity
from broker.activities.adapter import DECLARED
from broker.console.api.activity_descriptors import activity_descriptors
from broker.engine.activities.catalog import CATALOG, FIXED_PORTS, REQUIRED_INPUTS
from broker.errors import ActivityDeclarationError


def descriptor(type_name: str) -> dict[str, Any]:
    return next(d for d in activity_descriptors() if d["typeName"] == type_name)


def test_a_function_becomes_an_activity_with_typed_inputs_editors_and_defaults() -> None:
    # Given a function declared with its Studio description
    @activity(
        "Declared.Score",
        category="Scoring",
        display_name="Score the applicant",
        description="Scores an applicant.",
        inputs={
            "band": Input("The band.", options=("low", "high")),
            "notes": Input(editor="multiline"),
        },
        outputs=("score",),
        outcomes=("Accepted", "Rejected"),
    )
    def score(
        applicant: str,
        age: int,
        ratio: float = 0.5,
        vip: bool = False,
        band: str = "low",
        notes: str = "",
        extra: dict[str, Any] | None = None,
    ) -> Result:
        return Result({"score": 1}, "Accepted")

    # When Studio reads the descriptors
    found = descriptor("Declared.Score")
    # Then the activity is in the toolbox under its category with its inputs' types and editors
    assert (found["category"], found["displayName"], found["kind"]) == (
        "Scoring",
        "Score the applicant",
        "Action",
    )
    inputs = {i["name"]: (i["typeName"], i["uiHint"], i["defaultValue"]) for i in found["inputs"]}
    assert inputs == {
        "Applicant": ("String", "singleline", None),
        "Age": ("Int32", "singleline", None),
        "Ratio": ("Double", "singleline", 0.5),
        "Vip": ("Boolean", "checkbox", False),
        "Band": ("String", "dropdown", "low"),
        "Notes": ("String", "multiline", ""),
        "Extra": ("Object", "json-editor", None),
    }
    band = next(i for i in found["inputs"] if i["name"] == "Band")
    items = band["uiSpecifications"]["dropdown"]["selectList"]["items"]
    assert [item["value"] for item in items] == ["low", "high"]
    # And its outputs and outcomes are declared, the outcomes as the ports a connection may use
    assert [o["name"] for o in found["outputs"]] == ["Score"]
    assert [p["name"] for p in found["ports"]] == ["Accepted", "Rejected"]
    assert FIXED_PORTS["Declared.Score"] == frozenset({"Accepted", "Rejected"})
    assert REQUIRED_INPUTS["Declared.Score"] == ("applicant", "age")


def test_a_queue_makes_it_a_task_and_the_retry_policy_is_kept() -> None:
    @activity("Declared.Resize", category="Images", queue="images", retry=Retry(max_attempts=5))
    def resize(url: str) -> dict[str, Any]:
        return {"result": url}

    declared = DECLARED["Declared.Resize"]
    assert (declared.run, declared.queue) == ("task", "images")
    assert declared.retry is not None
    assert declared.retry.as_policy() == {"maxAttempts": 5, "initialDelay": 1.0, "maxDelay": 60.0}
    assert descriptor("Declared.Resize")["kind"] == "Task"


def test_a_class_with_a_run_method_is_declared_as_one_activity() -> None:
    @activity("Declared.Greet", category="Text")
    class Greet:
        """Greets someone."""

        def run(self, who: str) -> str:
            return f"hello {who}"

    assert DECLARED["Declared.Greet"].function("you") == "hello you"
    assert descriptor("Declared.Greet")["description"] == "Greets someone."
    assert "Declared.Greet" in CATALOG


def test_an_unknown_input_type_is_refused_naming_the_activity_and_the_input() -> None:
    with pytest.raises(ActivityDeclarationError, match=r"'Declared.Bad'.*'when'.*unknown type"):

        @activity("Declared.Bad", category="Bad")
        def bad(when: complex) -> None:
            return None


def test_a_name_that_shadows_a_built_in_elsa_activity_is_refused() -> None:
    with pytest.raises(ActivityDeclarationError, match=r"'Elsa\.WriteLine' shadows a built-in"):

        @activity("Elsa.WriteLine", category="Bad")
        def write_line(text: str) -> None:
            return None


def test_a_type_name_declared_twice_is_refused_naming_both_places() -> None:
    @activity("Declared.Twice", category="Bad")
    def first() -> None:
        return None

    with pytest.raises(ActivityDeclarationError, match=r"'Declared\.Twice' is declared twice"):

        @activity("Declared.Twice", category="Bad")
        def second() -> None:
            return None


def test_an_unknown_editor_and_a_stray_input_are_refused() -> None:
    with pytest.raises(ActivityDeclarationError, match="unknown editor 'slider'"):

        @activity("Declared.Slider", category="Bad", inputs={"n": Input(editor="slider")})
        def slider(n: int) -> None:
            return None

    with pytest.raises(ActivityDeclarationError, match=r"\['missing'\] are not parameters"):

        @activity("Declared.Stray", category="Bad", inputs={"missing": Input()})
        def stray(n: int) -> None:
            return None


def test_an_input_named_like_a_property_of_every_activity_is_refused() -> None:
    with pytest.raises(ActivityDeclarationError, match="input 'metadata' takes the name"):

        @activity("Declared.Meta", category="Bad")
        def meta(metadata: dict[str, Any]) -> None:
            return None


def test_a_shadowing_name_is_refused_whatever_its_case() -> None:
    with pytest.raises(ActivityDeclarationError, match="shadows a built-in"):

        @activity("elsa.writeline", category="Bad")
        def write_line(text: str) -> None:
            return None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"outcomes": ("A", "A")}, r"outcomes \['A'\] are declared more than once"),
        ({"outputs": ("x", "y", "x")}, r"outputs \['x'\] are declared more than once"),
        ({"inputs": {"band": Input(editor="dropdown")}}, "'band' has a dropdown without options"),
    ],
)
def test_repeated_names_and_an_empty_dropdown_are_refused(options: Any, message: str) -> None:
    with pytest.raises(ActivityDeclarationError, match=message):

        @activity("Declared.Repeats", category="Bad", **options)
        def repeats(band: str = "") -> None:
            return None


def test_a_task_activity_declares_its_time_limit_and_inherits_the_setting_without_one() -> None:
    @activity("Declared.Bounded", category="Test", queue="test.bounded", time_limit=30)
    def bounded(x: str) -> None:
        return None

    @activity("Declared.Unbounded", category="Test", run="task")
    def unbounded(x: str) -> None:
        return None

    assert DECLARED["Declared.Bounded"].time_limit == 30.0
    assert DECLARED["Declared.Unbounded"].time_limit is None  # BROKER_ACTIVITY_TIME_LIMIT


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"time_limit": 5}, "time_limit is for run='task' activities"),
        ({"time_limit": 0, "run": "task"}, "time_limit must be a positive number of seconds"),
        ({"time_limit": -1, "run": "task"}, "time_limit must be a positive number of seconds"),
        ({"time_limit": "30", "run": "task"}, "not '30'"),
        ({"time_limit": True, "run": "task"}, "not True"),
        ({"time_limit": float("inf"), "run": "task"}, "not inf"),
    ],
)
def test_a_bad_time_limit_is_refused_naming_the_activity(options: Any, message: str) -> None:
    with pytest.raises(ActivityDeclarationError, match=rf"'Declared\.Limited'.*{message}"):

        @activity("Declared.Limited", category="Bad", **options)
        def limited(x: str) -> None:
            return None
