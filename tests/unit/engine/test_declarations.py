"""``@activity`` declares an implementation once; the catalog's tables come from it."""

from __future__ import annotations

import pytest

from broker.engine.activities import base, composite, control
from broker.engine.activities.base import DECLARED, Behaviour, activity
from broker.engine.activities.catalog import CATALOG, FIXED_PORTS, TYPE_ALIASES, declaration_for
from broker.engine.activities.descriptors import spec_for
from broker.engine.activities.http import outbound
from broker.engine.model.specs import ActivitySpec


def test_a_class_declared_twice_is_refused_and_the_registry_is_unchanged() -> None:
    before = dict(DECLARED)
    with pytest.raises(TypeError, match="declared twice"):
        activity("Elsa.Sequence", ActivitySpec("Workflows", "again"))(control.Sequence)
    assert before == DECLARED


def test_a_declaration_records_its_names_spec_and_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "DECLARED", {})
    spec = ActivitySpec("Testing", "A test activity.")

    @activity("Test.Thing", spec, aliases=("Test.Old",), outbound=("Done", "Other"))
    class Thing(Behaviour):
        pass

    found = base.DECLARED[Thing]
    assert (found.type_name, found.spec, found.aliases) == ("Test.Thing", spec, ("Test.Old",))
    assert found.outbound == frozenset({"Done", "Other"})


def test_the_tables_come_from_the_declarations() -> None:
    for cls, found in DECLARED.items():
        assert type(CATALOG[found.type_name]) is cls
        for alias in found.aliases:
            assert TYPE_ALIASES[alias] == found.type_name
            assert CATALOG[alias] is CATALOG[found.type_name]
        assert FIXED_PORTS.get(found.type_name) == found.outbound
    assert FIXED_PORTS["Elsa.If"] == frozenset({"True", "False", "Done"})
    assert TYPE_ALIASES["Elsa.Http.SendHttpRequest"] == "Elsa.SendHttpRequest"


def test_a_subclass_never_borrows_its_bases_declaration() -> None:
    assert declaration_for(composite.Composite()) is None  # a WorkflowScope, not declared itself
    flow_send = CATALOG["Elsa.FlowSendHttpRequest"]
    assert isinstance(flow_send, outbound.SendHttpRequest)
    assert spec_for(flow_send) is not spec_for(CATALOG["Elsa.SendHttpRequest"])
