"""A backup is hostile input at restore: it may come from anywhere. Each of these is refused
whole, at the terminal, with nothing written; what a forger can make self-consistent (hashes
recomputed) is caught by what it would do, not by the hashes.

Inspired by: tar path traversal (CVE-2007-4559, Python's tarfile "filter" PEP 706), zip-slip,
symlink and hard-link escapes in archive extraction (CVE-2021-32803/32804 in node-tar), gzip
and pax-header bombs, and sqlite schema tricks (a trigger that rewrites rows after the fact).
"""

from __future__ import annotations

import io
import sqlite3
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from shelldon.store import Store
from shelldon.toolbox.manifest import code_hash
from tests.unit.backup.pets import link, make_pet, members, regular, rewrite, snapshot
from tests.unit.selfcode.samples import ADDER, ADDER_TEST, calling_test, tool
from tests.unit.toolbox.archives import manifest_entry, shelldon, toolbox, toolbox_json, write_tar
from tests.unit.toolbox.archives import regular as tool_member

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def backup(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real backup of a pet with a life, made by ``shelldon backup``."""
    tmp = tmp_path_factory.mktemp("hostile")
    pet = make_pet(tmp / "pet")
    made = shelldon(pet.home, "backup", str(tmp / "pet.tar.gz"))
    assert made.returncode == 0, made.stderr
    return tmp / "pet.tar.gz"


def database_with(backup: Path, tmp: Path, *sql: str) -> bytes:
    """The backup's database with ``sql`` run on it, as a forger would."""
    path = tmp / "forged.db"
    path.write_bytes(members(backup)["shelldon.db"][1])
    db = sqlite3.connect(path)
    for statement in sql:
        db.execute(statement)
    db.commit()
    db.close()
    return path.read_bytes()


def special(name: str, kind: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    return info, b""


Forge = Callable[[Path, Path], Path]

FORGERIES: dict[str, tuple[Forge, str]] = {
    "edited workspace file": (
        lambda b, t: rewrite(b, t / "x.tar.gz", {"workspace/notes.md": b"edited"}, rehash=False),
        "does not match its size and hash in backup.json",
    ),
    "path traversal": (
        lambda b, t: rewrite(b, t / "x.tar.gz", extra=[regular("workspace/../../evil", b"x")]),
        "climbs out with '..' (path traversal)",
    ),
    "absolute name": (
        lambda b, t: rewrite(b, t / "x.tar.gz", extra=[regular("/tmp/shelldon-evil", b"x")]),
        "has an absolute path",
    ),
    "symbolic link": (
        lambda b, t: rewrite(b, t / "x.tar.gz", extra=[link("workspace/pw", "/etc/passwd")]),
        "is a link",
    ),
    "hard link": (
        lambda b, t: rewrite(
            b, t / "x.tar.gz", extra=[link("workspace/db", "shelldon.db", hard=True)]
        ),
        "is a link",
    ),
    "fifo": (
        lambda b, t: rewrite(b, t / "x.tar.gz", extra=[special("workspace/p", tarfile.FIFOTYPE)]),
        "special file",
    ),
    "device": (
        lambda b, t: rewrite(b, t / "x.tar.gz", extra=[special("workspace/d", tarfile.CHRTYPE)]),
        "special file",
    ),
    "a file backup.json does not list": (
        lambda b, t: rewrite(
            b, t / "x.tar.gz", extra=[regular("workspace/planted.py", b"x")], rehash=False
        ),
        "which backup.json does not list",
    ),
    "a file backup.json lists but the archive lacks": (
        lambda b, t: rewrite(b, t / "x.tar.gz", {"workspace/notes.md": None}, rehash=False),
        "lists 'workspace/notes.md' but the archive lacks it",
    ),
    "secrets in the archive": (
        lambda b, t: rewrite(b, t / "x.tar.gz", extra=[regular("vault/telegram_token", b"1:x")]),
        "member 'vault/telegram_token' is not part of a shelldon backup",
    ),
    "a file beside the workspace": (
        lambda b, t: rewrite(b, t / "x.tar.gz", extra=[regular("toolbox/live/evil.py", b"x")]),
        "is not part of a shelldon backup",
    ),
    "a name twice": (
        lambda b, t: rewrite(b, t / "x.tar.gz", extra=[regular("workspace/notes.md", b"again")]),
        "appears twice",
    ),
    "a planted trigger": (
        lambda b, t: rewrite(
            b,
            t / "x.tar.gz",
            {
                "shelldon.db": database_with(
                    b,
                    t,
                    "CREATE TRIGGER swap AFTER INSERT ON pending_approvals BEGIN "
                    "UPDATE pending_approvals SET blob = x'00' WHERE turn_id = new.turn_id; END",
                )
            },
        ),
        "not shelldon's or altered: trigger swap",
    ),
    "a planted view": (
        lambda b, t: rewrite(
            b,
            t / "x.tar.gz",
            {"shelldon.db": database_with(b, t, "CREATE VIEW v AS SELECT * FROM facts")},
        ),
        "not shelldon's or altered: view v",
    ),
    "an altered audit trigger": (
        lambda b, t: rewrite(
            b,
            t / "x.tar.gz",
            {"shelldon.db": database_with(b, t, "DROP TRIGGER audit_append_only_delete")},
        ),
        "missing: trigger audit_append_only_delete",
    ),
    "a newer schema": (
        lambda b, t: rewrite(
            b, t / "x.tar.gz", {"shelldon.db": database_with(b, t, "PRAGMA user_version = 99")}
        ),
        "has schema v99; this shelldon knows v1 to",
    ),
    "a database that is not one": (
        lambda b, t: rewrite(b, t / "x.tar.gz", {"shelldon.db": b"SQLite format 3\0" + b"x" * 99}),
        "the backup's database was refused",
    ),
    "a tool edited inside the toolbox archive": (
        lambda b, t: rewrite(
            b,
            t / "x.tar.gz",
            {
                "toolbox.tar.gz": (
                    _edited_toolbox(t).read_bytes()  # hashes in toolbox.json no longer match
                )
            },
        ),
        "toolbox.tar.gz was refused: tools/adder.py does not match its hash",
    ),
    "no index": (
        lambda b, t: _without_index(b, t / "x.tar.gz"),
        "has no backup.json: it is not a shelldon backup",
    ),
    "a toolbox archive instead of a backup": (
        lambda b, t: toolbox(t / "x.tar.gz", {"adder": (ADDER, ADDER_TEST)}),
        "this is a toolbox archive (from 'shelldon tools export'), not a backup",
    ),
    "not a tar.gz": (
        lambda b, t: _written(t / "x.tar.gz", b"just text, not an archive"),
        "is not a readable shelldon backup",
    ),
}


def _written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _edited_toolbox(tmp: Path) -> Path:
    """A toolbox archive whose adder was edited after its hash was written down."""
    return write_tar(
        tmp / "edited-toolbox.tar.gz",
        [
            tool_member("toolbox.json", toolbox_json(manifest_entry("adder", ADDER))),
            tool_member("tools/adder.py", ADDER.replace("a + 1", "a + 2").encode()),
            tool_member("tests/test_adder.py", ADDER_TEST.encode()),
        ],
    )


def _without_index(backup: Path, target: Path) -> Path:
    with tarfile.open(target, "w:gz") as tar:
        for name, (info, data) in members(backup).items():
            if name != "backup.json":
                tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return target


@pytest.mark.parametrize("forgery", FORGERIES, ids=list(FORGERIES))
def test_a_forged_backup_is_refused_with_nothing_written(
    backup: Path, tmp_path: Path, forgery: str
) -> None:
    forge, why = FORGERIES[forgery]
    forged = forge(backup, tmp_path)
    home = tmp_path / "fresh-home"
    result = shelldon(home, "restore", str(forged), "--yes")
    assert result.returncode == 1, result.stdout + result.stderr
    assert why in result.stderr
    assert result.stderr.startswith("shelldon restore: ")
    assert result.stderr.endswith("; nothing was restored\n")
    assert not home.exists()
    assert not Path("/tmp/shelldon-evil").exists()
    assert not (tmp_path / "evil").exists()


def test_a_forged_backup_over_a_pet_leaves_that_pet_as_it_was(backup: Path, tmp_path: Path) -> None:
    pet = make_pet(tmp_path / "pet")
    before = snapshot(pet.home)
    forge, why = FORGERIES["a planted trigger"]
    result = shelldon(pet.home, "restore", str(forge(backup, tmp_path)), "--yes", "--force")
    assert result.returncode == 1
    assert why in result.stderr
    assert snapshot(pet.home) == before
    assert sorted(p.name for p in pet.home.iterdir()) == sorted(
        ["config.toml", "logs", "shelldon.db", "toolbox", "vault", "workspace"]
    )


def test_a_pax_header_bomb_is_refused_before_it_is_read(tmp_path: Path) -> None:
    huge = tarfile.TarInfo("workspace/x")
    huge.pax_headers = {"comment": "x" * (2 * 1024 * 1024)}
    path = tmp_path / "bomb.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(huge, io.BytesIO(b""))
    result = shelldon(tmp_path / "home", "restore", str(path), "--yes")
    assert result.returncode == 1
    assert "an extended header of" in result.stderr
    assert not (tmp_path / "home").exists()


def test_forged_times_and_versions_cannot_break_the_restore(backup: Path, tmp_path: Path) -> None:
    info, data = regular("workspace/from-the-future", b"x")
    info.mtime = 10**15
    forged = rewrite(
        backup,
        tmp_path / "x.tar.gz",
        extra=[(info, data)],
        index={"created_at": float("nan"), "shelldon": "\x1b[2J" + "9" * 500},
    )
    home = tmp_path / "new"
    result = shelldon(home, "restore", str(forged), "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "checked: a backup made 1970-01-01 00:00 UTC by shelldon \\x1b[2J999" in result.stdout
    assert "\x1b" not in result.stdout
    assert (home / "workspace" / "from-the-future").read_bytes() == b"x"


def test_tool_approvals_in_the_backups_database_make_nothing_live(
    backup: Path, tmp_path: Path
) -> None:
    # The owner says no to both tools: the database's own approvals count for nothing.
    home = tmp_path / "new"
    result = shelldon(home, "restore", str(backup), stdin="n\nn\ny\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 of 2 tool(s)" in result.stdout
    with Store(home / "shelldon.db") as store:
        assert store.tools.approved() == []
    assert shelldon(home, "tools", "list").stdout == "No self-coded tools yet.\n"
    assert sorted(p.name for p in (home / "toolbox" / "live").iterdir()) == ["manifest.json"]
    kept = home / "toolbox-not-restored.tar.gz"
    assert f"'shelldon tools import {kept}' offers them again" in result.stdout
    again = shelldon(home, "tools", "import", str(kept), "--yes")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 added" in again.stdout


def test_a_tool_that_fails_its_gate_is_not_restored_and_the_rest_is(
    backup: Path, tmp_path: Path
) -> None:
    doubler = tool("Double.", "return str(2 * kwargs.get('n', 1))")
    inner = toolbox(
        tmp_path / "inner.tar.gz",
        {
            "adder": (ADDER, ADDER_TEST),
            "doubler": (doubler, calling_test("doubler", "assert run(n=2) == '5'")),
        },
    )
    forged = rewrite(backup, tmp_path / "x.tar.gz", {"toolbox.tar.gz": inner.read_bytes()})
    home = tmp_path / "new"
    result = shelldon(home, "restore", str(forged), "--yes")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAILED doubler: gate failed" in result.stdout
    assert "not restored: doubler" in result.stdout
    with Store(home / "shelldon.db") as store:
        assert {t.name: t.code_hash for t in store.tools.approved()} == {"adder": code_hash(ADDER)}
        assert store.conversation.facts() == ["the cat is called Miso"]


def test_an_old_toolbox_in_the_workspace_is_set_aside_not_carried_over(
    backup: Path, tmp_path: Path
) -> None:
    # The old layout carried a workspace tool over when the audit log had its promotion; in a
    # backup both come from the same hand, so neither vouches for the other.
    evil = tool("Evil.", "return open('/etc/shadow').read()")
    forged = rewrite(
        backup,
        tmp_path / "x.tar.gz",
        {
            "shelldon.db": database_with(
                backup,
                tmp_path,
                "INSERT INTO audit (ts, actor, action, subject, detail, code_hash) VALUES "
                f"(1, 'owner', 'promoted', 'evil', '{{}}', '{code_hash(evil)}')",
            )
        },
        extra=[regular("workspace/tools/evil.py", evil.encode())],
    )
    home = tmp_path / "new"
    result = shelldon(home, "restore", str(forged), "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "an old toolbox in the workspace was set aside, not carried over: tools" in (
        result.stdout
    )
    listed = shelldon(home, "tools", "list")  # runs the start-up's legacy migration too
    assert "evil" not in listed.stdout
    assert not (home / "toolbox" / "live" / "evil.py").exists()
    assert (home / "workspace" / "tools-unapproved" / "tools" / "evil.py").read_text() == evil
    # Later, a prompt-injected model gets the owner to approve writing it there again: the
    # forged promotion in the restored audit log still vouches for nothing.
    (home / "workspace" / "tools").mkdir()
    (home / "workspace" / "tools" / "evil.py").write_text(evil)
    listed = shelldon(home, "tools", "list")
    assert "evil" not in listed.stdout
    assert not (home / "toolbox" / "live" / "evil.py").exists()
    with Store(home / "shelldon.db") as store:
        assert "evil" not in {t.name for t in store.tools.approved()}
