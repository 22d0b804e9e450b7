"""``shelldon tools remove NAME`` and ``shelldon tools import --replace`` as the owner runs
them (issue 20, point 5): a real subprocess on a real home. Remove is /retire at the terminal
(archived with its test, audited); an import that replaces a live tool shows the same diff a
replacement's card shows, and the live tool stays until the owner says yes."""

from __future__ import annotations

from pathlib import Path

import pytest

from shelldon.toolbox.manifest import code_hash, read_manifest
from tests.unit.selfcode.samples import ADDER, ADDER_TEST
from tests.unit.toolbox.archives import shelldon, toolbox
from tests.unit.toolbox.test_import import audit, new_home, promoted

pytestmark = pytest.mark.slow

NEWER = ADDER.replace("return str(a + 1)", "return str(1 + a)  # \u202e reversed")


def test_remove_takes_the_tool_out_with_its_test_and_is_audited(tmp_path: Path) -> None:
    home = new_home(tmp_path, "home")
    promoted(home, ("adder", ADDER, ADDER_TEST))
    result = shelldon(home.home, "tools", "remove", "adder")
    assert result.returncode == 0, result.stderr
    assert "Retired adder: it is out of my toolbox and will not run again" in result.stdout
    assert not (home.live_tools / "adder.py").exists()
    assert read_manifest(home.live_tools).entries == ()
    (archive,) = (home.toolbox / "retired").iterdir()
    assert (archive / "adder.py").read_text() == ADDER
    assert (archive / "test_adder.py").read_text() == ADDER_TEST
    assert ("owner", "retired", "adder", code_hash(ADDER)) in audit(home)
    listed = shelldon(home.home, "tools", "list")
    assert "adder" not in listed.stdout

    again = shelldon(home.home, "tools", "remove", "adder")
    assert again.returncode == 1
    assert "no live or quarantined tool named adder" in again.stderr
    assert shelldon(home.home, "tools", "remove", "../x").returncode == 2


def test_import_replace_shows_the_diff_and_keeps_the_live_tool_on_no(tmp_path: Path) -> None:
    home = new_home(tmp_path, "home")
    promoted(home, ("adder", ADDER, ADDER_TEST))
    archive = toolbox(tmp_path / "t.tar.gz", {"adder": (NEWER, ADDER_TEST)})
    declined = shelldon(home.home, "tools", "import", str(archive), "--replace", stdin="n\n")
    assert declined.returncode == 0, declined.stderr
    out = declined.stdout
    assert "replaces adder (live since 20" in out
    assert "-    return str(a + 1)" in out
    assert "+    return str(1 + a)  # \\u202e reversed" in out  # marked, never raw
    assert "\u202e" not in out
    assert "(no change to test_adder.py)" in out
    assert "Replace the live adder with this version? [y/N]" in out
    assert (home.live_tools / "adder.py").read_text() == ADDER

    accepted = shelldon(home.home, "tools", "import", str(archive), "--replace", "--yes")
    assert accepted.returncode == 0, accepted.stderr
    assert "-    return str(a + 1)" in accepted.stdout
    assert (home.live_tools / "adder.py").read_text() == NEWER
