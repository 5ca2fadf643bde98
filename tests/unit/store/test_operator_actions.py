"""The operator audit's store: records are bounded and redacted, listed newest first by family."""

from __future__ import annotations

import json

from sqlalchemy.orm import Session, sessionmaker

from broker.cli import supervise
from broker.settings import Settings
from broker.store import db, operator_actions


def test_a_summary_is_cut_to_size_and_its_credentials_masked(
    factory: sessionmaker[Session],
) -> None:
    # Given a summary far too big, holding a secret-looking field
    summary = {
        "ids": [f"id-{n}" for n in range(500)],
        "text": "t" * 10_000,
        "nested": {"a": {"b": {"c": {"d": "deep"}}}},
        "apiKey": "bk_should_never_show",
    }
    with db.transaction(factory) as session:
        operator_actions.record(
            session, actor="console:alice", action="bulk.x", target="t", summary=summary
        )
    with db.transaction(factory, write=False) as session:
        (entry,), total = operator_actions.list_page(session, page=0, page_size=10)
    assert total == 1
    stored = entry["summary"]
    assert len(stored["ids"]) == operator_actions.MAX_ITEMS + 1
    assert stored["ids"][-1] == f"... {500 - operator_actions.MAX_ITEMS} more"
    assert len(stored["text"]) <= operator_actions.MAX_TEXT + 3
    assert stored["nested"]["a"]["b"] == "..."
    assert "bk_should_never_show" not in json.dumps(entry)
    assert len(json.dumps(entry)) < 2000


def test_the_list_is_newest_first_and_filters_by_family(factory: sessionmaker[Session]) -> None:
    with db.transaction(factory) as session:
        for action in ("grant.create", "key.create", "grant.create", "grantee.other"):
            operator_actions.record(session, actor="cli:root", action=action, target="x")
    with db.transaction(factory, write=False) as session:
        items, total = operator_actions.list_page(session, page=0, page_size=10, action="grant")
    assert total == 2
    assert [i["action"] for i in items] == ["grant.create", "grant.create"]
    assert items[0]["id"] > items[1]["id"]


def test_a_target_naming_many_ids_stays_within_its_column() -> None:
    target = operator_actions.targets([f"instance-{n:04d}" for n in range(1000)])
    assert len(target) <= operator_actions.MAX_TARGET
    assert target.endswith("more")


def test_making_the_dev_key_is_in_the_operator_audit(settings: Settings) -> None:
    db.upgrade(settings.database_url)
    supervise.ensure_dev_console_key(settings)
    factory = db.make_session_factory(db.make_engine(settings.database_url))
    with factory() as session:
        items, _ = operator_actions.list_page(session, page=0, page_size=10)
    assert [(i["action"], i["target"]) for i in items] == [("key.create", "dev")]
    assert items[0]["actor"].startswith("cli:")
    assert items[0]["summary"] == {"role": "operator", "purpose": "development console key"}
    db.dispose_engines()
