"""The decisions under backup and restore, called directly: which names a backup may hold,
whether a home holds a pet, where a backup's config may go, whether a database is one our
migrations made, what a restored database is not trusted with, who has a database open."""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from shelldon.backup.layout import member_kind
from shelldon.backup.restore import (
    RESTORED_CONFIG,
    config_destination,
    database_users,
    pet_in_home,
)
from shelldon.config import Settings, load_settings
from shelldon.store import (
    _MIGRATIONS,
    SCHEMA_VERSION,
    Store,
    StoreError,
    _split_sql,
    check_foreign_database,
    database_in_use,
)
from shelldon.toolbox.archive import export_toolbox, read_archive
from shelldon.toolbox.legacy import set_aside_restored
from shelldon.toolbox.toolbox import Toolbox
from tests.unit.selfcode.samples import ADDER, ADDER_TEST, promote


@pytest.mark.parametrize(
    ("name", "is_dir", "kind"),
    [
        ("backup.json", False, "index"),
        ("shelldon.db", False, "database"),
        ("config.toml", False, "config"),
        ("toolbox.tar.gz", False, "toolbox"),
        ("workspace", True, "workspace"),
        ("workspace/a/b.txt", False, "workspace"),
        ("workspace/a", True, "workspace"),
        ("workspace", False, ""),
        ("vault/telegram_token", False, ""),
        ("vault", True, ""),
        ("shelldon.db-wal", False, ""),
        ("toolbox/live/x.py", False, ""),
        ("logs/shelldon.jsonl", False, ""),
        ("workspacex/a", False, ""),
        ("config.toml", True, ""),
    ],
)
def test_a_backup_holds_only_the_pets_own_parts(name: str, is_dir: bool, kind: str) -> None:
    assert member_kind(name, is_dir=is_dir) == kind


def test_a_fresh_home_holds_no_pet(settings: Settings) -> None:
    assert pet_in_home(settings) == ()
    with Store(settings.database) as store:
        Toolbox.from_settings(settings, store)  # what `tools list` leaves in a fresh home
    (settings.vault / "telegram_token").write_text("secret")
    (settings.home / "config.toml").write_text("")
    assert pet_in_home(settings) == ()
    assert not Path(f"{settings.database}-wal").exists()


def test_a_home_with_a_life_holds_a_pet(settings: Settings) -> None:
    with Store(settings.database) as store:
        store.conversation.remember("a fact", 1.0)
    assert pet_in_home(settings) == ("shelldon.db (1 rows)",)
    (settings.workspace / "notes.md").write_text("x")
    assert pet_in_home(settings)[1] == "workspace/ (1 entries)"


def test_tools_alone_make_a_pet(settings: Settings, sc: Toolbox) -> None:
    promote(sc, "adder", ADDER, ADDER_TEST)
    sc.store.close()
    found = pet_in_home(settings)
    assert "toolbox/ (2 files)" in found  # the tool and its kept test


def test_a_write_ahead_log_left_by_a_crash_counts_as_a_pet(settings: Settings) -> None:
    with Store(settings.database):
        pass
    Path(f"{settings.database}-wal").write_bytes(b"x" * 100)
    assert pet_in_home(settings) == ("shelldon.db",)


def test_the_config_goes_live_only_where_this_shelldon_would_read_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    plain = load_settings(environ={"SHELLDON_HOME": str(home)})
    assert config_destination(plain) == "config.toml"
    (home / "config.toml").write_text("")
    existing = load_settings(environ={"SHELLDON_HOME": str(home)})
    assert config_destination(existing) == RESTORED_CONFIG
    elsewhere = tmp_path / "etc.toml"
    elsewhere.write_text("")
    (home / "config.toml").unlink()
    deployed = load_settings(elsewhere, environ={"SHELLDON_HOME": str(home)})
    assert config_destination(deployed) == RESTORED_CONFIG


def migrated_to(path: Path, version: int) -> Path:
    db = sqlite3.connect(path)
    for migration in _MIGRATIONS[:version]:
        for statement in _split_sql(migration):
            db.execute(statement)
    db.execute(f"PRAGMA user_version = {version}")
    db.commit()
    db.close()
    return path


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION + 1))
def test_every_schema_our_migrations_made_is_accepted(tmp_path: Path, version: int) -> None:
    assert check_foreign_database(migrated_to(tmp_path / "old.db", version)) == version


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        (
            "CREATE TRIGGER t AFTER INSERT ON facts BEGIN DELETE FROM messages; END",
            "not shelldon's or altered: trigger t",
        ),
        ("CREATE VIEW v AS SELECT 1", "not shelldon's or altered: view v"),
        ("CREATE TABLE extra (x)", "not shelldon's or altered: table extra"),
        ("CREATE INDEX facts_by_time ON facts (created_at)", "index facts_by_time"),
        ("ALTER TABLE facts ADD COLUMN evil TEXT", "table facts"),
        ("DROP TRIGGER audit_append_only_update", "missing: trigger audit_append_only_update"),
        ("PRAGMA user_version = 0", "has schema v0"),
        (f"PRAGMA user_version = {SCHEMA_VERSION + 1}", "upgrade shelldon"),
    ],
)
def test_a_database_our_migrations_did_not_make_is_refused(
    tmp_path: Path, sql: str, why: str
) -> None:
    path = migrated_to(tmp_path / "forged.db", SCHEMA_VERSION)
    db = sqlite3.connect(path)
    db.execute(sql)
    db.commit()
    db.close()
    with pytest.raises(StoreError, match=why.replace("(", r"\(")):
        check_foreign_database(path)


def test_a_file_that_is_no_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(StoreError, match="cannot be read"):
        check_foreign_database(path)


def test_the_online_backup_is_one_self_contained_private_file(tmp_path: Path) -> None:
    with Store(tmp_path / "live.db") as store:
        store.conversation.remember("kept", 1.0)
        store.backup_to(tmp_path / "copy.db")
    copy = tmp_path / "copy.db"
    assert oct(copy.stat().st_mode & 0o777) == "0o600"
    assert not Path(f"{copy}-wal").exists()
    db = sqlite3.connect(copy)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert db.execute("SELECT fact FROM facts").fetchall() == [("kept",)]
    db.close()


def test_a_restored_database_keeps_its_life_but_not_its_trust(store: Store) -> None:
    store.tools.approve("adder", "hash", 1.0)
    store.parked.park_approval("t1", 7, b"blob", "write_file", 1.0, 3600)
    store.parked.park_promotion("t2", 7, "doubler", "h", "tool doubler", 1.0, 3600, code=b"x")
    store.inbox.put(b"answered", 1.0, update_id=1)
    store.inbox.put(b"unanswered", 1.0, update_id=2)
    store.inbox.take(store.inbox.waiting()[0].id, 1.0, "turn-a")
    store.inbox.finish("turn-a", 2.0)
    store.conversation.remember("a fact", 1.0)
    store.schedule.add(7, 100.0, "later", 1.0)
    gone = store.audit.distrust_for_restore(5.0)
    assert (gone.approved_tools, gone.approvals, gone.promotions, gone.inbox) == (1, 1, 1, 1)
    assert store.tools.approved() == []
    assert store.parked.pending() == []
    assert store.inbox.waiting() == [] and store.inbox.unanswered() == []
    assert store.conversation.facts() == ["a fact"]
    assert [s.prompt for s in store.schedule.due(200.0)] == ["later"]
    assert store.inbox.is_processed(2)  # the update is not fetched and answered again


def test_quarantined_tools_travel_in_a_backups_toolbox(sc: Toolbox, tmp_path: Path) -> None:
    promote(sc, "adder", ADDER, ADDER_TEST)
    sc.quarantine("adder", "failed 3 times")
    plain = export_toolbox(sc, tmp_path / "plain.tar.gz")
    assert plain.exported == ()
    whole = export_toolbox(sc, tmp_path / "whole.tar.gz", quarantined=True)
    assert whole.exported == ("adder",)
    assert [(t.name, t.test) for t in read_archive(tmp_path / "whole.tar.gz")] == [
        ("adder", ADDER_TEST)
    ]


def test_an_old_toolbox_in_a_restored_workspace_is_moved_aside_whole(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "tools").mkdir(parents=True)
    (workspace / "tools" / "evil.py").write_text("x")
    (workspace / "tools-tests").mkdir()
    (workspace / "notes.md").write_text("mine")
    assert set_aside_restored(workspace) == ("tools", "tools-tests")
    assert sorted(p.name for p in workspace.iterdir()) == ["notes.md", "tools-unapproved"]
    assert (workspace / "tools-unapproved" / "tools" / "evil.py").read_text() == "x"


HOLDER = textwrap.dedent(
    """
    import sys
    from shelldon.store import Store
    with Store(sys.argv[1]):
        print("open", flush=True)
        sys.stdin.readline()
    """
)


def test_a_process_holding_the_database_is_found_and_this_one_is_not(tmp_path: Path) -> None:
    database = tmp_path / "shelldon.db"
    with Store(database):
        assert os.getpid() not in database_users(database)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(database)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        assert database_users(database) == (holder.pid,)
    finally:
        holder.communicate("\n", timeout=30)
    deadline = time.monotonic() + 5
    while database_users(database) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert database_users(database) == ()


def test_a_workspace_file_is_never_read_through_a_link_swapped_in_after_the_walk(
    tmp_path: Path,
) -> None:
    # A backup may run as root while an approved command writes in the workspace.
    from shelldon.backup.writer import _add_workspace, _walk_workspace, _Writer

    workspace = tmp_path / "workspace"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "sub" / "notes").write_text("mine")
    (workspace / "leaf").write_text("mine too")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes").write_text("not the workspace's")
    walked = _walk_workspace(workspace)
    (workspace / "sub").rename(workspace / "old")
    (workspace / "sub").symlink_to(outside)
    (workspace / "leaf").unlink()
    (workspace / "leaf").symlink_to(outside / "notes")
    buffer = io.BytesIO()
    left_out: list[str] = []
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        writer = _Writer(tar)
        assert _add_workspace(writer, workspace, walked, left_out) == 0
    assert sorted(left_out) == [
        "leaf: gone or changed while backing up",
        "sub/notes: gone or changed while backing up",
    ]
    assert b"not the workspace's" not in buffer.getvalue()


NOT_DUMPABLE_HOLDER = textwrap.dedent(
    """
    import ctypes, sys
    from shelldon.store import Store
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0, as the service is
    with Store(sys.argv[1]):
        print("open", flush=True)
        sys.stdin.readline()
    """
)


def test_a_database_held_open_anywhere_is_in_use_even_when_proc_cannot_tell(
    tmp_path: Path,
) -> None:
    database = tmp_path / "shelldon.db"
    assert not database_in_use(database)  # none there: and none is made
    assert not database.exists()
    with Store(database):
        pass
    assert not database_in_use(database)
    holder = subprocess.Popen(
        [sys.executable, "-c", NOT_DUMPABLE_HOLDER, str(database)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        assert database_in_use(database)
    finally:
        holder.communicate("\n", timeout=30)
    assert not database_in_use(database)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shelldon.db"]  # no -wal, no -shm


def test_after_a_restore_no_promotion_in_the_audit_log_vouches_for_a_workspace_file(
    store: Store,
) -> None:
    store.audit.record("owner", "promoted", "adder", {}, 1.0, code_hash="h1")
    assert store.tools.promoted_hashes() == {"adder": "h1"}
    store.audit.record("owner", "restored", "pet.tar.gz", {}, 2.0)
    store.audit.record("owner", "promoted", "doubler", {}, 3.0, code_hash="h2")
    assert store.tools.promoted_hashes() == {}
