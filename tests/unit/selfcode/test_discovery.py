"""Worker-side discovery: live tools are FREE on the next turn from the manifest core wrote
from the owner's approvals, imported only when called and only from the approved bytes, and a
broken module costs a strike without wedging anything else.

These run discovery and the tools in the test's own process (``require_fs_layer`` off); that a
worker cannot write the toolbox at all is tested under both filesystem layers in
tests/integration/sandbox/test_toolbox.py.

Attack inspiration: the seed's quarantine story (a module that raises on import), a live file
edited behind the gate's back, a manifest that is missing or corrupt (the old discovery then
loaded whatever was on disk), or hostile (an entry pointing outside the live directory), a
symlink or hard link in place of a live file; issue 17's "no confinement, no self-coded tools".
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from shelldon.config import SandboxSettings, Settings
from shelldon.contracts import Role, Tier, ToolCall, ToolDefinition, TurnRequest
from shelldon.toolbox.manifest import code_hash
from shelldon.toolbox.toolbox import Toolbox
from shelldon.worker.loop import run_turn
from shelldon.worker.tools import context_from_settings
from shelldon.worker.tools.registry import Registry, ToolContext, ToolSpec, execute_tool
from shelldon.worker.tools.selfcoded import MODULE_PREFIX, Discovery, discover
from tests.unit.worker.brain import ScriptedBrain, calls, catalogued, say
from tests.unit.worker.brain import call as brain_call

from .samples import ADDER, ADDER_TEST, tool
from .samples import promote as promote_tested


@pytest.fixture
def ctx(settings: Settings) -> ToolContext:
    return dataclasses.replace(context_from_settings(settings), require_fs_layer=False)


def registry_with(ctx: ToolContext) -> Registry:
    registry = Registry(ctx)
    registry.add_all(discover(ctx))
    return registry


def promote(sc: Toolbox, name: str, code: str) -> None:
    promote_tested(sc, name, code)


def call(registry: Registry, name: str, **args: object):
    return execute_tool(registry, ToolCall(f"c-{name}", name, dict(args)))


def test_promoted_tool_is_free_and_callable_next_turn(sc: Toolbox, ctx: ToolContext) -> None:
    promote_tested(sc, "adder", ADDER, ADDER_TEST)
    registry = registry_with(ctx)
    spec = registry.specs["adder"]
    assert spec.self_coded
    assert spec.definition.tier is Tier.FREE
    assert spec.definition.description == "Add one to a number."
    result = call(registry, "adder", a=41)
    assert (result.ok, result.content) == (True, "42")


def test_discovery_imports_nothing_until_a_call(sc: Toolbox, ctx: ToolContext) -> None:
    marker = sc.toolbox.parent / "imported"
    promote(sc, "lazy", tool(head=f"open({str(marker)!r}, 'w').close()"))
    before = {m for m in sys.modules if m.startswith(MODULE_PREFIX + "lazy")}
    registry = registry_with(ctx)
    assert not marker.exists()
    assert {m for m in sys.modules if m.startswith(MODULE_PREFIX + "lazy")} == before
    assert call(registry, "lazy").ok
    assert marker.exists()


def test_run_gets_only_the_models_arguments(sc: Toolbox, ctx: ToolContext) -> None:
    code = (
        'DESCRIPTION = "echo"\n'
        'PARAMS_SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}}\n'
        "def run(*args, **kwargs):\n    return [args, kwargs]\n"
    )
    promote(sc, "echo", code)
    result = call(registry_with(ctx), "echo", x=3)
    assert result.content == "[(), {'x': 3}]"  # no ToolContext, non-str result stringified


def test_module_that_fails_to_import_is_a_strike_and_others_still_work(
    sc: Toolbox, ctx: ToolContext
) -> None:
    promote(sc, "adder", ADDER)
    promote(sc, "boom", tool(head="raise RuntimeError('broken at import')"))
    registry = registry_with(ctx)
    result = call(registry, "boom")
    assert not result.ok
    assert "broken at import" in result.content
    assert [(f.name, f.call_id) for f in registry.failures] == [("boom", "c-boom")]
    assert call(registry, "adder", a=1).content == "2"
    assert not any(m.startswith(MODULE_PREFIX + "boom") for m in sys.modules)


def test_tool_that_raises_is_a_strike(sc: Toolbox, ctx: ToolContext) -> None:
    promote(sc, "divider", tool(body="return str(1 / 0)"))
    registry = registry_with(ctx)
    result = call(registry, "divider")
    assert not result.ok and "ZeroDivisionError" in result.content
    assert [f.name for f in registry.failures] == ["divider"]


def test_module_whose_run_is_replaced_at_import_breaks_convention(
    sc: Toolbox, ctx: ToolContext
) -> None:
    promote(sc, "shifty", tool() + "run = 'not a function'\n")
    registry = registry_with(ctx)
    result = call(registry, "shifty")
    assert not result.ok and "breaks the tool convention" in result.content
    assert [f.name for f in registry.failures] == ["shifty"]


def test_live_module_edited_after_approval_refuses_to_run(sc: Toolbox, ctx: ToolContext) -> None:
    promote(sc, "adder", ADDER)
    registry = registry_with(ctx)
    marker = sc.toolbox.parent / "ran"
    (sc.live_dir / "adder.py").write_text(tool(head=f"open({str(marker)!r}, 'w').close()"))
    result = call(registry, "adder", a=1)
    assert not result.ok and "not the code the owner approved" in result.content
    assert [f.name for f in registry.failures] == ["adder"]
    assert not marker.exists()  # the changed bytes were never executed


@pytest.mark.parametrize("kind", ["symlink", "hard link", "fifo"])
def test_a_live_file_that_is_a_link_or_special_file_is_never_read(
    sc: Toolbox, ctx: ToolContext, tmp_path: Path, kind: str
) -> None:
    promote(sc, "adder", ADDER)
    registry = registry_with(ctx)
    live = sc.live_dir / "adder.py"
    elsewhere = tmp_path / "elsewhere.py"
    elsewhere.write_text(ADDER)  # the approved bytes, even: a second name is still refused
    live.unlink()
    if kind == "symlink":
        live.symlink_to(elsewhere)
    elif kind == "hard link":
        os.link(elsewhere, live)
    else:
        os.mkfifo(live)  # opened blocking, this would hang the worker
    result = call(registry, "adder", a=1)
    assert not result.ok and "cannot load adder.py" in result.content


def test_an_approved_module_that_breaks_the_convention_is_left_out_and_logged(
    sc: Toolbox, ctx: ToolContext, capsys: pytest.CaptureFixture[str]
) -> None:
    # Not offered, so never called: no call of it failed, and no strike is due (issue 30).
    promote(sc, "adder", ADDER)
    sc.promote("bad", "def run(:\n", expected_hash=code_hash("def run(:\n"))  # no gate here
    assert [s.name for s in discover(ctx)] == ["adder"]
    out = capsys.readouterr().out
    assert "selfcoded_module_broken" in out and "syntax error" in out


def test_a_tampered_tool_is_skipped_and_logged_without_a_strike(
    sc: Toolbox, ctx: ToolContext, capsys: pytest.CaptureFixture[str]
) -> None:
    promote(sc, "adder", ADDER)
    (sc.live_dir / "adder.py").write_text(ADDER.replace("a + 1", "a + 2"))
    promote(sc, "other", tool())  # the manifest is rewritten from the store
    assert [s.name for s in discover(ctx)] == ["other"]
    assert "selfcoded_module_tampered" in capsys.readouterr().out


def test_file_not_in_manifest_is_ignored(
    sc: Toolbox, ctx: ToolContext, capsys: pytest.CaptureFixture[str]
) -> None:
    promote(sc, "adder", ADDER)
    (sc.live_dir / "smuggled.py").write_text(tool())
    assert [s.name for s in discover(ctx)] == ["adder"]
    assert "selfcoded_modules_not_in_manifest" in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["missing", "corrupt", "wrong_shape", "old_format"])
def test_an_unusable_manifest_offers_no_tool_at_all(
    sc: Toolbox, ctx: ToolContext, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The old discovery fell back to an AST listing of whatever the directory held.
    promote(sc, "adder", ADDER)
    (sc.live_dir / "smuggled.py").write_text(tool())
    manifest = sc.live_dir / "manifest.json"
    if damage == "missing":
        manifest.unlink()
    elif damage == "corrupt":
        manifest.write_text('{"format": 2, "tools": [')
    elif damage == "wrong_shape":
        manifest.write_text(json.dumps({"format": 2, "tools": [{"name": 3}], "broken": []}))
    else:
        manifest.write_text(json.dumps({"format": 1, "tools": [], "broken": []}))
    assert discover(ctx) == []
    assert "selfcoded_manifest_unusable" in capsys.readouterr().out
    sc.reconcile()  # the next start writes it again, from the store
    assert [s.name for s in discover(ctx)] == ["adder"]


def test_manifest_entry_pointing_outside_tools_is_refused(
    sc: Toolbox, ctx: ToolContext, tmp_path: Path
) -> None:
    outside = tmp_path / "evil.py"
    outside.write_text(tool())
    promote(sc, "adder", ADDER)
    manifest = sc.live_dir / "manifest.json"
    data = json.loads(manifest.read_text())
    data["tools"][0]["file"] = "../../../evil.py"
    manifest.write_text(json.dumps(data))
    found = discover(ctx)
    assert found == []


def test_no_tools_dir_means_no_tools(ctx: ToolContext) -> None:
    assert discover(ctx) == []
    assert discover(ctx) == []
    assert discover(dataclasses.replace(ctx, live_tools=None)) == []


@pytest.mark.parametrize(("mode", "fs"), [("off", "auto"), ("best-effort", "none")])
def test_without_a_filesystem_layer_nothing_is_discovered(
    settings: Settings,
    sc: Toolbox,
    mode: str,
    fs: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    promote(sc, "adder", ADDER)
    bare = dataclasses.replace(settings, sandbox=SandboxSettings(mode=mode, fs=fs))
    ctx = context_from_settings(bare)
    assert "self-coded tools are off" in ctx.selfcoded_off
    assert discover(ctx) == []
    assert "selfcoded_tools_off" in capsys.readouterr().out


def test_a_tool_refuses_to_run_in_a_process_without_its_filesystem_layer(
    settings: Settings, sc: Toolbox
) -> None:
    # This test's own process is not confined: a worker whose layer failed to apply, or a
    # resumed worker before its approved call is done, is in the same position.
    promote(sc, "adder", ADDER)
    registry = registry_with(context_from_settings(settings))
    result = call(registry, "adder", a=1)
    assert not result.ok and "only under the filesystem sandbox" in result.content
    assert registry.failures == []  # the tool did not run: no strike


def test_quarantined_tool_disappears_and_restored_tool_returns(
    sc: Toolbox, ctx: ToolContext
) -> None:
    promote(sc, "adder", ADDER)
    sc.quarantine("adder", "three strikes")
    assert discover(ctx) == []
    sc.restore("adder")
    assert [s.name for s in discover(ctx)] == ["adder"]


def test_a_quarantined_tool_is_never_in_the_catalogue_nor_callable(
    settings: Settings, sc: Toolbox, ctx: ToolContext
) -> None:
    # The catalogue is built from discovery: a quarantined tool is not in the manifest, so the
    # model neither sees it listed nor can load it or call it by name.
    promote(sc, "adder", ADDER)
    promote(sc, "other", tool())
    sc.quarantine("adder", "three strikes")
    script = [
        calls(
            brain_call("describe_tools", "d", names=["adder", "other"]),
            brain_call("adder", "a", a=1),
        ),
        say("ok"),
    ]
    brain = ScriptedBrain(script)
    run_turn(TurnRequest("t", 1, "hi"), registry_with(ctx), brain, settings, 1e12)
    first = brain.jobs[0]
    assert catalogued(first) == {"other"}
    assert "adder" not in first.messages[0].content
    described, called = [m for m in brain.jobs[1].messages if m.role is Role.TOOL]
    assert "not in your catalogue: adder" in described.content
    assert "other: A tool." in described.content
    assert called.is_error and "unknown tool 'adder'" in called.content
    assert "adder" not in {t.name for t in brain.jobs[1].tools}


def test_builtin_wins_a_name_collision(sc: Toolbox, ctx: ToolContext) -> None:
    promote(sc, "read_file", tool(body="return 'self-coded'"))
    registry = Registry(ctx)
    builtin = ToolDefinition("read_file", "built-in", {"type": "object", "properties": {}})
    registry.add(ToolSpec(builtin, lambda _ctx: "built-in"))
    registry.add_all(discover(ctx))
    assert call(registry, "read_file").content == "built-in"
    assert not registry.specs["read_file"].self_coded


def test_replaced_tool_runs_the_new_code_in_the_same_process(sc: Toolbox, ctx: ToolContext) -> None:
    promote(sc, "adder", ADDER)
    assert call(registry_with(ctx), "adder", a=1).content == "2"
    promote_tested(sc, "adder", ADDER.replace("a + 1", "a + 2"), replace=True)
    assert call(registry_with(ctx), "adder", a=1).content == "3"


def test_unchanged_toolbox_is_reused_and_any_change_rebuilds(sc: Toolbox, ctx: ToolContext) -> None:
    promote(sc, "adder", ADDER)
    memory = Discovery()
    first = discover(ctx, memory)
    assert discover(ctx, memory)[0] is first[0]  # same manifest bytes, same files: no rebuild
    assert discover(ctx)[0] is not first[0]  # no memory handed over: built afresh
    promote(sc, "other", tool())
    second = discover(ctx, memory)
    assert [s.name for s in second] == ["adder", "other"]
    assert second[0] is not first[0]
    (sc.live_dir / "stray.py").write_text(tool())  # a new file alone also triggers a rebuild
    assert discover(ctx, memory)[0] is not second[0]


def test_worker_forked_after_discovery_inherits_the_result(sc: Toolbox, ctx: ToolContext) -> None:
    promote(sc, "adder", ADDER)
    memory = Discovery()  # the zygote's, handed to each worker it forks
    parent = discover(ctx, memory)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: one answer, then out without running pytest's teardown
        try:
            child = discover(ctx, memory)
            os.write(write_end, b"same" if child[0] is parent[0] else b"rebuilt")
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 16)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert answer == b"same"
