"""Flowchart joins in counter mode (implicit and FlowJoin) and token mode (merge modes)."""

from __future__ import annotations

from tests.unit.engine.conftest import Harness


def completed(result: object, activity_id: str) -> int:
    journal = result.journal  # type: ignore[attr-defined]
    return sum(1 for e in journal if e.activity_id == activity_id and e.event_name == "Completed")


def test_implicit_join_waits_for_all_active_branches(harness: Harness) -> None:
    # Given A and a two-step branch B1 -> B2 both feeding M / When it runs
    result = harness.start("implicit-join")
    # Then M runs once, after the longer branch
    assert result.write_lines == ("A", "B1", "B2", "merged")
    assert completed(result, "m") == 1


def test_implicit_join_does_not_wait_for_a_branch_not_taken(harness: Harness) -> None:
    result = harness.start("decision-merge")
    assert result.write_lines == ("true", "merged")
    assert result.sub_status == "Finished"


def test_flow_join_wait_any_continues_on_the_first_arrival(harness: Harness) -> None:
    # Given a WaitAny join whose second branch waits for an event
    result = harness.start("join-waitany")
    # Then the join has already passed control on, once
    assert result.write_lines == ("A", "B", "end")
    assert completed(result, "j") == 1


def test_flow_join_wait_all_waits_for_the_blocked_branch(harness: Harness) -> None:
    first = harness.start("join-waitall")
    assert first.write_lines == ("A", "B")
    assert first.sub_status == "Suspended"
    second = harness.engine.resume(first.state, bookmark_id=first.bookmarks[0].id)
    assert second.write_lines == ("end",)
    assert second.sub_status == "Finished"


def test_flow_fork_leaves_through_each_named_branch(harness: Harness) -> None:
    assert harness.start("flow-fork").write_lines == ("X", "Y")


def test_flow_switch_leaves_through_the_matching_case(harness: Harness) -> None:
    assert harness.start("flow-switch").write_lines == ("B",)


def test_end_completes_its_flowchart_and_cancels_the_rest(harness: Harness) -> None:
    result = harness.start("end-stops-flowchart")
    assert result.write_lines == ("after",)
    assert result.sub_status == "Finished"
    assert result.bookmarks == ()


def test_token_stream_runs_when_the_live_branch_arrives(harness: Harness) -> None:
    assert harness.start("token-stream").write_lines == ("A", "C")


def test_token_merge_waits_for_every_forward_branch(harness: Harness) -> None:
    assert harness.start("token-merge").write_lines == ("A",)


def test_token_converge_blocks_on_a_dead_branch(harness: Harness) -> None:
    assert harness.start("token-converge").write_lines == ("A",)


def test_token_cascade_runs_per_arriving_token(harness: Harness) -> None:
    assert harness.start("token-cascade").write_lines == ("A", "C")


def test_token_race_runs_once_for_the_first_arrival(harness: Harness) -> None:
    result = harness.start("token-race")
    assert result.write_lines.count("C") == 1
    assert completed(result, "c") == 1


def test_token_stream_joins_two_live_branches_once(harness: Harness) -> None:
    assert harness.start("token-stream-join").write_lines == ("A", "B", "C")


def test_wait_all_active_join_runs_when_a_decision_skips_its_branch(harness: Harness) -> None:
    # Given a WaitAllActive join fed by B and by a decision that leaves through False instead
    result = harness.start("join-wait-all-active-skip")
    # Then the decision's not-followed connection counts as visited, so the join still runs once
    assert result.write_lines == ("A", "B", "bypass", "joined")
    assert completed(result, "j") == 1
    assert result.sub_status == "Finished"
