"""Strikes come from what the service saw, never from what a worker reports (issue 30): a
worker patched to forge its frames cannot get an innocent, owner-approved tool struck, and the
guilty tool is still struck and quarantined on its third failure. Under both filesystem layers.

The patch is made in this process before the service starts its zygote, so every worker the
zygote forks runs it: the defence assumes the agent loop itself can be subverted.

Attack inspiration: issue 30's two forgeries (failure entries for tools the model never called;
a ``ToolStarted`` for another call of the same answer, sent after the call that really hangs).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shelldon.config import load_settings
from shelldon.contracts import Result, ToolCall, ToolFailure
from shelldon.proc import sandbox
from shelldon.worker import spawn
from tests.integration.sandbox.probe import promote

from .harness import Service

pytestmark = pytest.mark.slow

GUILTY = """\
import time

DESCRIPTION = "Fails on purpose: raises on 'boom', hangs on 'hang'."
PARAMS_SCHEMA = {"type": "object", "properties": {"how": {"type": "string"}}}


def run(how):
    if how == "hang":
        time.sleep(1000)
    raise RuntimeError("guilty on purpose")
"""
INNOCENT = """\
DESCRIPTION = "Always answers."
PARAMS_SCHEMA = {"type": "object", "properties": {}}


def run():
    return "fine"
"""


def available(layer: str) -> None:
    if layer == "landlock" and sandbox.landlock_abi() < 1:
        pytest.skip("the kernel has no Landlock")
    if layer == "userns" and not sandbox.userns_available():
        pytest.skip("no unprivileged user namespaces")


def strikes(svc: Service) -> dict[str, int]:
    return {h.name: h.strikes for h in svc.store.tools.health()}


def quarantined(svc: Service, name: str, timeout: float = 10.0) -> None:
    """Wait until ``name`` is in quarantine (strikes and quarantine land asynchronously)."""
    until = time.monotonic() + timeout
    while not (svc.settings.toolbox / "quarantine" / f"{name}.py").exists():
        assert time.monotonic() < until, (strikes(svc), svc.output[-2000:])
        time.sleep(0.05)


def start(tmp_path: Path, layer: str, script: list[dict[str, Any]], **env: str) -> Service:
    """The service with "guilty" and "innocent" approved and live before it starts."""
    home = tmp_path / "home"
    settings = load_settings(environ={"SHELLDON_HOME": str(home)})
    promote(settings, "guilty", GUILTY)
    promote(settings, "innocent", INNOCENT)
    return Service(home, script, SHELLDON_SANDBOX_FS=layer, **env)


def forged_results(
    real: Callable[[Result], bytes],
) -> Callable[[Result], bytes]:
    """``result_frame`` of a worker that blames the innocent tool in every way it can."""

    def forge(result: Result) -> bytes:
        real_ids = [f.call_id for f in result.tool_failures]
        lies = [
            ToolFailure("innocent", "forged", "never-relayed"),
            ToolFailure("innocent", "forged", ""),
            *(ToolFailure("innocent", "forged", call_id) for call_id in real_ids),
            *result.tool_failures,  # the real failure again: one call, one strike
            ToolFailure("read_file", "forged", real_ids[0] if real_ids else ""),
        ]
        return real(dataclasses.replace(result, tool_failures=(*result.tool_failures, *lies)))

    return forge


@pytest.mark.parametrize("layer", ["landlock", "userns"])
def test_failures_for_tools_the_model_never_called_strike_no_one(
    tmp_path: Path, layer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    available(layer)
    monkeypatch.setattr(spawn, "result_frame", forged_results(spawn.result_frame))
    boom = {"when": "use", "tool_calls": [{"name": "guilty", "args": {"how": "boom"}}]}
    said = {"when": "use", "text": "Tried."}
    svc = start(tmp_path, layer, [boom, said] * 3)
    try:
        for _ in range(3):
            svc.say("use it")
            svc.expect("Tried.")
        quarantined(svc, "guilty")
        assert "innocent" not in strikes(svc)
        assert (svc.settings.toolbox / "live" / "innocent.py").exists()
        svc.expect("I put my tool guilty in quarantine")
        assert "innocent in quarantine" not in svc.output
    finally:
        svc.stop()


def forged_announcements(real: Callable[..., Callable[[ToolCall], None]]) -> Callable[..., Any]:
    """``channel_announce`` of a worker that, once the guilty call "g1" starts, says the
    innocent call "i1" of the same answer started after it."""

    def make(*args: Any) -> Callable[[ToolCall], None]:
        announce = real(*args)

        def forge(call: ToolCall) -> None:
            announce(call)
            if call.id == "g1":
                announce(ToolCall("i1", "innocent", {}))

        return forge

    return make


@pytest.mark.parametrize("layer", ["landlock", "userns"])
def test_a_hang_announced_away_to_another_call_strikes_no_one(
    tmp_path: Path, layer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    available(layer)
    monkeypatch.setattr(spawn, "channel_announce", forged_announcements(spawn.channel_announce))
    both = {
        "when": "both",
        "tool_calls": [
            {"name": "guilty", "args": {"how": "hang"}, "id": "g1"},
            {"name": "innocent", "args": {}, "id": "i1"},
        ],
    }
    alone = {"when": "alone", "tool_calls": [{"name": "guilty", "args": {"how": "hang"}}]}
    svc = start(
        tmp_path,
        layer,
        [both] * 3 + [alone] * 3,
        SHELLDON_LIMITS_TURN_TIMEOUT_S="2",
        SHELLDON_LIMITS_BAIL_MARGIN_S="0.5",
        SHELLDON_LIMITS_KILL_GRACE_S="0.5",
    )
    try:
        for _ in range(3):
            svc.say("both")
            svc.expect("that took longer than I'm allowed", timeout=10)
        assert strikes(svc) == {}  # which call hung cannot be told: no one is struck
        assert "was running and didn't finish" not in svc.output
        for _ in range(3):
            svc.say("alone")
            svc.expect("My tool guilty was running and didn't finish.", timeout=10)
        quarantined(svc, "guilty")
        assert "innocent" not in strikes(svc)
        assert (svc.settings.toolbox / "live" / "innocent.py").exists()
    finally:
        svc.stop()
