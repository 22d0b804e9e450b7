"""The toolbox's lifecycle in ``Toolbox`` (issue 20, point 5): a retired tool's approval goes
first, so discovery drops it at once, and its file and kept test are archived together; a
replacement is measured against the approved version and never touches it before promotion,
and a promotion shown as a diff against one version is refused once the tool is another.

Attack inspiration: a model that proposes a "replacement" under another tool's name to slip a
change past the owner; a retire that only deletes a file while the manifest still lists it; an
approval tapped long after the tool it was diffed against was replaced or retired."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from shelldon.config import Settings
from shelldon.contracts import ToolCall
from shelldon.toolbox.diff import replacement_diff, replaces_line
from shelldon.toolbox.manifest import code_hash, read_manifest
from shelldon.toolbox.toolbox import Toolbox, ToolboxError
from shelldon.worker.tools import context_from_settings
from shelldon.worker.tools.registry import Registry, ToolContext, execute_tool
from shelldon.worker.tools.selfcoded import discover

from .samples import ADDER, ADDER_TEST, promote

ADDER2 = ADDER.replace("return str(a + 1)", "return str(a + 2)")
ADDER2_TEST = ADDER_TEST.replace('== "2"', '== "3"')


def live_registry(settings: Settings) -> Registry:
    ctx: ToolContext = dataclasses.replace(context_from_settings(settings), require_fs_layer=False)
    registry = Registry(ctx)
    registry.add_all(discover(ctx))
    return registry


def test_retire_withdraws_the_approval_and_archives_code_and_test(
    sc: Toolbox, settings: Settings
) -> None:
    promote(sc, "adder", ADDER, ADDER_TEST)
    assert "adder" in live_registry(settings).specs
    retired = sc.retire("adder")
    assert (retired.name, retired.state, retired.code_hash) == ("adder", "live", code_hash(ADDER))
    assert sc.store.tools.approval("adder") is None and sc.live() == ()
    assert [e.name for e in read_manifest(sc.live_dir).entries] == []
    assert "adder" not in live_registry(settings).specs
    result = execute_tool(live_registry(settings), ToolCall("c1", "adder", {"a": 1}))
    assert not result.ok
    assert retired.archive.parent == sc.retired_dir
    assert (retired.archive / "adder.py").read_text() == ADDER
    assert (retired.archive / "test_adder.py").read_text() == ADDER_TEST
    assert not (sc.live_dir / "adder.py").exists() and sc.kept_test("adder") is None
    assert sc.tampered() == ()


def test_a_quarantined_tool_can_be_retired_with_its_note(sc: Toolbox) -> None:
    promote(sc, "adder", ADDER, ADDER_TEST)
    sc.quarantine("adder", "3 strikes")
    retired = sc.retire("adder")
    assert retired.state == "quarantined"
    assert (retired.archive / "adder.reason").read_text() == "3 strikes"
    assert sc.quarantined() == () and not list(sc.quarantine_dir.iterdir())


def test_retire_refuses_what_is_not_a_tool(sc: Toolbox) -> None:
    with pytest.raises(ToolboxError, match="no live or quarantined tool named 'ghost'"):
        sc.retire("ghost")
    with pytest.raises(ToolboxError):
        sc.retire("../live/adder")


def test_a_retired_name_can_be_proposed_afresh(sc: Toolbox) -> None:
    promote(sc, "adder", ADDER, ADDER_TEST)
    sc.retire("adder")
    promote(sc, "adder", ADDER2, ADDER2_TEST)
    assert sc.approved_hash("adder") == code_hash(ADDER2)
    assert len(list(sc.retired_dir.iterdir())) == 1


def test_a_replacement_is_measured_against_the_approved_version(sc: Toolbox) -> None:
    assert sc.replacement_base("adder", "") is None
    with pytest.raises(ToolboxError, match="no tool named 'adder' to replace"):
        sc.replacement_base("adder", "adder")
    promote(sc, "adder", ADDER, ADDER_TEST)
    base = sc.replacement_base("adder", "adder")
    assert base is not None
    assert (base.code, base.test, base.code_hash) == (
        ADDER.encode(),
        ADDER_TEST.encode(),
        code_hash(ADDER),
    )
    with pytest.raises(ToolboxError, match="keeps its tool's name"):
        sc.replacement_base("evil_twin", "adder")


def test_a_tampered_tool_has_nothing_to_diff_against(sc: Toolbox) -> None:
    promote(sc, "adder", ADDER, ADDER_TEST)
    (sc.live_dir / "adder.py").write_text(ADDER2)
    assert sc.live_source("adder") is None
    with pytest.raises(ToolboxError, match="not the code the owner approved"):
        sc.replacement_base("adder", "adder")


def test_staging_a_replacement_leaves_the_live_tool_as_it_is(sc: Toolbox) -> None:
    live = promote(sc, "adder", ADDER, ADDER_TEST)
    before = os.stat(live)
    staged = sc.stage("adder", ADDER2, ADDER2_TEST, replace=True)
    assert staged.directory.parent == sc.staging_dir
    after = os.stat(live)
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    assert live.read_text() == ADDER and sc.approved_hash("adder") == code_hash(ADDER)


def test_a_promotion_diffed_against_another_version_is_refused(sc: Toolbox) -> None:
    promote(sc, "adder", ADDER, ADDER_TEST)
    old = sc.approved_hash("adder")
    staged = sc.stage("adder", ADDER2, ADDER2_TEST, replace=True)
    sc.retire("adder")
    with pytest.raises(ToolboxError, match="changed since you were shown"):
        sc.promote("adder", staged.code, expected_hash=staged.code_hash, replace=True,
                   replaces_hash=old)  # fmt: skip
    assert sc.store.tools.approval("adder") is None
    promote(sc, "adder", ADDER, ADDER_TEST)
    sc.promote(
        "adder",
        staged.code,
        staged.test,
        expected_hash=staged.code_hash,
        replace=True,
        replaces_hash=sc.approved_hash("adder"),
    )
    assert (sc.live_dir / "adder.py").read_text() == ADDER2
    assert sc.kept_test("adder").read_text() == ADDER2_TEST  # type: ignore[union-attr]


def test_the_diff_shows_code_and_test_changes_and_says_when_nothing_changed() -> None:
    diff = replacement_diff("adder", ADDER, ADDER_TEST, ADDER2, ADDER_TEST)
    assert "--- live/adder.py\n+++ new/adder.py\n" in diff
    assert "-    return str(a + 1)\n+    return str(a + 2)\n" in diff
    assert "(no change to test_adder.py)" in diff
    no_newline = replacement_diff("x", "a = 1", "", "a = 2", "def test(): pass")
    assert "-a = 1\n+a = 2\n" in no_newline and "+def test(): pass\n" in no_newline


def test_the_card_line_names_when_the_live_version_was_approved() -> None:
    assert replaces_line("adder", 0.0) == "replaces adder (live since 1970-01-01 00:00 UTC)"
    assert "quarantined" in replaces_line("adder", 0.0, "quarantined")


def test_the_toolbox_has_a_private_retired_directory(sc: Toolbox, settings: Settings) -> None:
    assert sc.retired_dir == settings.home / "toolbox" / "retired"
    assert sc.retired_dir.stat().st_mode & 0o777 == 0o700
    assert not sc.retired_dir.resolve().is_relative_to(Path(settings.workspace).resolve())
