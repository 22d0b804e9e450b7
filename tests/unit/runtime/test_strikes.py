"""The strike rule: only a self-coded tool's failure earns a strike, and the threshold (not one
strike fewer) sends it into quarantine."""

from __future__ import annotations

from shelldon.contracts import ToolFailure
from shelldon.rules.strikes import quarantine_due, quarantined_text, struck


def test_a_built_in_failure_earns_no_strike() -> None:
    mine = ToolFailure("adder", "boom", "c1")
    builtin = ToolFailure("read_file", "no such file", "c2")
    assert struck([builtin, mine], ["adder", "weather"]) == (mine,)


def test_the_threshold_quarantines_and_one_strike_fewer_does_not() -> None:
    assert not quarantine_due(2, 3)
    assert quarantine_due(3, 3)
    assert quarantine_due(4, 3)


def test_the_owner_is_told_how_to_bring_a_quarantined_tool_back() -> None:
    text = quarantined_text("adder", 3, "x" * 1000)
    assert "/restore adder" in text and "failed 3 times" in text
    assert len(text) < 450
