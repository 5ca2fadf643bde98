"""Elsa's activation strategies, against a migrated database."""

from __future__ import annotations

import pytest

from broker.errors import ActivationRefused
from broker.runtime.requests.activation import check_activation
from broker.settings import Settings
from broker.store import db
from broker.store.models import WorkflowInstance


def test_each_strategy_refuses_only_what_elsa_refuses(settings: Settings) -> None:
    # Given one running instance of definition "d" correlated "c-1", and a finished one "c-2"
    db.upgrade(settings.database_url)
    factory = db.make_session_factory(db.make_engine(settings.database_url))
    with db.transaction(factory) as session:
        for instance_id, status, correlation in (
            ("i-1", "Running", "c-1"),
            ("i-2", "Finished", "c-2"),
        ):
            session.add(
                WorkflowInstance(
                    id=instance_id,
                    definition_id="d",
                    definition_version_id="d-v1",
                    version=1,
                    correlation_id=correlation,
                    status=status,
                )
            )
    refused: dict[tuple[str, str, str | None], bool] = {
        ("always", "d", "c-1"): False,
        ("singleton", "d", "c-9"): True,
        ("singleton", "other", "c-1"): False,
        ("correlation", "other", "c-1"): True,
        ("correlation", "d", "c-2"): False,
        ("correlated-singleton", "d", "c-1"): True,
        ("correlated-singleton", "other", "c-1"): False,
        ("correlated-singleton", "d", "c-9"): False,
        # without a correlation id the correlation is not constrained, as in Elsa's filter
        ("correlation", "other", None): True,
        ("correlated-singleton", "d", None): True,
        ("correlated-singleton", "other", None): False,
    }
    for (strategy, definition_id, correlation), expected in refused.items():
        with db.transaction(factory) as session:
            if expected:
                # Then a refused start names the strategy
                with pytest.raises(ActivationRefused) as caught:
                    check_activation(
                        session,
                        definition_id=definition_id,
                        strategy=strategy,
                        correlation_id=correlation,
                    )
                assert caught.value.details["activationStrategy"] == strategy
            else:
                check_activation(
                    session,
                    definition_id=definition_id,
                    strategy=strategy,
                    correlation_id=correlation,
                )
    db.dispose_engines()
