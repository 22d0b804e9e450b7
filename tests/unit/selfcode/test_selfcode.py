"""SelfCode on disk: stage, promote, discard, quarantine and restore move whole files
atomically and keep the live manifest in step. No pytest runs here (see test_gate_pytest)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shelldon.config import Settings
from shelldon.core.manifest import code_hash, read_manifest
from shelldon.core.selfcode import MAX_SOURCE_BYTES, SelfCode, SelfCodeError, StemError

from .samples import ADDER, ADDER_TEST, tool


@pytest.fixture
def sc(settings: Settings) -> SelfCode:
    return SelfCode(settings.workspace, settings.limits)


def promote_adder(sc: SelfCode) -> Path:
    sc.stage("adder", ADDER, ADDER_TEST)
    return sc.promote("adder")


def test_stage_writes_the_pair_to_staging(sc: SelfCode) -> None:
    staged = sc.stage("adder", ADDER, ADDER_TEST)
    assert staged.tool_path.read_text() == ADDER
    assert staged.test_path == sc.staging_dir / "test_adder.py"
    assert staged.test_path.read_text() == ADDER_TEST
    assert staged.code_hash == code_hash(ADDER)
    assert sc.staged() == ("adder",)
    assert sc.live() == ()


def test_stage_clears_a_stale_pair_first(sc: SelfCode) -> None:
    sc.stage("adder", "old = 1\n", "old_test = 1\n")
    staged = sc.stage("adder", ADDER, ADDER_TEST)
    assert staged.tool_path.read_text() == ADDER
    assert staged.test_path.read_text() == ADDER_TEST
    assert sorted(p.name for p in sc.staging_dir.iterdir()) == ["adder.py", "test_adder.py"]


def test_keyword_name_is_staged_with_tool_suffix(sc: SelfCode) -> None:
    staged = sc.stage("class", ADDER, ADDER_TEST)
    assert staged.name == "class_tool"
    assert staged.requested == "class"
    assert (sc.staging_dir / "class_tool.py").exists()


@pytest.mark.parametrize("name", ["../x", "__init__", "a.b", "", "t\u043e\u043el", "/etc/passwd"])
def test_bad_stem_writes_nothing(sc: SelfCode, name: str) -> None:
    with pytest.raises(StemError):
        sc.stage(name, ADDER, ADDER_TEST)
    assert list(sc.staging_dir.iterdir()) == []
    assert not (sc.workspace / "x.py").exists()


@pytest.mark.parametrize("which", ["code", "test"])
def test_oversized_source_is_refused(sc: SelfCode, which: str) -> None:
    big = ADDER + "#" * MAX_SOURCE_BYTES
    code, test = (big, ADDER_TEST) if which == "code" else (ADDER, big)
    with pytest.raises(SelfCodeError, match="64 KB"):
        sc.stage("adder", code, test)
    assert sc.staged() == ()


def test_source_of_exactly_64_kb_is_accepted(sc: SelfCode) -> None:
    code = ADDER + "#" * (MAX_SOURCE_BYTES - len(ADDER.encode()))
    assert len(code.encode()) == MAX_SOURCE_BYTES
    sc.stage("adder", code, ADDER_TEST)


def test_unencodable_text_is_refused(sc: SelfCode) -> None:
    with pytest.raises(SelfCodeError, match="not valid text"):
        sc.stage("adder", ADDER + "\udcff", ADDER_TEST)


def test_promote_moves_module_live_and_drops_test(sc: SelfCode) -> None:
    live = promote_adder(sc)
    assert live == sc.live_dir / "adder.py"
    assert live.read_text() == ADDER
    assert sc.staged() == ()
    assert list(sc.staging_dir.glob("*.py")) == []
    assert not (sc.live_dir / "test_adder.py").exists()
    manifest = read_manifest(sc.live_dir)
    assert [(e.name, e.description, e.code_hash) for e in manifest.entries] == [
        ("adder", "Add one to a number.", code_hash(ADDER))
    ]
    assert manifest.entries[0].params_schema["required"] == ["a"]


def test_promote_refuses_code_other_than_the_approved(sc: SelfCode) -> None:
    sc.stage("adder", ADDER, ADDER_TEST)
    with pytest.raises(SelfCodeError, match="not the code that was approved"):
        sc.promote("adder", expected_hash=code_hash("something else"))
    assert sc.live() == ()
    assert sc.promote("adder", expected_hash=code_hash(ADDER)).exists()


def test_promote_without_staged_tool_is_refused(sc: SelfCode) -> None:
    with pytest.raises(SelfCodeError, match="no staged tool"):
        sc.promote("ghost")


def test_live_name_is_refused_unless_replacing(sc: SelfCode) -> None:
    promote_adder(sc)
    with pytest.raises(SelfCodeError, match="already exists"):
        sc.stage("adder", ADDER, ADDER_TEST)
    newer = ADDER.replace("Add one", "Add one, faster")
    sc.stage("adder", newer, ADDER_TEST, replace=True)
    with pytest.raises(SelfCodeError, match="replacement"):
        sc.promote("adder")
    sc.promote("adder", replace=True)
    assert read_manifest(sc.live_dir).entries[0].description == "Add one, faster to a number."


def test_replacing_a_quarantined_tool_drops_the_quarantined_copy(sc: SelfCode) -> None:
    promote_adder(sc)
    sc.quarantine("adder", "raised 3 times")
    with pytest.raises(SelfCodeError, match="tools-quarantine"):
        sc.stage("adder", ADDER, ADDER_TEST)
    sc.stage("adder", ADDER, ADDER_TEST, replace=True)
    sc.promote("adder", replace=True)
    assert sc.live() == ("adder",)
    assert sc.quarantined() == ()
    assert list(sc.quarantine_dir.iterdir()) == []


def test_discard_deletes_the_pair(sc: SelfCode) -> None:
    sc.stage("adder", ADDER, ADDER_TEST)
    assert sc.discard("adder") is True
    assert sc.staged() == ()
    assert list(sc.staging_dir.iterdir()) == []
    assert sc.discard("adder") is False


def test_quarantine_moves_tool_out_of_the_manifest(sc: SelfCode) -> None:
    promote_adder(sc)
    sc.stage("other", tool(), "")
    sc.promote("other")
    target = sc.quarantine("adder", "ZeroDivisionError three times")
    assert target == sc.quarantine_dir / "adder.py"
    assert sc.live() == ("other",)
    assert sc.quarantined() == ("adder",)
    assert [e.name for e in read_manifest(sc.live_dir).entries] == ["other"]
    assert sc.quarantine_reason("adder") == "ZeroDivisionError three times"


def test_quarantine_of_unknown_tool_is_refused(sc: SelfCode) -> None:
    with pytest.raises(SelfCodeError, match="no live tool"):
        sc.quarantine("ghost", "why")


def test_restore_brings_tool_back_live(sc: SelfCode) -> None:
    promote_adder(sc)
    sc.quarantine("adder", "strikes")
    live = sc.restore("adder")
    assert live.read_text() == ADDER
    assert sc.live() == ("adder",)
    assert sc.quarantined() == ()
    assert sc.quarantine_reason("adder") == ""
    assert [e.name for e in read_manifest(sc.live_dir).entries] == ["adder"]


def test_restore_without_quarantined_tool_is_refused(sc: SelfCode) -> None:
    with pytest.raises(SelfCodeError, match="no quarantined tool"):
        sc.restore("adder")


def test_restore_never_overwrites_a_live_tool(sc: SelfCode) -> None:
    promote_adder(sc)
    (sc.quarantine_dir / "adder.py").write_text("an older copy\n")
    with pytest.raises(SelfCodeError, match="already exists"):
        sc.restore("adder")
    assert (sc.live_dir / "adder.py").read_text() == ADDER


def test_manifest_writes_leave_no_temp_files(sc: SelfCode) -> None:
    promote_adder(sc)
    sc.quarantine("adder", "x")
    sc.restore("adder")
    assert sorted(p.name for p in sc.live_dir.iterdir()) == ["adder.py", "manifest.json"]


def test_corrupt_manifest_is_rebuilt_at_next_change(sc: SelfCode) -> None:
    promote_adder(sc)
    (sc.live_dir / "manifest.json").write_text("{not json")
    sc.stage("other", tool(), "")
    sc.promote("other")
    data = json.loads((sc.live_dir / "manifest.json").read_text())
    assert [t["name"] for t in data["tools"]] == ["adder", "other"]


def test_module_broken_behind_selfcodes_back_is_listed_broken(sc: SelfCode) -> None:
    promote_adder(sc)
    (sc.live_dir / "adder.py").write_text("def run(:\n")
    sc.stage("other", tool(), "")
    sc.promote("other")
    manifest = read_manifest(sc.live_dir)
    assert [e.name for e in manifest.entries] == ["other"]
    assert [(b.name, "syntax error" in b.error) for b in manifest.broken] == [("adder", True)]


def test_failed_static_gate_discards_the_pair(sc: SelfCode) -> None:
    staged = sc.stage("leaky", tool(head="import anthropic"), "from leaky import run\n")
    report = sc.run_gate(staged)
    assert not report.passed
    assert any("'anthropic'" in f for f in report.findings)
    assert report.code_hash == staged.code_hash
    assert sc.staged() == ()


def test_gate_of_import_via_dunder_import_fails_without_running(sc: SelfCode) -> None:
    staged = sc.stage("sneaky", tool(body='return __import__("openai").__name__'), "")
    run = sc.start_gate(staged)
    assert run.pid is None and run.fd is None  # decided statically: nothing was executed
    report = run.poll()
    assert report is not None and not report.passed
    assert any("'openai'" in f for f in report.findings)


def test_failed_gate_leaves_a_newer_proposal_alone(sc: SelfCode) -> None:
    run = sc.start_gate(sc.stage("adder", tool(head="import openai"), ADDER_TEST))
    newer = sc.stage("adder", ADDER, ADDER_TEST)  # re-proposed before the verdict was read
    report = run.poll()
    assert report is not None and not report.passed
    assert sc.staged() == ("adder",)
    assert newer.tool_path.read_text() == ADDER


def test_sweep_staging_keeps_parked_promotions_and_removes_what_a_crash_left(
    tmp_path: Path,
) -> None:
    sc = SelfCode(tmp_path / "ws")
    sc.stage("kept", "x = 1\n", "y = 2\n")
    sc.stage("orphan", "x = 1\n", "y = 2\n")
    (sc.staging_dir / "test_halfway.py").write_text("written before a power cut\n")
    (sc.staging_dir / ".gate-abc").mkdir()
    assert sc.sweep_staging(keep={"kept"}) == ("halfway", "orphan")
    assert sorted(p.name for p in sc.staging_dir.iterdir()) == ["kept.py", "test_kept.py"]
