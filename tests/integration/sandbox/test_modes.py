"""``[sandbox] mode``: required refuses to start without seccomp and a filesystem layer, off
applies nothing, and doctor's lines say which layer is active."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from shelldon.config import ConfigError, Settings, load_settings
from shelldon.contracts import Tier, ToolCall, TurnRequest
from shelldon.proc import sandbox
from shelldon.worker.spawn import spawn_turn
from tests.unit.worker.test_spawn import registry_with

from .conftest import confined
from .probe import ATTACKS, calls, converse, finish, load, outputs, say, targets


def test_required_refuses_to_start_without_a_filesystem_layer(settings: Settings) -> None:
    strict = confined(settings, "none", mode="required")
    with pytest.raises(sandbox.SandboxError, match="filesystem layer"):
        sandbox.check_required(strict)


@pytest.mark.parametrize("layer", ["landlock", "userns"])
def test_required_starts_where_the_kernel_offers_the_layers(settings: Settings, layer: str) -> None:
    sandbox.check_required(confined(settings, layer, mode="required"))


def test_doctor_lines_name_each_layer_and_whether_it_is_active(settings: Settings) -> None:
    lines = {name: (active, detail) for name, active, detail in sandbox.describe(settings)}
    assert {"seccomp", "landlock", "user+mount namespace", "filesystem layer"} <= set(lines)
    assert lines["seccomp"][0] and lines["landlock"][0]  # this machine: ABI 7, libseccomp
    assert "ABI" in lines["landlock"][1]
    off = confined(settings, "landlock", mode="off")
    assert not any(active for _name, active, _ in sandbox.describe(off))


def test_forced_userns_line_says_so(settings: Settings) -> None:
    lines = {n: a for n, a, _ in sandbox.describe(confined(settings, "userns"))}
    assert lines["user+mount namespace"] and not lines["landlock"]


def test_mode_off_confines_nothing(
    planted: Settings, tmp_path: Path, user_home: Path, listener: int
) -> None:
    # Self-coded tools are off there (test_worker), so the probe runs as a built-in would.
    settings = confined(planted, "landlock", mode="off")
    namespace: dict[str, Any] = {}
    exec(compile(ATTACKS, "probe", "exec"), namespace)

    def probe(_ctx: Any, targets: str) -> str:
        return json.dumps(namespace["attack"](targets))

    factory = registry_with(("probe", probe, Tier.FREE))
    args = targets(settings, user_home, tmp_path / "outside.txt", [listener], "in.txt")
    handle = spawn_turn(TurnRequest("t-off", 7, "probe"), settings, registry_factory=factory)
    try:
        jobs, _result = converse(
            handle, [calls(ToolCall("c-probe", "probe", {"targets": args})), say("done")]
        )
    finally:
        finish(handle)
    probe = load(outputs(jobs[-1])["c-probe"][1])
    assert probe["read_vault"] == "allowed"
    assert probe[f"connect_{listener}"] == "allowed"


def test_environment_forces_the_layer_and_a_bad_one_names_the_key(home: Path) -> None:
    env = {"SHELLDON_HOME": str(home), "SHELLDON_SANDBOX_FS": "userns"}
    assert load_settings(environ=env).sandbox.fs == "userns"
    with pytest.raises(ConfigError, match=r"sandbox\.fs"):
        load_settings(environ={**env, "SHELLDON_SANDBOX_FS": "bubblewrap"})


def test_allowed_paths_never_include_the_home_around_the_workspace(settings: Settings) -> None:
    ro, rw = sandbox.allowed_paths((settings.workspace,), (settings.vault, settings.database))
    home = str(settings.home.resolve())
    assert not any(home == p or home.startswith(p.rstrip("/") + "/") for p in ro)
    assert str(settings.workspace.resolve()) in rw


def test_doctor_says_what_is_weaker_without_a_pid_namespace_or_a_cgroup(settings: Settings) -> None:
    # Issue 23: where no cgroup is delegated (a plain `shelldon chat`), doctor says what a turn
    # then lacks, and whether its stragglers still end with it.
    lines = {n: (a, d) for n, a, d in sandbox.describe(settings)}
    assert not settings.sandbox.cgroup and sandbox.cgroup_parent(settings.sandbox) is None
    active, detail = lines["pid namespace"]
    assert active == sandbox.pidns_available()
    if active:
        assert "can signal, renice or prlimit no process outside its turn" in detail
    cgroup_active, weaker = lines["cgroup per turn"]
    assert not cgroup_active
    assert "RLIMIT_AS" in weaker and "TasksMax" in weaker
    assert "stragglers still end with the turn" in weaker
    off = dataclasses.replace(settings, sandbox=dataclasses.replace(settings.sandbox, pidns="off"))
    lines = {n: (a, d) for n, a, d in sandbox.describe(off)}
    assert lines["pid namespace"][0] is False
    assert "may signal the service's processes" in lines["pid namespace"][1]
    assert "setsid daemon may outlive its turn" in lines["cgroup per turn"][1]
