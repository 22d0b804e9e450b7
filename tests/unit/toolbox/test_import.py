"""``shelldon tools export`` / ``import`` move a toolbox between homes: each imported tool is
staged, gated by real pytest and put to the owner as a promotion would be; every decision is
audited with the code's hash."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from shelldon.config import Settings, load_settings
from shelldon.store import Store
from shelldon.toolbox.manifest import code_hash, read_manifest
from shelldon.toolbox.toolbox import Toolbox
from tests.unit.selfcode.samples import ADDER, ADDER_TEST, calling_test, promote, tool
from tests.unit.toolbox.archives import shelldon, toolbox

pytestmark = pytest.mark.slow

FAILING_TEST = ADDER_TEST.replace('== "2"', '== "3"')
DOUBLER = tool("Double a number.", "return str(2 * kwargs.get('n', 1))")
DOUBLER_TEST = calling_test("doubler", "assert run(n=2) == '4'")


def new_home(tmp_path: Path, name: str) -> Settings:
    home = tmp_path / name
    (home / "workspace").mkdir(parents=True)
    return load_settings(environ={"SHELLDON_HOME": str(home)})


def promoted(settings: Settings, *tools: tuple[str, str, str]) -> None:
    with Store(settings.database) as store:
        sc = Toolbox.from_settings(settings, store)
        for name, code, test in tools:
            promote(sc, name, code, test)


def audit(settings: Settings) -> list[tuple[str, str, str, str]]:
    with Store(settings.database) as store:
        return [(e.actor, e.action, e.subject, e.code_hash) for e in store.audit.log()]


def staging_is_empty(settings: Settings) -> bool:
    return [p.name for p in (settings.toolbox / "staging").iterdir()] == []


def test_export_then_import_into_a_fresh_home_makes_the_tool_live(tmp_path: Path) -> None:
    source = new_home(tmp_path, "pi-one")
    promoted(source, ("adder", ADDER, ADDER_TEST), ("doubler", DOUBLER, DOUBLER_TEST))
    archive = tmp_path / "toolbox.tar.gz"

    exported = shelldon(source.home, "tools", "export", str(archive))
    assert exported.returncode == 0, exported.stderr
    assert "exported 2 tool(s)" in exported.stdout
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == [
            "tests/test_adder.py",
            "tests/test_doubler.py",
            "toolbox.json",
            "tools/adder.py",
            "tools/doubler.py",
        ]

    target = new_home(tmp_path, "pi-two")
    imported = shelldon(target.home, "tools", "import", str(archive), stdin="y\nyes\n")
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert "Add adder to the toolbox? [y/N]" in imported.stdout
    assert "gate passed: 1 test(s)" in imported.stdout
    assert "2 added" in imported.stdout
    manifest = {e.name: e.code_hash for e in read_manifest(target.live_tools).entries}
    assert manifest == {"adder": code_hash(ADDER), "doubler": code_hash(DOUBLER)}
    assert (target.live_tools / "adder.py").read_text() == ADDER
    assert (target.toolbox / "tests" / "test_adder.py").read_text() == ADDER_TEST
    assert staging_is_empty(target)
    assert ("gate", "passed", "adder", code_hash(ADDER)) in audit(target)
    assert ("owner", "promoted", "adder", code_hash(ADDER)) in audit(target)


def test_the_owner_saying_no_or_nothing_discards_the_tool(tmp_path: Path) -> None:
    archive = toolbox(tmp_path / "t.tar.gz", {"adder": (ADDER, ADDER_TEST)})
    target = new_home(tmp_path, "home")
    for answer in ("n\n", ""):  # an explicit no, then end of input
        result = shelldon(target.home, "tools", "import", str(archive), stdin=answer)
        assert result.returncode == 0, result.stderr
        assert "skipped adder: not added (your answer)" in result.stdout
        assert not (target.live_tools / "adder.py").exists()
        assert staging_is_empty(target)
    discarded = [a for a in audit(target) if a[1] == "discarded"]
    assert discarded == [("owner", "discarded", "adder", code_hash(ADDER))] * 2


def test_a_tool_whose_test_fails_is_refused_on_import(tmp_path: Path) -> None:
    archive = toolbox(
        tmp_path / "t.tar.gz",
        {"adder": (ADDER, FAILING_TEST), "doubler": (DOUBLER, DOUBLER_TEST)},
    )
    target = new_home(tmp_path, "home")
    result = shelldon(target.home, "tools", "import", str(archive), "--yes")
    assert result.returncode == 1
    assert "FAILED adder: gate failed" in result.stdout
    assert "1 added" in result.stdout and "1 failed (adder)" in result.stdout
    assert [p.name for p in (target.live_tools).glob("*.py")] == ["doubler.py"]
    assert staging_is_empty(target)
    assert ("gate", "failed", "adder", code_hash(ADDER)) in audit(target)


def test_a_tool_importing_an_llm_sdk_is_refused_on_import(tmp_path: Path) -> None:
    sneaky = tool(head="import anthropic")
    archive = toolbox(tmp_path / "t.tar.gz", {"sneaky": (sneaky, calling_test("sneaky"))})
    target = new_home(tmp_path, "home")
    result = shelldon(target.home, "tools", "import", str(archive), "--yes")
    assert result.returncode == 1
    assert "imports 'anthropic'" in result.stdout
    assert not (target.live_tools / "sneaky.py").exists()


def test_a_name_collision_is_refused_unless_replace(tmp_path: Path) -> None:
    target = new_home(tmp_path, "home")
    promoted(target, ("adder", ADDER, ADDER_TEST))
    newer = ADDER.replace("Add one to a number.", "Add one, faster.")
    archive = toolbox(tmp_path / "t.tar.gz", {"adder": (newer, ADDER_TEST)})

    refused = shelldon(target.home, "tools", "import", str(archive), "--yes")
    assert refused.returncode == 1
    assert "another version of adder is already live; re-run with --replace" in refused.stdout
    assert (target.live_tools / "adder.py").read_text() == ADDER
    assert ("import", "import_refused", "adder", code_hash(newer)) in audit(target)

    replaced = shelldon(target.home, "tools", "import", str(archive), "--yes", "--replace")
    assert replaced.returncode == 0, replaced.stdout + replaced.stderr
    assert (target.live_tools / "adder.py").read_text() == newer
    assert ("owner", "promoted", "adder", code_hash(newer)) in audit(target)


def test_importing_the_same_code_again_changes_nothing(tmp_path: Path) -> None:
    target = new_home(tmp_path, "home")
    promoted(target, ("adder", ADDER, ADDER_TEST))
    archive = toolbox(tmp_path / "t.tar.gz", {"adder": (ADDER, ADDER_TEST)})
    result = shelldon(target.home, "tools", "import", str(archive), "--yes")
    assert result.returncode == 0
    assert "kept adder: already live with the same code" in result.stdout
    assert audit(target) == []


def test_a_tool_without_a_test_cannot_be_gated_so_it_is_refused(tmp_path: Path) -> None:
    archive = toolbox(tmp_path / "t.tar.gz", {"adder": (ADDER, "")})
    target = new_home(tmp_path, "home")
    result = shelldon(target.home, "tools", "import", str(archive), "--yes")
    assert result.returncode == 1
    assert "carries no test" in result.stdout
    assert staging_is_empty(target)


def test_export_says_which_tools_travel_without_a_test(tmp_path: Path) -> None:
    source = new_home(tmp_path, "home")
    promoted(source, ("adder", ADDER, ADDER_TEST))
    (source.toolbox / "tests" / "test_adder.py").unlink()  # promoted before tests were kept
    result = shelldon(source.home, "tools", "export", str(tmp_path / "t.tar.gz"))
    assert result.returncode == 0
    assert "without a test (an import will refuse these): adder" in result.stdout


def test_export_leaves_out_a_tool_that_is_not_the_approved_code(tmp_path: Path) -> None:
    source = new_home(tmp_path, "home")
    promoted(source, ("adder", ADDER, ADDER_TEST), ("doubler", DOUBLER, DOUBLER_TEST))
    (source.live_tools / "doubler.py").write_text(DOUBLER.replace("2 *", "3 *"))
    (source.live_tools / "planted.py").write_text(tool())
    archive = tmp_path / "t.tar.gz"
    result = shelldon(source.home, "tools", "export", str(archive))
    assert result.returncode == 0, result.stderr
    assert "exported 1 tool(s)" in result.stdout
    assert "left out, not the code you approved (tampered): doubler" in result.stdout
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["tests/test_adder.py", "toolbox.json", "tools/adder.py"]


def test_export_refuses_to_overwrite_a_file_unless_forced(tmp_path: Path) -> None:
    source = new_home(tmp_path, "home")
    promoted(source, ("adder", ADDER, ADDER_TEST))
    precious = tmp_path / "notes.txt"
    precious.write_text("keep me\n")
    result = shelldon(source.home, "tools", "export", str(precious))
    assert result.returncode == 1
    assert "already exists; choose another file or pass --force" in result.stderr
    assert precious.read_text() == "keep me\n"
    forced = shelldon(source.home, "tools", "export", str(precious), "--force")
    assert forced.returncode == 0
    assert tarfile.is_tarfile(precious)
