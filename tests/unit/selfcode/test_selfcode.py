"""Toolbox on disk: the toolbox lies outside the workspace, each gate run stages into a new
directory of its own, promotion writes the approved bytes to a new file and records their hash
in the store, and the manifest lists only files that hold exactly the approved bytes. No pytest
runs here (see test_gate_pytest).

Attack inspiration (issue 17, each tried on the old layout, where it got through): a module and
a manifest planted into the live directory; a corrupt manifest that made discovery load what was
on disk; a live file overwritten and then quarantined, so the manifest rewrite blessed it; a
gate test that hard-linked another pending tool's staged file, written through after that tool
was promoted.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from shelldon.config import SandboxSettings, Settings
from shelldon.store import Store
from shelldon.toolbox.manifest import code_hash, read_manifest
from shelldon.toolbox.tool_files import MAX_TOOL_BYTES
from shelldon.toolbox.toolbox import StemError, Toolbox, ToolboxError

from .samples import ADDER, ADDER_TEST, promote, tool


def promote_adder(sc: Toolbox) -> Path:
    return promote(sc, "adder", ADDER, ADDER_TEST)


def entries(sc: Toolbox) -> list[str]:
    return [e.name for e in read_manifest(sc.live_dir).entries]


def test_the_toolbox_is_outside_the_workspace(settings: Settings, sc: Toolbox) -> None:
    assert sc.toolbox == settings.home / "toolbox"
    assert sc.live_dir == settings.live_tools
    for directory in (sc.live_dir, sc.tests_dir, sc.quarantine_dir, sc.staging_dir):
        assert not directory.resolve().is_relative_to(settings.workspace.resolve())
        assert directory.stat().st_mode & 0o777 == 0o700


def test_stage_writes_the_pair_into_a_new_directory_of_its_own(sc: Toolbox) -> None:
    staged = sc.stage("adder", ADDER, ADDER_TEST)
    assert staged.directory.parent == sc.staging_dir
    assert staged.tool_path == staged.directory / "adder.py"
    assert staged.tool_path.read_text() == ADDER
    assert (staged.directory / "test_adder.py").read_text() == ADDER_TEST
    assert (staged.code, staged.test) == (ADDER.encode(), ADDER_TEST.encode())
    assert staged.code_hash == code_hash(ADDER)
    again = sc.stage("adder", ADDER, ADDER_TEST)
    assert again.directory != staged.directory  # every gate run starts from a new directory
    assert sc.live() == ()


def test_keyword_name_is_staged_with_tool_suffix(sc: Toolbox) -> None:
    staged = sc.stage("class", ADDER, ADDER_TEST)
    assert staged.name == "class_tool"
    assert staged.tool_path.name == "class_tool.py"


@pytest.mark.parametrize("name", ["../x", "__init__", "a.b", "", "t\u043e\u043el", "/etc/passwd"])
def test_bad_stem_writes_nothing(sc: Toolbox, name: str) -> None:
    with pytest.raises(StemError):
        sc.stage(name, ADDER, ADDER_TEST)
    assert list(sc.staging_dir.iterdir()) == []
    assert not (sc.toolbox / "x.py").exists()


@pytest.mark.parametrize("which", ["code", "test"])
def test_oversized_source_is_refused(sc: Toolbox, which: str) -> None:
    big = ADDER + "#" * MAX_TOOL_BYTES
    code, test = (big, ADDER_TEST) if which == "code" else (ADDER, big)
    with pytest.raises(ToolboxError, match="64 KB"):
        sc.stage("adder", code, test)
    assert list(sc.staging_dir.iterdir()) == []


def test_source_of_exactly_64_kb_is_accepted(sc: Toolbox) -> None:
    code = ADDER + "#" * (MAX_TOOL_BYTES - len(ADDER.encode()))
    assert len(code.encode()) == MAX_TOOL_BYTES
    promote(sc, "adder", code, ADDER_TEST)
    assert sc.live() == ("adder",)


def test_unencodable_text_is_refused(sc: Toolbox) -> None:
    with pytest.raises(ToolboxError, match="not valid text"):
        sc.stage("adder", ADDER + "\udcff", ADDER_TEST)


def test_promote_writes_the_approved_bytes_and_records_their_hash(
    sc: Toolbox, store: Store
) -> None:
    live = promote_adder(sc)
    assert live == sc.live_dir / "adder.py"
    assert live.read_text() == ADDER
    assert live.stat().st_nlink == 1
    assert sc.live() == ("adder",)
    approved = store.tools.approval("adder")
    assert approved is not None and (approved.code_hash, approved.state) == (
        code_hash(ADDER),
        "live",
    )
    assert not (sc.live_dir / "test_adder.py").exists()
    assert (sc.tests_dir / "test_adder.py").read_text() == ADDER_TEST
    manifest = read_manifest(sc.live_dir)
    assert [(e.name, e.description, e.code_hash) for e in manifest.entries] == [
        ("adder", "Add one to a number.", code_hash(ADDER))
    ]
    assert manifest.entries[0].params_schema["required"] == ["a"]


def test_promote_refuses_code_other_than_the_approved(sc: Toolbox) -> None:
    with pytest.raises(ToolboxError, match="not the code that was approved"):
        sc.promote("adder", ADDER, expected_hash=code_hash("something else"))
    assert sc.live() == () and not (sc.live_dir / "adder.py").exists()
    assert sc.promote("adder", ADDER, expected_hash=code_hash(ADDER)).exists()


def test_a_promotion_parked_without_its_bytes_is_refused(sc: Toolbox) -> None:
    with pytest.raises(ToolboxError, match="propose it again"):
        sc.promote("adder", b"", expected_hash=code_hash(ADDER))
    assert sc.live() == ()


def test_live_name_is_refused_unless_replacing(sc: Toolbox) -> None:
    promote_adder(sc)
    with pytest.raises(ToolboxError, match="already exists"):
        sc.stage("adder", ADDER, ADDER_TEST)
    newer = ADDER.replace("Add one", "Add one, faster")
    staged = sc.stage("adder", newer, ADDER_TEST, replace=True)
    with pytest.raises(ToolboxError, match="replacement"):
        sc.promote("adder", staged.code, expected_hash=staged.code_hash)
    sc.promote("adder", staged.code, expected_hash=staged.code_hash, replace=True)
    assert read_manifest(sc.live_dir).entries[0].description == "Add one, faster to a number."
    assert sc.approved_hash("adder") == code_hash(newer)


def test_replacing_a_quarantined_tool_drops_the_quarantined_copy(sc: Toolbox) -> None:
    promote_adder(sc)
    sc.quarantine("adder", "raised 3 times")
    with pytest.raises(ToolboxError, match="quarantine"):
        sc.stage("adder", ADDER, ADDER_TEST)
    promote(sc, "adder", ADDER, ADDER_TEST, replace=True)
    assert sc.live() == ("adder",)
    assert sc.quarantined() == ()
    assert list(sc.quarantine_dir.iterdir()) == []


def test_quarantine_moves_tool_out_of_the_manifest(sc: Toolbox, store: Store) -> None:
    promote_adder(sc)
    promote(sc, "other", tool())
    target = sc.quarantine("adder", "ZeroDivisionError three times")
    assert target == sc.quarantine_dir / "adder.py"
    assert sc.live() == ("other",)
    assert sc.quarantined() == ("adder",)
    assert entries(sc) == ["other"]
    assert sc.quarantine_reason("adder") == "ZeroDivisionError three times"
    approved = store.tools.approval("adder")
    assert approved is not None and approved.code_hash == code_hash(ADDER)  # not re-approved


def test_quarantine_of_unknown_tool_is_refused(sc: Toolbox) -> None:
    with pytest.raises(ToolboxError, match="no live tool"):
        sc.quarantine("ghost", "why")


def test_restore_brings_tool_back_live(sc: Toolbox) -> None:
    promote_adder(sc)
    sc.quarantine("adder", "strikes")
    live = sc.restore("adder")
    assert live.read_text() == ADDER
    assert sc.live() == ("adder",)
    assert sc.quarantined() == ()
    assert sc.quarantine_reason("adder") == ""
    assert entries(sc) == ["adder"]


def test_restore_without_quarantined_tool_is_refused(sc: Toolbox) -> None:
    with pytest.raises(ToolboxError, match="no quarantined tool"):
        sc.restore("adder")


def test_restore_never_overwrites_a_live_tool(sc: Toolbox) -> None:
    promote_adder(sc)
    sc.quarantine("adder", "x")
    (sc.live_dir / "adder.py").write_text("planted while it was away\n")
    with pytest.raises(ToolboxError, match="already exists"):
        sc.restore("adder")
    assert (sc.quarantine_dir / "adder.py").read_text() == ADDER


def test_manifest_writes_leave_no_temp_files(sc: Toolbox) -> None:
    promote_adder(sc)
    sc.quarantine("adder", "x")
    sc.restore("adder")
    assert sorted(p.name for p in sc.live_dir.iterdir()) == ["adder.py", "manifest.json"]


def test_corrupt_manifest_is_rewritten_from_the_store_not_the_disk(sc: Toolbox) -> None:
    promote_adder(sc)
    (sc.live_dir / "manifest.json").write_text("{not json")
    (sc.live_dir / "planted.py").write_text(tool())
    promote(sc, "other", tool())
    data = json.loads((sc.live_dir / "manifest.json").read_text())
    assert [t["name"] for t in data["tools"]] == ["adder", "other"]


def test_a_planted_module_and_manifest_are_never_blessed(sc: Toolbox) -> None:
    # The attack: a FREE tool wrote a module and a manifest listing it into the live tools.
    promote_adder(sc)
    planted = tool(body="return open('/etc/hostname').read()")
    (sc.live_dir / "planted.py").write_text(planted)
    forged = json.loads((sc.live_dir / "manifest.json").read_text())
    forged["tools"].append({**forged["tools"][0], "name": "planted", "file": "planted.py"})
    forged["tools"][-1]["code_hash"] = code_hash(planted)
    (sc.live_dir / "manifest.json").write_text(json.dumps(forged))
    assert [(t.name, t.state) for t in sc.tampered()] == [("planted", "unapproved")]
    assert sc.live() == ("adder",)
    assert [t.name for t in sc.reconcile()] == ["planted"]  # the next start
    assert entries(sc) == ["adder"]


def test_a_tampered_live_file_is_not_blessed_by_quarantine_or_restore(sc: Toolbox) -> None:
    # The attack: overwrite a live tool, then fail it three times so quarantine rewrites the
    # manifest; the old code listed whatever was on disk.
    promote_adder(sc)
    tampered = ADDER.replace("a + 1", "a + 1000")
    (sc.live_dir / "adder.py").write_text(tampered)
    promote(sc, "other", tool())  # any later rewrite of the manifest
    assert entries(sc) == ["other"]
    assert [b.name for b in read_manifest(sc.live_dir).tampered] == ["adder"]
    sc.quarantine("adder", "3 strikes")
    assert sc.approved_hash("adder") == code_hash(ADDER)
    with pytest.raises(ToolboxError, match="not the code the owner approved"):
        sc.restore("adder")
    assert sc.quarantined() == ("adder",)
    assert entries(sc) == ["other"]
    assert [(t.name, t.state) for t in sc.tampered()] == [("adder", "quarantined")]


def test_a_hard_link_to_a_staged_file_cannot_reach_the_promoted_tool(
    sc: Toolbox, tmp_path: Path
) -> None:
    # The attack: a denied proposal's gate test hard-linked another pending tool's staged
    # file; that tool was approved and its staged inode renamed live; a later denied proposal
    # wrote through the link. Promotion now writes the parked bytes to a new inode.
    staged = sc.stage("adder", ADDER, ADDER_TEST)
    link = tmp_path / "link.py"
    os.link(staged.tool_path, link)
    live = sc.promote("adder", staged.code, staged.test, expected_hash=staged.code_hash)
    assert live.stat().st_ino != link.stat().st_ino
    link.write_text(tool(body="return 'the owner never saw this'"))
    assert live.read_text() == ADDER
    assert entries(sc) == ["adder"] and sc.tampered() == ()


def test_a_staged_file_rewritten_after_the_gate_changes_nothing_promoted(sc: Toolbox) -> None:
    staged = sc.stage("adder", ADDER, ADDER_TEST)
    staged.tool_path.write_text(tool(body="return 'rewritten by its own test'"))
    live = sc.promote("adder", staged.code, staged.test, expected_hash=staged.code_hash)
    assert live.read_text() == ADDER


def test_failed_static_gate_removes_its_directory(sc: Toolbox) -> None:
    staged = sc.stage("leaky", tool(head="import anthropic"), "from leaky import run\n")
    report = sc.run_gate(staged)
    assert not report.passed
    assert any("'anthropic'" in f for f in report.findings)
    assert report.code_hash == staged.code_hash
    assert not staged.directory.exists()
    assert list(sc.staging_dir.iterdir()) == []


def test_gate_of_import_via_dunder_import_fails_without_running(sc: Toolbox) -> None:
    staged = sc.stage("sneaky", tool(body='return __import__("openai").__name__'), "")
    run = sc.start_gate(staged)
    assert run.pid is None and run.fd is None  # decided statically: nothing was executed
    report = run.poll()
    assert report is not None and not report.passed
    assert any("'openai'" in f for f in report.findings)


def test_a_failed_gate_leaves_a_newer_proposal_alone(sc: Toolbox) -> None:
    run = sc.start_gate(sc.stage("adder", tool(head="import openai"), ADDER_TEST))
    newer = sc.stage("adder", ADDER, ADDER_TEST)  # re-proposed before the verdict was read
    report = run.poll()
    assert report is not None and not report.passed
    assert newer.tool_path.read_text() == ADDER


def test_sweep_staging_removes_whatever_a_crash_left(sc: Toolbox) -> None:
    sc.stage("kept", "x = 1\n", "y = 2\n")
    (sc.staging_dir / "test_halfway.py").write_text("written before a power cut\n")
    (sc.staging_dir / "dangling").symlink_to("/etc")
    sc.sweep_staging()
    assert list(sc.staging_dir.iterdir()) == []
    assert Path("/etc").is_dir()


@pytest.mark.parametrize(
    ("mode", "fs", "why"),
    [("off", "auto", "mode = off"), ("best-effort", "none", "fs = none")],
)
def test_nothing_is_staged_where_no_filesystem_layer_confines_the_gate(
    settings: Settings, store: Store, mode: str, fs: str, why: str
) -> None:
    box = SandboxSettings(mode=mode, fs=fs)
    sc = Toolbox.from_settings(dataclasses.replace(settings, sandbox=box), store)
    with pytest.raises(ToolboxError, match=why):
        sc.stage("adder", ADDER, ADDER_TEST)
    assert list(sc.staging_dir.iterdir()) == []
    assert "self-coded tools are off" in sc.off_reason()
