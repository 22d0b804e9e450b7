"""A confined worker, each filesystem layer forced in turn: a promoted self-coded tool tries
what a hostile one would, and the kernel refuses each attempt with the layer's errno, while
FREE tools, the discovered tool itself and writes inside the workspace keep working. The toolbox
is among the targets: a tool cannot plant a module or a manifest in the live tools, change a
live tool, or reach the rest of the toolbox (issue 17). Without a filesystem layer no
self-coded tool is offered or run at all.

Attack inspiration: see ``probe.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from shelldon.config import Settings, load_settings
from shelldon.contracts import ToolCall, TurnRequest
from shelldon.proc import sandbox
from shelldon.worker.handle import EXIT_OK
from shelldon.worker.spawn import spawn_turn
from tests.unit.worker.brain import reachable

from .conftest import confined
from .probe import (
    PROBE_TOOL,
    calls,
    converse,
    finish,
    load,
    outputs,
    promote,
    say,
    targets,
    toolbox_attacks,
)

# What each layer answers; "allowed" marks what only another layer (or none) would stop.
REFUSED_BY = {
    "landlock": {
        "read_vault": "EACCES",
        "read_database": "EACCES",
        "read_ssh_key": "EACCES",
        "read_shadow": "EACCES",
        "write_outside": "EACCES",
        "ptrace_parent": "EPERM",
        "open_parent_mem": "EACCES",
        "read_parent_environ": "EACCES",
        "connect": "EPERM",
    },
    "userns": {
        # Only the allowed paths exist in the namespace: the rest is simply not there.
        "read_vault": "ENOENT",
        "read_database": "ENOENT",
        "read_ssh_key": "ENOENT",
        "read_shadow": "ENOENT",
        "write_outside": "EROFS",  # the new root is a read-only tmpfs
        "ptrace_parent": "EPERM",
        "open_parent_mem": "EACCES",
        "read_parent_environ": "EACCES",
        "connect": "EPERM",
    },
}
LAYERS = tuple(REFUSED_BY)

# What a tool may do to the process that forked its worker (the zygote), by its pid as /proc
# shows it: nothing. ESRCH: no such process in its PID namespace; the pidfd of that process
# (an open /proc/<pid>) is refused where /proc/<pid> can be opened at all.
PROCESS_REFUSED_BY = {
    "landlock": {
        "signal_service": "ESRCH",
        "renice_service": "ESRCH",
        "prlimit_service": "ESRCH",
        "pidfd_signal_service": "EACCES",
        "ptrace_service": "EPERM",
    },
    "userns": {
        "signal_service": "ESRCH",
        "renice_service": "ESRCH",
        "prlimit_service": "ESRCH",
        "pidfd_signal_service": "EINVAL",
        "ptrace_service": "EPERM",
    },
}

# The toolbox, as a worker's tool sees it: the live tools read-only, nothing else of it.
TOOLBOX_REFUSED_BY = {
    "landlock": {
        "read_live_tool": "allowed",
        "read_kept_test": "EACCES",
        "plant_live_module": "EACCES",
        "write_live_manifest": "EACCES",
        "write_live_tool": "EACCES",
        "plant_in_staging": "EACCES",
        "link_live_tool": "EXDEV",
    },
    "userns": {
        "read_live_tool": "allowed",
        "read_kept_test": "ENOENT",
        "plant_live_module": "EROFS",  # a read-only bind of the live directory
        "write_live_manifest": "EROFS",
        "write_live_tool": "EROFS",
        "plant_in_staging": "ENOENT",
        "link_live_tool": "EXDEV",  # across mounts
    },
}


def run_probe(
    settings: Settings, tmp_path: Path, user_home: Path, ports: list[int]
) -> dict[str, Any]:
    """One real turn in a forked worker: the model calls the probe and three FREE tools."""
    promote(settings, "probe", PROBE_TOOL)
    (settings.workspace / "notes.txt").write_text("hello from the workspace")
    toolbox = toolbox_attacks(settings, "probe", str(settings.workspace / "linked.py"))
    args = targets(
        settings,
        user_home,
        tmp_path / "outside.txt",
        ports,
        str(settings.workspace / "in.txt"),
        toolbox,
        {"service": os.getpid()},  # the worker's forker: the zygote's stand-in
    )
    handle = spawn_turn(TurnRequest("t-sbx", 7, "probe"), settings)
    try:
        jobs, result = converse(
            handle,
            [
                calls(
                    ToolCall("c-probe", "probe", {"targets": args}),
                    ToolCall("c-read", "read_file", {"path": "notes.txt"}),
                    ToolCall("c-list", "list_dir", {"path": "."}),
                    ToolCall("c-eval", "python_eval", {"code": "sum(range(10))"}),
                    ToolCall("c-jail", "read_file", {"path": "../vault/x"}),
                ),
                say("done"),
            ],
        )
    finally:
        code = finish(handle)
    assert result.reply == "done" and code == EXIT_OK
    found = outputs(jobs[-1])
    return {"probe": load(found["c-probe"][1]), "free": found}


@pytest.fixture(params=LAYERS)
def layer(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def report(
    layer: str, planted: Settings, tmp_path: Path, user_home: Path, listener: int
) -> dict[str, Any]:
    return run_probe(confined(planted, layer), tmp_path, user_home, [listener])


def test_each_layer_refuses_what_it_claims_with_its_errno(
    layer: str, report: dict[str, Any], listener: int
) -> None:
    probe = report["probe"]
    for attack, errno_name in REFUSED_BY[layer].items():
        key = f"connect_{listener}" if attack == "connect" else attack
        assert probe[key] == errno_name, (layer, attack, probe)


def test_no_tool_can_change_the_toolbox_under_either_layer(
    layer: str, report: dict[str, Any], planted: Settings
) -> None:
    probe = report["probe"]
    assert {k: probe[k] for k in TOOLBOX_REFUSED_BY[layer]} == TOOLBOX_REFUSED_BY[layer]
    live = planted.live_tools
    assert sorted(p.name for p in live.iterdir()) == ["manifest.json", "probe.py"]
    assert (live / "probe.py").read_text() == PROBE_TOOL
    assert not (planted.workspace / "linked.py").exists()


def test_workspace_stays_readable_and_writable_inside(report: dict[str, Any]) -> None:
    assert report["probe"]["write_inside"] == "allowed"
    assert report["probe"]["read_inside"] == "allowed"


def test_free_tools_still_work_when_confined(report: dict[str, Any]) -> None:
    free = report["free"]
    assert free["c-read"] == (True, "hello from the workspace")
    assert free["c-list"][0] and "notes.txt" in free["c-list"][1]
    assert free["c-eval"] == (True, "45")


@pytest.mark.parametrize("mode", ["best-effort", "off"])
def test_without_a_filesystem_layer_no_self_coded_tool_is_offered_or_run(
    mode: str, planted: Settings, tmp_path: Path, user_home: Path
) -> None:
    # Issue 17: with the path jail alone, a promoted tool read the vault and the parent's
    # memory. There, self-coded tools are not discovered, so the model cannot call one.
    settings = confined(planted, "none", mode=mode)
    promote(settings, "probe", PROBE_TOOL)
    args = targets(settings, user_home, tmp_path / "outside.txt", [], "in.txt")
    handle = spawn_turn(TurnRequest("t-none", 7, "probe"), settings)
    try:
        jobs, result = converse(
            handle, [calls(ToolCall("c-probe", "probe", {"targets": args})), say("done")]
        )
    finally:
        code = finish(handle)
    assert result.reply == "done" and code == EXIT_OK
    assert "probe" not in reachable(jobs[0])
    ok, text = outputs(jobs[-1])["c-probe"]
    assert not ok and "unknown tool" in text.lower()
    assert "the-vault-secret" not in text
    assert not (tmp_path / "outside.txt").exists()


@pytest.mark.skipif(sandbox.landlock_abi() < 1, reason="the kernel has no Landlock")
def test_no_ruleset_is_prebuilt_for_a_workspace_that_does_not_exist_yet(tmp_path: Path) -> None:
    # A rule can only name an existing path: a ruleset prepared before the workspace existed
    # (a zygote started on a fresh home) would lock every later worker out of it.
    settings = confined(load_settings(environ={"SHELLDON_HOME": str(tmp_path / "h")}), "landlock")
    rulesets = sandbox.Rulesets()
    assert not settings.workspace.exists()

    before = sandbox.prepare_worker(settings, rulesets)
    assert before.ruleset_fd is None and rulesets.fds() == ()

    settings.workspace.mkdir(parents=True)
    after = sandbox.prepare_worker(settings, rulesets)
    (fd,) = rulesets.fds()
    assert after.ruleset_fd == fd and after.keep_fds() == (fd,)
    os.close(fd)
    for confinement in (before, after):
        if confinement.cgroup is not None:
            confinement.cgroup.close()


def test_no_tool_can_reach_a_process_outside_its_turn(
    layer: str, report: dict[str, Any], planted: Settings
) -> None:
    # Issue 23: under the namespace layer a self-coded tool SIGSTOPped the zygote (same uid,
    # no PID namespace). In a PID namespace of its own no pid outside has a name.
    probe = report["probe"]
    reached = {k: v for k, v in probe.items() if k.endswith("_service")}
    print(layer, reached)
    assert sandbox.plan(confined(planted, layer).sandbox).pidns
    assert reached == PROCESS_REFUSED_BY[layer], reached
