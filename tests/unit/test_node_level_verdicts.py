"""A node-level verdict names its node: an action that drains, resets or reboots hosts is never
recommended with no host named (issue 27, item 4). The rules that can reach such a verdict without
a host (verdict-scheduler-failure's NODE_FAIL with no line naming the node) ask to investigate
themselves (their pack tests); the report holds the contract for every other rule."""

from __future__ import annotations

import pytest

from workload_attribution.contracts.vocabulary import ISOLATING_ACTIONS, Action
from workload_attribution.rules.engine import RunResult
from workload_attribution.rules.report import _action_and_notes


@pytest.mark.parametrize("action", sorted(a.value for a in ISOLATING_ACTIONS))
def test_an_isolating_action_without_a_named_node_becomes_investigate(action: str) -> None:
    verdict = {"action": action, "reason": "the scheduler reports NODE_FAIL"}
    got, notes = _action_and_notes(verdict, [], RunResult(), [])
    assert got == Action.investigate.value
    assert any(action in n and "no node can be named" in n for n in notes)


@pytest.mark.parametrize("action", sorted(a.value for a in ISOLATING_ACTIONS))
def test_an_isolating_action_with_its_node_stands(action: str) -> None:
    got, notes = _action_and_notes({"action": action}, ["gpu-w-113"], RunResult(), [])
    assert got == action
    assert not any("no node can be named" in n for n in notes)


def test_an_action_that_isolates_nothing_needs_no_node() -> None:
    got, _ = _action_and_notes({"action": "restart_job"}, [], RunResult(), [])
    assert got == "restart_job"
