"""An owner-approved RISKY call runs in its own child under the worker's kernel layers: the
workspace read-write, system files read-only, never the vault, the database or the parents'
/proc; the network only for the calls that need it. Both filesystem layers.

Attacks from issue 18: a symlink to the vault planted in the workspace by a tool, then an
approved ``run_shell "cat todo2.txt"``; an approved call that is not meant to reach the network
trying to (the turn's first step keeps sockets for the calls that need them).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from shelldon.config import Settings
from shelldon.contracts import (
    Message,
    RequestToolApproval,
    ResumeRequest,
    Role,
    Tier,
    ToolCall,
    ToolDefinition,
)
from shelldon.worker.handle import EXIT_OK
from shelldon.worker.spawn import spawn_resume
from shelldon.worker.tools import Registry, ToolSpec, build_registry

from .conftest import confined
from .probe import ATTACKS, converse, finish, outputs, say, targets

_probe: dict[str, Any] = {}
exec(ATTACKS, _probe)


def attack(ctx: Any, targets: str) -> str:
    """A RISKY built-in stand-in whose (hostile) arguments name what to reach."""
    return json.dumps(_probe["attack"](targets))


SCHEMA: dict[str, Any] = {"type": "object", "properties": {"targets": {"type": "string"}}}


def with_attack(settings: Settings) -> Registry:
    registry = build_registry(settings)
    registry.add(ToolSpec(ToolDefinition("attack", "probe", SCHEMA, Tier.RISKY), attack))
    return registry


def resume(settings: Settings, call: ToolCall) -> tuple[bool, str]:
    """Resume a turn parked at ``call`` with the owner's approval; the call's (ok, output)."""
    parked = RequestToolApproval(
        call,
        call.name,
        (
            Message(Role.SYSTEM, "sys"),
            Message(Role.USER, "go"),
            Message(Role.ASSISTANT, "", (call,)),
        ),
    )
    handle = spawn_resume(
        ResumeRequest("t-ok", 7, parked, True), settings, registry_factory=with_attack
    )
    try:
        jobs, result = converse(handle, [say("done")])
    finally:
        code = finish(handle)
    assert code == EXIT_OK and result.reply == "done"
    return outputs(jobs[-1])[call.id]


REFUSED = {
    "landlock": {"read_vault": "EACCES", "read_database": "EACCES", "open_parent_mem": "EACCES"},
    "userns": {"read_vault": "ENOENT", "read_database": "ENOENT", "open_parent_mem": "EACCES"},
}


@pytest.fixture(params=sorted(REFUSED))
def layer(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_an_approved_call_sees_the_workspace_and_nothing_of_the_home(
    layer: str, planted: Settings, tmp_path: Path, user_home: Path, listener: int
) -> None:
    settings = confined(planted, layer)
    args = targets(settings, user_home, tmp_path / "out.txt", [listener], "inside.txt")
    ok, text = resume(settings, ToolCall("r1", "attack", {"targets": args}))
    assert ok, text
    seen = json.loads(text)
    for name, errno_name in REFUSED[layer].items():
        assert seen[name] == errno_name, (layer, name, seen)
    assert seen["ptrace_parent"] == "EPERM"
    # This call needs no network, so it gets none, though its worker still has it.
    assert seen[f"connect_{listener}"] == "EPERM"
    assert seen["write_inside"] == "allowed" and seen["read_inside"] == "allowed"
    assert (settings.workspace / "inside.txt").read_text() == "x"


def test_a_planted_symlink_to_the_vault_reads_nothing_through_an_approved_shell(
    layer: str, planted: Settings
) -> None:
    settings = confined(planted, layer)
    settings.workspace.mkdir(parents=True, exist_ok=True)
    os.symlink(settings.vault / "x", settings.workspace / "todo2.txt")
    ok, text = resume(settings, ToolCall("r1", "run_shell", {"command": "cat todo2.txt"}))
    assert not ok
    assert "the-vault-secret" not in text


def test_an_approved_shell_keeps_the_network_and_writes_the_workspace(
    layer: str, planted: Settings, listener: int
) -> None:
    settings = confined(planted, layer)
    script = (
        f"import socket; socket.create_connection(('127.0.0.1', {listener}), timeout=2).close(); "
        "open('fetched.txt', 'w').write('ok'); print('connected')"
    )
    command = f'{sys.executable} -c "{script}" | tr a-z A-Z > shout.txt && cat shout.txt'
    ok, text = resume(settings, ToolCall("r1", "run_shell", {"command": command}))
    assert (ok, text.strip()) == (True, "CONNECTED"), text
    assert (settings.workspace / "fetched.txt").read_text() == "ok"
