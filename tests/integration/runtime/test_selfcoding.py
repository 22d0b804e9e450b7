"""Self-coding through the running service: propose, gate, promote, use, strike, quarantine,
restore — each step what the owner sees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .harness import Service

pytestmark = pytest.mark.slow

ECHO_CODE = """\
from pathlib import Path

DESCRIPTION = "Write text to a file and say how long it was."
PARAMS_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}, "out": {"type": "string"}},
    "required": ["text"],
}


def run(text, out=""):
    if text == "boom":
        raise RuntimeError("boom on purpose")
    if out:
        Path(out).write_text(text)
    return str(len(text))
"""
ECHO_TEST = """\
from echo_len import run


def test_length():
    assert run("abc") == "3"
"""
BAD_TEST = """\
from echo_len import run


def test_length():
    assert run("abc") == "4"
"""


def propose(test: str) -> dict[str, Any]:
    return {
        "when": "make",
        "tool_calls": [
            {"name": "propose_tool", "args": {"name": "echo_len", "code": ECHO_CODE, "test": test}}
        ],
    }


def use(text: str, out: str = "") -> dict[str, Any]:
    args = {"text": text, **({"out": out} if out else {})}
    return {"when": "use", "tool_calls": [{"name": "echo_len", "args": args}]}


def test_a_passing_tool_is_promoted_on_approve_and_used_next_turn(tmp_path: Path) -> None:
    marker = tmp_path / "home" / "workspace" / "ran.txt"
    script = [
        propose(ECHO_TEST),
        {"when": "make", "text": "Proposed."},
        use("hello", str(marker)),
        {"when": "use", "text": "Used it."},
    ]
    svc = Service(tmp_path / "home", script)
    try:
        svc.say("make a tool")
        svc.expect("Proposed.")
        chunk = svc.expect("[y/N]", timeout=30)
        assert "echo_len" in chunk and "passed" in chunk
        assert svc.store.pending()[0].kind == "promotion"
        svc.say("y")
        svc.expect("Added echo_len")
        assert (svc.settings.workspace / "tools" / "echo_len.py").exists()
        svc.say("use it")
        svc.expect("Used it.")
        assert marker.read_text() == "hello"
        actions = [(e.action, e.subject) for e in svc.store.audit_log()]
        assert ("passed", "echo_len") in actions and ("promoted", "echo_len") in actions
        promoted = next(e for e in svc.store.audit_log() if e.action == "promoted")
        assert len(promoted.code_hash) == 64
    finally:
        svc.stop()


def test_a_denied_promotion_is_discarded(tmp_path: Path) -> None:
    svc = Service(tmp_path / "home", [propose(ECHO_TEST), {"when": "make", "text": "Proposed."}])
    try:
        svc.say("make a tool")
        svc.expect("[y/N]", timeout=30)
        svc.say("n")
        svc.expect("Discarded echo_len")
        assert not list((svc.settings.workspace / "tools-staging").glob("*echo_len*"))
        assert not (svc.settings.workspace / "tools" / "echo_len.py").exists()
    finally:
        svc.stop()


def test_a_failing_gate_tells_the_owner_and_discards(tmp_path: Path) -> None:
    svc = Service(tmp_path / "home", [propose(BAD_TEST), {"when": "make", "text": "Proposed."}])
    try:
        svc.say("make a tool")
        chunk = svc.expect("failed its gate", timeout=30)
        assert "echo_len" in chunk
        assert svc.store.pending() == []
        assert not list((svc.settings.workspace / "tools-staging").glob("*echo_len*"))
        # The model learns why on its next turn: the note is in the conversation.
        assert any("failed its gate" in m.content for m in svc.store.recent_messages(0))
    finally:
        svc.stop()


def test_a_tool_that_keeps_failing_is_quarantined_and_restored(tmp_path: Path) -> None:
    script = [propose(ECHO_TEST), {"when": "make", "text": "Proposed."}]
    for _ in range(3):
        script += [use("boom"), {"when": "use", "text": "Hmm, it failed."}]
    svc = Service(tmp_path / "home", script)
    try:
        svc.say("make a tool")
        svc.expect("[y/N]", timeout=30)
        svc.say("y")
        svc.expect("Added echo_len")
        for _ in range(3):
            svc.say("use it")
            svc.expect("Hmm, it failed.")
        svc.expect("quarantine", timeout=10)
        assert (svc.settings.workspace / "tools-quarantine" / "echo_len.py").exists()
        svc.say("/tools")
        chunk = svc.expect("/restore NAME")
        assert "Quarantined: echo_len (3 strikes" in chunk
        svc.say("/restore echo_len")
        svc.expect("live again")
        assert (svc.settings.workspace / "tools" / "echo_len.py").exists()
        assert svc.store.tool_health() == []
    finally:
        svc.stop()


NAP_CODE = """\
import time

DESCRIPTION = "Sleep a while."
PARAMS_SCHEMA = {"type": "object", "properties": {"seconds": {"type": "number"}}}


def run(seconds=0):
    time.sleep(seconds)
    return "rested"
"""
NAP_TEST = """\
from nap import run


def test_short_nap():
    assert run(0) == "rested"
"""


def test_a_tool_that_hangs_until_the_worker_is_killed_still_earns_strikes(tmp_path: Path) -> None:
    script: list[dict[str, Any]] = [
        {
            "when": "make",
            "tool_calls": [
                {
                    "name": "propose_tool",
                    "args": {"name": "nap", "code": NAP_CODE, "test": NAP_TEST},
                }
            ],
        },
        {"when": "make", "text": "Proposed."},
    ]
    script += [{"when": "nap", "tool_calls": [{"name": "nap", "args": {"seconds": 1000}}]}] * 3
    svc = Service(
        tmp_path / "home",
        script,
        SHELLDON_LIMITS_TURN_TIMEOUT_S="2",
        SHELLDON_LIMITS_BAIL_MARGIN_S="0.5",
        SHELLDON_LIMITS_KILL_GRACE_S="0.5",
    )
    try:
        svc.say("make a tool")
        svc.expect("[y/N]", timeout=30)
        svc.say("y")
        svc.expect("Added nap")
        for _ in range(3):
            svc.say("take a nap")
            svc.expect("My tool nap was running and didn't finish.", timeout=10)
        svc.expect("quarantine", timeout=10)
        assert (svc.settings.workspace / "tools-quarantine" / "nap.py").exists()
        health = svc.store.tool_health()
        assert health == [] or health[0].strikes >= 3
    finally:
        svc.stop()
