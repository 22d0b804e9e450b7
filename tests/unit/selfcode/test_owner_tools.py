"""What the owner reads in /tools and /restore about the toolbox: tampered files are named and
never called live, and where no filesystem layer is in force the owner is told self-coded tools
are off and why."""

from __future__ import annotations

import dataclasses

from shelldon.config import SandboxSettings, Settings
from shelldon.owner_commands import restore_tool, tools_text
from shelldon.store import Store
from shelldon.toolbox.toolbox import Toolbox

from .samples import ADDER, promote, tool


def test_tools_names_a_tampered_tool_and_never_lists_it_live(sc: Toolbox, store: Store) -> None:
    promote(sc, "adder", ADDER)
    promote(sc, "other", tool())
    (sc.live_dir / "adder.py").write_text(ADDER.replace("a + 1", "a + 2"))
    text = tools_text(store, sc)
    assert "Self-coded, live: other\n" in text
    assert "adder (its code is not what the owner approved)" in text


def test_restore_of_a_tampered_quarantined_tool_is_refused(sc: Toolbox, store: Store) -> None:
    promote(sc, "adder", ADDER)
    sc.quarantine("adder", "3 strikes")
    (sc.quarantine_dir / "adder.py").write_text(ADDER.replace("a + 1", "a + 2"))
    reply = restore_tool(store, sc, "adder", 0.0)
    assert (
        reply.startswith("Could not restore adder") and "not the code the owner approved" in reply
    )
    assert sc.quarantined() == ("adder",)


def test_tools_says_why_self_coded_tools_are_off(settings: Settings, store: Store) -> None:
    bare = dataclasses.replace(settings, sandbox=SandboxSettings(mode="off"))
    text = tools_text(store, Toolbox.from_settings(bare, store))
    assert "⚠️ Self-coded tools are off: [sandbox] mode = off confines nothing" in text
