"""The strike rule: only a self-coded tool's failure earns a strike (the threshold is tested
on the strike ledger actor)."""

from __future__ import annotations

from shelldon.contracts import ToolFailure
from shelldon.rules.strikes import quarantined_text, struck


def test_a_built_in_failure_earns_no_strike() -> None:
    mine = ToolFailure("adder", "boom", "c1")
    builtin = ToolFailure("read_file", "no such file", "c2")
    assert struck([builtin, mine], ["adder", "weather"]) == (mine,)


def test_the_owner_is_told_how_to_bring_a_quarantined_tool_back() -> None:
    text = quarantined_text("adder", 3, "x" * 1000)
    assert "/restore adder" in text and "failed 3 times" in text
    assert len(text) < 450
