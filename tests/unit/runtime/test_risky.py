"""What the service side decides about a RISKY call on its own: which calls may be parked, and
the words the owner is asked (built from the call, whatever the worker summarized)."""

from __future__ import annotations

from shelldon.config import Settings
from shelldon.contracts import Tier, ToolCall
from shelldon.replies import describe_call
from shelldon.rules.risky import RISKY_BUILTINS, park_refusal
from shelldon.worker.tools import build_registry


def test_the_parents_table_is_the_registrys_risky_built_ins(settings: Settings) -> None:
    registry = build_registry(settings)
    risky = {
        name
        for name, spec in registry.specs.items()
        if spec.definition.tier is Tier.RISKY and not spec.self_coded
    }
    assert risky == RISKY_BUILTINS


def test_each_risky_built_in_may_be_parked_and_nothing_else() -> None:
    for name in RISKY_BUILTINS:
        assert park_refusal(ToolCall("c", name, {})) == ""
    for name in ("read_file", "python_eval", "propose_tool", "evil", "", "run_shell "):
        assert "not a RISKY built-in" in park_refusal(ToolCall("c", name, {}))
    assert "did not parse" in park_refusal(ToolCall("c", "git", {}, args_error="bad json"))


def test_the_description_shows_every_argument_and_elides_only_long_values() -> None:
    text = describe_call(ToolCall("c", "run_shell", {"command": "ls -la"}))
    assert text == 'run_shell(command="ls -la")'
    long = describe_call(ToolCall("c", "write_file", {"path": "a", "content": "x" * 5000}))
    assert long.startswith('write_file(path="a", content="xxx') and "…(+" in long
    assert len(describe_call(ToolCall("c", "git", {f"k{i}": "v" * 150 for i in range(20)}))) < 1100
