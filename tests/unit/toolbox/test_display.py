"""What the owner reads before saying yes is what the code is: escapes cannot hide lines, the
description shown is the one the code declares, and a pending proposal is never overwritten.

Inspired by: Trojan Source (CVE-2021-42574, bidi overrides hiding code from reviewers) and
terminal escape injection (ANSI cursor-up / erase-line sequences rewriting what was printed).
"""

from __future__ import annotations

import io
from pathlib import Path

from shelldon.cli.tools import list_text, printable, show_text, terminal_ask, tool_rows
from shelldon.store import Store
from shelldon.toolbox.archive import ArchivedTool, read_archive
from shelldon.toolbox.gate import GateReport
from shelldon.toolbox.importer import Outcome, import_tools
from shelldon.toolbox.manifest import code_hash
from shelldon.toolbox.toolbox import Toolbox
from tests.unit.selfcode.samples import ADDER, ADDER_TEST, calling_test, promote, tool
from tests.unit.toolbox.archives import manifest_entry, regular, toolbox_json, write_tar

# A string literal holding: erase the line, cursor up, carriage return, an RTL override.
HIDING = tool("Harmless.", "return 'ok'  # \x1b[2K\x1b[1A\u202e evil()")


def test_printable_makes_control_and_bidi_characters_visible() -> None:
    assert printable("a\x1b[2Kb\rc\u202ed\u200be\tf\n") == "a\\x1b[2Kb\\rc\\u202ed\\u200be\tf\n"


def test_show_cannot_be_blinded_by_escapes_in_the_code(sc: Toolbox, store: Store) -> None:
    promote(sc, "hider", HIDING, calling_test("hider"))
    text = show_text(store, sc, "hider")
    assert "\x1b" not in text and "\u202e" not in text
    assert "\\x1b[2K\\x1b[1A\\u202e evil()" in text


def test_the_import_prompt_shows_escapes_and_the_codes_own_description() -> None:
    shown = io.StringIO()
    ask = terminal_ask(io.StringIO("y\n"), shown)
    archived = ArchivedTool("hider", "Harmless.", HIDING, "", code_hash(HIDING))
    report = GateReport("hider", True, (), "", 0.5, (), code_hash(HIDING), tests_passed=1)
    assert ask(archived, report) is True
    out = shown.getvalue()
    assert "\x1b" not in out and "\u202e" not in out
    assert "\\u202e evil()" in out
    assert out.endswith("Add hider to the toolbox? [y/N] y\n")  # piped answers are echoed


def test_the_description_comes_from_the_code_not_the_archives_claim(tmp_path: Path) -> None:
    entry = manifest_entry("adder", ADDER) | {"description": "Totally safe, trust me."}
    path = write_tar(
        tmp_path / "liar.tar.gz",
        [
            regular("toolbox.json", toolbox_json(entry)),
            regular("tools/adder.py", ADDER.encode()),
            regular("tests/test_adder.py", ADDER_TEST.encode()),
        ],
    )
    (archived,) = read_archive(path)
    assert archived.description == "Add one to a number."


def test_import_never_overwrites_a_proposal_waiting_for_the_owner(sc: Toolbox) -> None:
    sc.store.parked.park_promotion(
        "t1", 1, "adder", code_hash(ADDER), "tool adder", 0.0, 1e12, code=ADDER.encode()
    )
    other = ADDER.replace("Add one", "Add one more")
    archived = ArchivedTool("adder", "", other, ADDER_TEST, code_hash(other))
    asked: list[str] = []

    def ask(tool: ArchivedTool, report: GateReport) -> bool:
        asked.append(tool.name)
        return True

    (result,) = import_tools((archived,), sc, ask)
    refusals = [(e.action, e.code_hash) for e in sc.store.audit.log()]
    assert result.outcome is Outcome.REFUSED
    assert "staged here" in result.message and "--replace" in result.message
    assert sc.store.parked.parked_code("adder") == ADDER.encode()
    assert sc.live() == ()
    assert asked == []
    assert refusals == [("import_refused", code_hash(other))]


def test_a_strike_error_cannot_rewrite_the_listing(sc: Toolbox, store: Store) -> None:
    promote(sc, "adder", ADDER, ADDER_TEST)
    store.tools.strike("adder", "ValueError: \x1b[2J\rall good", 1.0)
    text = list_text(tool_rows(store, sc))
    shown = show_text(store, sc, "adder")
    assert "\x1b" not in text + shown and "\r" not in text + shown
    assert "ValueError: \\x1b[2J\\rall good" in text
