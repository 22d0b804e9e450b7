"""A home whose toolbox is still in the workspace (the layout before issue 17) is moved into
``<home>/toolbox/`` at start-up: only the code the owner approved — the latest promotion in the
audit log, by hash — is carried over; everything else is set aside, never run, and named.

Attack inspiration: issue 17's first attack left its mark in exactly such a home: a module and a
manifest planted into ``<workspace>/tools/`` with no promotion in the audit log, and a live file
overwritten (or hard-linked) after its approval.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from shelldon.config import Settings
from shelldon.store import Store
from shelldon.toolbox.legacy import LegacyReport, migrate_legacy_toolbox, prepare_toolbox
from shelldon.toolbox.manifest import code_hash, read_manifest
from shelldon.toolbox.toolbox import Toolbox
from tests.unit.toolbox.archives import shelldon

from .samples import ADDER, ADDER_TEST, tool

DOUBLER = tool("Double.", "return '4'")


def old_home(settings: Settings, store: Store) -> Path:
    """An old workspace toolbox: adder and doubler promoted (audited), doubler quarantined, a
    planted module, a tampered one, a hard-linked one, and a parked promotion's staged pair."""
    ws = settings.workspace
    for d in ("tools", "tools-quarantine", "tools-tests", "tools-staging"):
        (ws / d).mkdir()
    for name, code in (
        ("adder", ADDER),
        ("doubler", DOUBLER),
        ("edited", tool()),
        ("twin", tool()),
    ):
        store.audit.record("owner", "promoted", name, {}, time.time(), code_hash=code_hash(code))
    (ws / "tools" / "adder.py").write_text(ADDER)
    (ws / "tools-tests" / "test_adder.py").write_text(ADDER_TEST)
    (ws / "tools-quarantine" / "doubler.py").write_text(DOUBLER)
    (ws / "tools-quarantine" / "doubler.reason").write_text("3 strikes: boom")
    (ws / "tools" / "planted.py").write_text(tool(body="return 'never approved'"))
    (ws / "tools" / "edited.py").write_text(tool(body="return 'edited after approval'"))
    (ws / "tools" / "twin.py").write_text(tool())
    os.link(ws / "tools" / "twin.py", ws / "twin-link.py")
    (ws / "tools" / "manifest.json").write_text('{"format": 1, "tools": [], "broken": []}')
    (ws / "tools-staging" / "pending.py").write_text(DOUBLER)
    (ws / "tools-staging" / "test_pending.py").write_text("from pending import run\n")
    with store.write() as db:  # a row parked by the old version: no bytes kept with it
        db.execute(
            "INSERT INTO pending_promotions (turn_id, chat_id, name, code_hash, summary, "
            "created_at, expires_at) VALUES ('t1', 1, 'pending', ?, 'tool pending', 0, 1e12)",
            (code_hash(DOUBLER),),
        )
    return ws


def test_only_the_code_the_audit_log_approved_is_carried_over(
    settings: Settings, store: Store, sc: Toolbox
) -> None:
    ws = old_home(settings, store)
    report = migrate_legacy_toolbox(ws, sc)
    assert sorted(report.carried) == ["adder", "doubler"]
    refused = dict(report.refused)
    assert "no promotion" in refused["tools/planted.py"]
    assert "not what the owner approved" in refused["tools/edited.py"]
    assert "hard link" in refused["tools/twin.py"]
    assert report.parked == ("pending",)
    # Carried as they were: live with its kept test, quarantined with its reason.
    assert sc.live() == ("adder",) and sc.quarantined() == ("doubler",)
    assert (sc.live_dir / "adder.py").read_text() == ADDER
    assert (sc.tests_dir / "test_adder.py").read_text() == ADDER_TEST
    assert sc.quarantine_reason("doubler") == "3 strikes: boom"
    assert [e.name for e in read_manifest(sc.live_dir).entries] == ["adder"]
    # The rest is set aside in the workspace, never discovered; the old directories are gone.
    aside = ws / "tools-unapproved" / "tools"
    assert sorted(p.name for p in aside.iterdir()) == ["edited.py", "planted.py", "twin.py"]
    assert not any((ws / d).exists() for d in ("tools", "tools-quarantine", "tools-tests"))
    assert not (ws / "tools-staging").exists()
    # The parked promotion can still be decided: its bytes, hash-checked, are in the store.
    taken = store.parked.take_promotion("t1", now=1)
    assert taken.code == DOUBLER.encode() and taken.test == b"from pending import run\n"
    actions = [(e.actor, e.action, e.subject) for e in store.audit.log()]
    assert ("migration", "carried_over", "adder") in actions


def test_moving_runs_once_and_an_untouched_home_is_left_alone(
    settings: Settings, store: Store, sc: Toolbox
) -> None:
    assert migrate_legacy_toolbox(settings.workspace, sc) == LegacyReport()
    ws = old_home(settings, store)
    migrate_legacy_toolbox(ws, sc)
    again = migrate_legacy_toolbox(ws, sc)
    assert again == LegacyReport()
    assert sc.live() == ("adder",)


def test_a_parked_promotion_whose_staged_file_changed_keeps_no_bytes(
    settings: Settings, store: Store, sc: Toolbox
) -> None:
    ws = old_home(settings, store)
    (ws / "tools-staging" / "pending.py").write_text(tool(body="return 'swapped'"))
    assert migrate_legacy_toolbox(ws, sc).parked == ()
    assert store.parked.promotions_without_code() == [("t1", "pending", code_hash(DOUBLER))]


def test_the_service_start_moves_it_before_any_worker_reads_the_toolbox(
    settings: Settings, store: Store
) -> None:
    old_home(settings, store)
    report = prepare_toolbox(settings)
    assert sorted(report.carried) == ["adder", "doubler"]
    assert [e.name for e in read_manifest(settings.live_tools).entries] == ["adder"]


def test_shelldon_tools_list_moves_it_too(settings: Settings, store: Store) -> None:
    old_home(settings, store)
    result = shelldon(settings.home, "tools", "list")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()[1:4]}
    assert rows == {"adder": "live", "pending": "staged", "doubler": "quarantined"}
