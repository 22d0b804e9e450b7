"""Order in a resumed turn: the one owner-approved RISKY call runs before the FREE-turn network
confinement closes (in its own child, with the network it declares it needs); everything after
it — here the self-coded probe — runs inside."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

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
from .probe import PROBE_TOOL, calls, converse, finish, load, outputs, promote, say, targets

SCHEMA: dict[str, Any] = {"type": "object", "properties": {"port": {"type": "integer"}}}


def reach_out(ctx: Any, port: int) -> str:
    """The approved RISKY call: it needs the network the FREE turn does not get."""
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return "connected"


def with_reach_out(settings: Settings) -> Registry:
    registry = build_registry(settings)
    definition = ToolDefinition("reach_out", "connect", SCHEMA, Tier.RISKY)
    registry.add(ToolSpec(definition, reach_out, network=lambda _args: True))
    return registry


def parked_resume(port: int, approved: bool) -> ResumeRequest:
    risky = ToolCall("r1", "reach_out", {"port": port})
    parked = RequestToolApproval(
        risky,
        f"reach_out({port})",
        (
            Message(Role.SYSTEM, "sys"),
            Message(Role.USER, "reach out"),
            Message(Role.ASSISTANT, "", (risky,)),
        ),
    )
    return ResumeRequest("t-res", 7, parked, approved)


def resume_then_probe(
    settings: Settings, tmp_path: Path, user_home: Path, port: int, approved: bool
) -> tuple[dict[str, tuple[bool, str]], dict[str, Any]]:
    promote(settings, "probe", PROBE_TOOL)
    args = targets(settings, user_home, tmp_path / "out.txt", [port], str(settings.workspace / "i"))
    handle = spawn_resume(parked_resume(port, approved), settings, registry_factory=with_reach_out)
    try:
        jobs, result = converse(
            handle,
            [calls(ToolCall("c-probe", "probe", {"targets": args})), say("done")],
        )
    finally:
        code = finish(handle)
    assert code == EXIT_OK and result.reply == "done"
    found = outputs(jobs[-1])
    return found, load(found["c-probe"][1])


def test_approved_call_reaches_out_then_confinement_closes(
    planted: Settings, tmp_path: Path, user_home: Path, listener: int
) -> None:
    found, probe = resume_then_probe(
        confined(planted, "landlock"), tmp_path, user_home, listener, approved=True
    )
    assert found["r1"] == (True, "connected")
    assert probe[f"connect_{listener}"] == "EPERM"
    assert probe["read_vault"] == "EACCES"
    assert probe["ptrace_parent"] == "EPERM"


def test_approved_call_runs_before_the_namespace_closes_too(
    planted: Settings, tmp_path: Path, user_home: Path, listener: int
) -> None:
    found, probe = resume_then_probe(
        confined(planted, "userns"), tmp_path, user_home, listener, approved=True
    )
    assert found["r1"] == (True, "connected")
    assert probe[f"connect_{listener}"] == "EPERM"
    assert probe["read_vault"] == "ENOENT"


def test_denied_resume_is_confined_like_a_free_turn(
    planted: Settings, tmp_path: Path, user_home: Path, listener: int
) -> None:
    found, probe = resume_then_probe(
        confined(planted, "landlock"), tmp_path, user_home, listener, approved=False
    )
    assert not found["r1"][0]  # "denied by owner"
    assert probe[f"connect_{listener}"] == "EPERM"
    assert probe["read_vault"] == "EACCES"
