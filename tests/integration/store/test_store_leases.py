"""The SQL lease fence: one live holder at a time, and a stale holding never passes the fence.

The fence is the UPDATE the relay runs first in every batch (``db.fence``): it matches only the
holder's owner *and* epoch, so both a takeover by another owner and the same owner's new holding
after an expiry (a new epoch) refuse the old holding's work.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import create_mock_engine
from sqlalchemy.orm import Session, sessionmaker

from broker.store.db import (
    acquire_lease,
    fence,
    make_engine,
    make_session_factory,
    release_lease,
    transaction,
    upgrade,
)


def take(
    factory: sessionmaker[Session], owner: str, ttl: float = 60, name: str = "relay"
) -> int | None:
    with transaction(factory) as session:
        return acquire_lease(session, name, owner, ttl)


def fenced(
    factory: sessionmaker[Session], epoch: int, owner: str = "a", name: str = "relay"
) -> bool:
    with transaction(factory) as session:
        return fence(session, name, owner, epoch, ttl=60)


def test_first_claim_creates_the_lease_at_epoch_one(factory: sessionmaker[Session]) -> None:
    # When a lease that does not exist is claimed
    epoch = take(factory, "a")

    # Then it is created at epoch 1 and the fence passes for that epoch only
    assert epoch == 1
    assert fenced(factory, 1)
    assert not fenced(factory, 0)


def test_renewal_by_the_holder_keeps_the_epoch(factory: sessionmaker[Session]) -> None:
    # Given a lease held by a
    assert take(factory, "a") == 1

    # When a renews it while it is live
    epoch = take(factory, "a")

    # Then the epoch is unchanged, so work in flight stays valid
    assert epoch == 1
    assert fenced(factory, 1)


def test_another_owner_cannot_take_a_live_lease(factory: sessionmaker[Session]) -> None:
    # Given a live lease held by a
    assert take(factory, "a") == 1

    # When b claims it
    epoch = take(factory, "b")

    # Then b does not get it, a's holding still passes the fence, and b cannot pass it
    assert epoch is None
    assert fenced(factory, 1, owner="a")
    assert not fenced(factory, 1, owner="b")


def test_a_stale_epoch_fails_the_fence_after_a_takeover(factory: sessionmaker[Session]) -> None:
    # Given a lease a held and let expire (a negative ttl: expired already, no waiting)
    old = take(factory, "a", ttl=-1)
    assert old == 1

    # When b takes it over
    new = take(factory, "b")

    # Then b has a new epoch, and a's old holding no longer passes the fence
    assert new == 2
    assert not fenced(factory, old, owner="a")
    assert fenced(factory, new, owner="b")
    # and a, coming back, cannot take it from b
    assert take(factory, "a") is None


def test_a_released_lease_is_taken_with_a_new_epoch(factory: sessionmaker[Session]) -> None:
    # Given a lease that a holds and releases
    assert take(factory, "a") == 1
    with transaction(factory) as session:
        assert release_lease(session, "relay", "a")
        assert not release_lease(session, "relay", "someone-else")

    # When b claims it
    epoch = take(factory, "b")

    # Then b gets it at once, with a new epoch
    assert epoch == 2


def test_retaking_an_expired_lease_bumps_the_epoch_even_for_the_same_owner(
    factory: sessionmaker[Session],
) -> None:
    # Given a lease a let expire
    assert take(factory, "a", ttl=-1) == 1

    # When a claims it again
    epoch = take(factory, "a")

    # Then it is a new holding: work stamped with the old epoch must not commit
    assert epoch == 2


def test_the_epoch_alone_refuses_the_same_owners_earlier_holding(
    factory: sessionmaker[Session],
) -> None:
    # Given a relay that held the lease at epoch 1, paused past its expiry, and the same owner
    # name took it again (epoch 2) meanwhile, so the owner condition cannot tell them apart
    assert take(factory, "a", ttl=-1) == 1
    assert take(factory, "a") == 2
    # When the paused holding (epoch 1) reaches its fence, Then only its epoch refuses it
    assert not fenced(factory, 1, owner="a")
    # and the current holding passes
    assert fenced(factory, 2, owner="a")


def test_the_fence_fails_for_an_unknown_lease(factory: sessionmaker[Session]) -> None:
    assert not fenced(factory, 1, owner="a", name="never-taken")


def test_leases_are_independent_by_name(factory: sessionmaker[Session]) -> None:
    # Given a lease "relay" held by a
    assert take(factory, "a") == 1

    # When b claims a lease of another name, Then b gets it
    assert take(factory, "b", name="timers") == 1


def test_the_fence_and_the_release_touch_only_the_named_lease(
    factory: sessionmaker[Session],
) -> None:
    # Given one owner holding two leases at the same epoch
    assert take(factory, "a", name="relay") == 1
    assert take(factory, "a", name="timers") == 1
    # Then the fence of a lease it never took fails, whatever else it holds
    assert not fenced(factory, 1, owner="a", name="never-taken")
    # When it releases one of them
    with transaction(factory) as session:
        assert release_lease(session, "relay", "a")
    # Then only that one can be taken by another owner; the other is still held
    assert take(factory, "b", name="relay") == 2
    assert take(factory, "b", name="timers") is None
    assert fenced(factory, 1, owner="a", name="timers")


def test_leases_are_refused_on_a_database_without_an_upsert_dialect() -> None:
    # Given a session bound to a dialect the lease statement is not written for
    engine = create_mock_engine("mysql://", lambda *_args, **_kwargs: None)
    # When a lease is taken, Then the error names the dialect
    with pytest.raises(NotImplementedError, match="leases are not implemented on mysql"):
        acquire_lease(Session(bind=engine), "relay", "a", 60)


def race(factory: sessionmaker[Session], name: str, claimants: int) -> dict[str, int | None]:
    """Let ``claimants`` threads, each on its own connection, claim ``name`` at the same moment."""
    barrier = threading.Barrier(claimants)
    results: dict[str, int | None] = {}
    errors: list[BaseException] = []

    def claim(owner: str) -> None:
        try:
            barrier.wait(timeout=30)
            with transaction(factory) as session:
                results[owner] = acquire_lease(session, name, owner, 60)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=claim, args=(f"owner-{i}",)) for i in range(claimants)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(results) == claimants
    return results


def winners(results: dict[str, int | None]) -> list[int]:
    return [epoch for epoch in results.values() if epoch is not None]


@pytest.fixture
def pg_factory(postgres_url: str) -> sessionmaker[Session]:
    upgrade(postgres_url)
    return make_session_factory(make_engine(postgres_url))


def test_concurrent_claimants_of_a_missing_lease_never_both_get_it(
    pg_factory: sessionmaker[Session],
) -> None:
    for round_ in range(5):
        # Given a lease nobody has claimed yet (every claimant tries to insert it)
        name = f"missing-{round_}"

        # When eight claimants race for it
        results = race(pg_factory, name, claimants=8)

        # Then exactly one got it, at epoch 1
        assert winners(results) == [1], results


def test_concurrent_claimants_of_an_expired_lease_never_both_get_it(
    pg_factory: sessionmaker[Session],
) -> None:
    for round_ in range(5):
        # Given a lease whose holder let it expire
        name = f"expired-{round_}"
        assert take(pg_factory, "gone", ttl=-1, name=name) == 1

        # When eight claimants race to take it over
        results = race(pg_factory, name, claimants=8)

        # Then exactly one got it, at the next epoch, and the old epoch fails the fence
        assert winners(results) == [2], results
        assert not fenced(pg_factory, 1, owner="gone", name=name)
