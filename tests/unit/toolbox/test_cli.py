"""``shelldon tools list|show|restore`` as the owner runs them: a real subprocess on a real home."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from shelldon.config import Settings
from shelldon.store import Store
from shelldon.toolbox.manifest import code_hash
from shelldon.toolbox.toolbox import Toolbox
from tests.unit.selfcode.samples import ADDER, ADDER_TEST, calling_test, promote, tool
from tests.unit.toolbox.archives import adder_members, regular, shelldon, write_tar

pytestmark = pytest.mark.slow

FLAKY = tool("Fails a lot.", "raise RuntimeError('boom')")


@pytest.fixture
def sc(settings: Settings, store: Store) -> Toolbox:
    sc = Toolbox.from_settings(settings, store)
    for name, code, test in (("adder", ADDER, ADDER_TEST), ("flaky", FLAKY, calling_test("flaky"))):
        promote(sc, name, code, test)
    return sc


def quarantine_flaky(settings: Settings, sc: Toolbox) -> None:
    for _ in range(3):
        sc.store.tools.strike("flaky", "RuntimeError: boom", time.time())
    sc.quarantine("flaky", "failed 3 times: RuntimeError: boom")


def test_list_shows_live_staged_and_quarantined_tools_with_strikes(
    settings: Settings, sc: Toolbox
) -> None:
    quarantine_flaky(settings, sc)
    doubler = tool("Double.").encode()
    sc.store.parked.park_promotion(
        "t1", 1, "doubler", code_hash(doubler), "tool doubler", time.time(), 60, code=doubler
    )
    result = shelldon(settings.home, "tools", "list")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split()[1:3] for line in result.stdout.splitlines()[1:4]}
    assert rows == {
        "adder": ["live", "0"],
        "doubler": ["staged", "0"],
        "flaky": ["quarantined", "3"],
    }
    assert "failed 3 times: RuntimeError: boom" in result.stdout
    assert "shelldon tools restore NAME" in result.stdout
    # No log noise on the terminal: events go to the home's log file.
    assert result.stderr == ""
    assert (settings.home / "logs" / "shelldon.jsonl").exists()


def test_list_and_show_report_tampered_files_which_never_run(
    settings: Settings, sc: Toolbox
) -> None:
    # A live file overwritten after its approval, and a module nobody approved.
    (sc.live_dir / "adder.py").write_text(ADDER.replace("a + 1", "a + 1000"))
    (sc.live_dir / "planted.py").write_text(tool())
    result = shelldon(settings.home, "tools", "list")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()[1:4]}
    assert rows == {"flaky": "live", "adder": "tampered", "planted": "tampered"}
    assert "not run: its code is not what the owner approved" in result.stdout
    assert "not run: planted.py was never approved" in result.stdout
    assert "A tampered tool never runs" in result.stdout
    shown = shelldon(settings.home, "tools", "show", "adder")
    assert shown.stdout.startswith("adder (tampered)\nNOT RUN: its code is not what")
    assert f"approved code hash: sha256:{code_hash(ADDER)}" in shown.stdout


def test_bare_tools_lists_too(settings: Settings, sc: Toolbox) -> None:
    result = shelldon(settings.home, "tools")
    assert result.returncode == 0
    assert result.stdout.startswith("NAME")


def test_list_on_a_fresh_home_says_there_are_none(settings: Settings) -> None:
    result = shelldon(settings.home, "tools", "list")
    assert result.returncode == 0
    assert result.stdout == "No self-coded tools yet.\n"


def test_show_prints_code_description_schema_hash_and_strikes(
    settings: Settings, sc: Toolbox
) -> None:
    result = shelldon(settings.home, "tools", "show", "adder")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("adder (live)\n")
    assert "description: Add one to a number." in out
    assert f"code hash: sha256:{code_hash(ADDER)}" in out
    assert "strikes: 0" in out
    assert '"type": "integer"' in out
    assert "        return str(a + 1)" in out
    assert "toolbox/tests/test_adder.py" in out


def test_show_finds_a_quarantined_tool_with_its_reason(settings: Settings, sc: Toolbox) -> None:
    quarantine_flaky(settings, sc)
    result = shelldon(settings.home, "tools", "show", "flaky")
    assert result.returncode == 0
    assert result.stdout.startswith("flaky (quarantined)\n")
    assert "strikes: 3 (last: RuntimeError: boom)" in result.stdout
    assert "quarantined because: failed 3 times" in result.stdout


def test_show_of_an_unknown_tool_fails_with_the_known_names(
    settings: Settings, sc: Toolbox
) -> None:
    result = shelldon(settings.home, "tools", "show", "nope")
    assert result.returncode == 1
    expected = "shelldon tools: no self-coded tool named 'nope' (tools: adder, flaky)\n"
    assert result.stderr == expected


def test_show_of_a_malformed_name_is_a_usage_error(settings: Settings) -> None:
    result = shelldon(settings.home, "tools", "show", "../../etc/passwd")
    assert result.returncode == 2
    assert "path separator" in result.stderr


def test_restore_brings_a_quarantined_tool_back_with_strikes_reset(
    settings: Settings, sc: Toolbox
) -> None:
    quarantine_flaky(settings, sc)
    result = shelldon(settings.home, "tools", "restore", "flaky")
    assert result.returncode == 0, result.stderr
    assert "Restored flaky" in result.stdout
    assert "flaky" in sc.live() and sc.quarantined() == ()
    with Store(settings.database) as store:
        assert [h.name for h in store.tools.health() if h.strikes] == []
        assert [(e.actor, e.action, e.subject) for e in store.audit.log()] == [
            ("owner", "restored", "flaky")
        ]


def test_restore_of_a_tool_that_is_not_quarantined_fails(settings: Settings, sc: Toolbox) -> None:
    result = shelldon(settings.home, "tools", "restore", "adder")
    assert result.returncode == 1
    assert "adder is not quarantined" in result.stderr
    assert "adder" in sc.live()


def test_missing_argument_is_a_usage_error(settings: Settings) -> None:
    result = shelldon(settings.home, "tools", "show")
    assert result.returncode == 2
    assert "NAME" in result.stderr


def test_a_bad_config_is_one_line_and_exit_2(settings: Settings, tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[limits]\nstrike_threshold = 'three'\n")
    result = shelldon(settings.home, "tools", "list", config=config)
    assert result.returncode == 2
    assert result.stderr.startswith("shelldon: config: limits.strike_threshold")
    assert result.stderr.count("\n") == 1


def test_a_hostile_archive_is_refused_at_the_terminal_with_exit_1(
    settings: Settings, tmp_path: Path
) -> None:
    path = write_tar(tmp_path / "evil.tar.gz", [*adder_members(), regular("../evil.py", b"x")])
    result = shelldon(settings.home, "tools", "import", str(path), "--yes")
    assert result.returncode == 1
    assert result.stderr == (
        "shelldon tools: member '../evil.py' climbs out with '..' (path traversal); refused\n"
    )
    assert not (settings.live_tools / "adder.py").exists()
    assert not (tmp_path / "evil.py").exists()
