"""``shelldon backup`` and ``shelldon restore`` as the owner runs them: real subprocesses on real
homes in tmp dirs. A round trip to a fresh home keeps the pet's life; secrets never travel; a
restore over a pet, or under a running service, is refused with the home as it was."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import signal
import stat
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from shelldon.store import SCHEMA_VERSION, Store
from shelldon.toolbox.manifest import code_hash, read_manifest
from tests.unit.backup.pets import (
    FLAKY,
    NOW,
    SECRET,
    home_settings,
    make_pet,
    snapshot,
)
from tests.unit.selfcode.samples import ADDER
from tests.unit.toolbox.archives import shelldon

pytestmark = pytest.mark.slow


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_round_trip_to_a_fresh_home_keeps_history_facts_schedule_audit_and_tools(
    tmp_path: Path,
) -> None:
    pet = make_pet(tmp_path / "pi-one")
    backup = tmp_path / "pet.tar.gz"

    made = shelldon(pet.home, "backup", str(backup))
    assert made.returncode == 0, made.stderr
    assert "1 live tool(s) (adder), 1 quarantined, 2 workspace file(s)" in made.stdout
    assert mode(backup) == 0o600

    fresh = home_settings(tmp_path / "pi-two")
    # Two tools gated and asked for, then the config.
    restored = shelldon(fresh.home, "restore", str(backup), stdin="y\ny\ny\n")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    out = restored.stdout
    assert "checked: a backup made" in out
    assert "Add adder to the toolbox? [y/N]" in out
    assert "gate passed: 1 test(s)" in out
    assert "(flaky was quarantined in the backup; it goes back there)" in out
    assert "added flaky: back in quarantine, as in the backup" in out
    assert "2 of 2 tool(s) (1 back in quarantine)" in out
    assert "not carried over: 1 parked approval(s)" in out
    assert f"put them in {fresh.vault}/" in out

    with Store(fresh.database) as store:
        assert [(m.role, m.content) for m in store.conversation.recent(7)] == [
            ("user", "what is my cat called?"),
            ("assistant", "Miso."),
        ]
        assert store.conversation.facts() == ["the cat is called Miso"]
        assert [s.prompt for s in store.schedule.due(NOW + 2 * 86400)] == ["remind me to feed Miso"]
        actions = [(e.actor, e.action, e.subject) for e in store.audit.log()]
        assert ("owner", "approved", "write_file") in actions  # the old device's audit
        assert ("gate", "passed", "adder") in actions  # gated again here
        assert actions[-1] == ("owner", "restored", "pet.tar.gz")
        assert {h.name: h.strikes for h in store.tools.health()} == {"flaky": 3}
        assert store.parked.pending() == []
        assert {t.name: (t.state, t.code_hash) for t in store.tools.approved()} == {
            "adder": ("live", code_hash(ADDER)),
            "flaky": ("quarantined", code_hash(FLAKY)),
        }
    listed = shelldon(fresh.home, "tools", "list")
    assert "adder  live" in listed.stdout
    assert "flaky  quarantined        3  failed 3 times" in listed.stdout
    assert [e.name for e in read_manifest(fresh.live_tools).entries] == ["adder"]

    assert snapshot(fresh.home / "workspace") == snapshot(pet.workspace)
    assert mode(fresh.workspace / "bin" / "hello.sh") == 0o700
    assert mode(fresh.workspace / "notes.md") == 0o600
    assert int((fresh.workspace / "notes.md").stat().st_mtime) == int(
        (pet.workspace / "notes.md").stat().st_mtime
    )
    assert (fresh.workspace / "empty").is_dir()
    assert (fresh.home / "config.toml").read_text() == (pet.home / "config.toml").read_text()
    assert mode(fresh.home) == 0o700
    assert mode(fresh.database) == 0o600
    assert mode(fresh.workspace) == mode(fresh.toolbox) == 0o700
    # Secrets never travel, and nothing is left of the restore's own scratch space.
    assert not fresh.vault.exists()
    assert [p.name for p in fresh.home.iterdir() if p.name.startswith(".")] == []


def test_the_vault_never_goes_into_a_backup(tmp_path: Path) -> None:
    pet = make_pet(tmp_path / "pet")
    (pet.vault / "openai_api_key").write_text("sk-another-secret-value\n")
    backup = tmp_path / "pet.tar.gz"
    assert shelldon(pet.home, "backup", str(backup)).returncode == 0
    with tarfile.open(backup) as tar:
        names = tar.getnames()
    assert not [n for n in names if "vault" in n or "token" in n or "key" in n]
    raw = gzip.decompress(backup.read_bytes())
    assert SECRET.encode() not in raw
    assert b"sk-another-secret-value" not in raw
    with tarfile.open(fileobj=io.BytesIO(raw)) as inner:
        toolbox = inner.extractfile("toolbox.tar.gz")
        assert toolbox is not None and SECRET.encode() not in gzip.decompress(toolbox.read())


WRITER = textwrap.dedent(
    """
    import sys, time
    from shelldon.store import Store
    with Store(sys.argv[1]) as store:
        print("open", flush=True)
        for i in range(int(sys.argv[2])):
            store.conversation.append(9, "user", f"message {i}", time.time())
            store.audit.record("test", "wrote", str(i), {}, time.time())
    print("done", flush=True)
    """
)


def test_a_backup_is_consistent_while_another_process_keeps_writing(tmp_path: Path) -> None:
    pet = make_pet(tmp_path / "pet")
    writes = 3000
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(pet.database), str(writes)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None and writer.stdout.readline() == "open\n"
    backups = []
    try:
        for n in range(3):
            backup = tmp_path / f"pet-{n}.tar.gz"
            made = shelldon(pet.home, "backup", str(backup))
            assert made.returncode == 0, made.stderr
            backups.append(backup)
    finally:
        assert writer.wait(timeout=120) == 0
    assert writer.stdout.read() == "done\n"
    with Store(pet.database) as store:
        assert len(store.conversation.recent(9, limit=writes + 1)) == writes
    seen = []
    for n, backup in enumerate(backups):
        home = tmp_path / f"restored-{n}"
        restored = shelldon(home, "restore", str(backup), "--yes")
        assert restored.returncode == 0, restored.stdout + restored.stderr
        with Store(home / "shelldon.db") as store:
            messages = len(store.conversation.recent(9, limit=writes + 1))
            wrote = sum(1 for e in store.audit.log(limit=10 * writes) if e.action == "wrote")
        # One snapshot: every message goes with its audit line (they commit one by one).
        assert messages in (wrote, wrote + 1)
        seen.append(messages)
    assert seen == sorted(seen)


def test_restore_over_a_pet_is_refused_without_force_and_keeps_the_old_one_with_it(
    tmp_path: Path,
) -> None:
    pet = make_pet(tmp_path / "pet")
    backup = tmp_path / "pet.tar.gz"
    assert shelldon(pet.home, "backup", str(backup)).returncode == 0
    other = make_pet(tmp_path / "other")
    with Store(other.database) as store:
        store.conversation.remember("the other pet's own fact", NOW)
    before = snapshot(other.home)

    refused = shelldon(other.home, "restore", str(backup), "--yes")
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"shelldon restore: {other.home} already holds a pet (")
    assert "pass --force" in refused.stderr
    assert snapshot(other.home) == before

    forced = shelldon(other.home, "restore", str(backup), "--yes", "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    aside = [p for p in other.home.iterdir() if p.name.startswith("replaced-")]
    assert len(aside) == 1 and f"the pet that was here is in {aside[0]}" in forced.stdout
    with Store(aside[0] / "shelldon.db") as store:
        assert "the other pet's own fact" in store.conversation.facts()
    with Store(other.database) as store:
        assert "the other pet's own fact" not in store.conversation.facts()
    # The vault and the config that were here stay as they were.
    assert (other.vault / "telegram_token").read_text() == SECRET + "\n"
    assert "config.restored.toml" in forced.stdout
    assert (other.home / "config.toml").read_text() == before["config.toml"].decode()


def test_a_fresh_home_with_only_a_config_and_secrets_is_not_a_pet(tmp_path: Path) -> None:
    pet = make_pet(tmp_path / "pet")
    backup = tmp_path / "pet.tar.gz"
    assert shelldon(pet.home, "backup", str(backup)).returncode == 0
    new = home_settings(tmp_path / "new")
    new.vault.mkdir(parents=True)
    (new.vault / "telegram_token").write_text("new-token\n")
    (new.home / "config.toml").write_text("[limits]\ndaily_turn_budget = 5\n")
    assert shelldon(new.home, "tools", "list").returncode == 0  # creates an empty database

    restored = shelldon(new.home, "restore", str(backup), "--yes")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert (new.vault / "telegram_token").read_text() == "new-token\n"
    assert (new.home / "config.toml").read_text() == "[limits]\ndaily_turn_budget = 5\n"
    assert (new.home / "config.restored.toml").read_text() == "[limits]\ndaily_turn_budget = 12\n"
    assert [p.name for p in new.home.iterdir() if p.name.startswith("replaced-")] == []


def test_the_backups_config_needs_the_owners_yes(tmp_path: Path) -> None:
    pet = make_pet(tmp_path / "pet")
    (pet.home / "config.toml").write_text(
        '[brain]\nprovider = "openai"\nbase_url = "https://llm.example.net/v1"\n'
        '[telegram]\napi_base = "https://bot.example.net"\n'
    )
    backup = tmp_path / "pet.tar.gz"
    assert shelldon(pet.home, "backup", str(backup)).returncode == 0
    new = home_settings(tmp_path / "new")
    restored = shelldon(new.home, "restore", str(backup), stdin="y\ny\nn\n")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert (
        "the bot token goes to https://bot.example.net; the openai key and every conversation "
        "go to https://llm.example.net/v1" in restored.stdout
    )
    assert not (new.home / "config.toml").exists()
    assert "base_url" in (new.home / "config.restored.toml").read_text()


SERVICE = textwrap.dedent(
    """
    import sys, time
    from shelldon.store import Store
    with Store(sys.argv[1]) as store:
        print("open", flush=True)
        sys.stdin.readline()
    """
)


def test_restore_is_refused_while_the_database_is_in_use(tmp_path: Path) -> None:
    pet = make_pet(tmp_path / "pet")
    backup = tmp_path / "pet.tar.gz"
    assert shelldon(pet.home, "backup", str(backup)).returncode == 0
    target = make_pet(tmp_path / "target")
    before = snapshot(target.home)
    service = subprocess.Popen(
        [sys.executable, "-c", SERVICE, str(target.database)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert service.stdout is not None and service.stdout.readline() == "open\n"
        refused = shelldon(target.home, "restore", str(backup), "--yes", "--force")
    finally:
        service.communicate("\n", timeout=30)
    assert refused.returncode == 1
    assert f"is in use (process {service.pid}" in refused.stderr
    assert "stop it first (sudo systemctl stop shelldon)" in refused.stderr
    assert snapshot(target.home) == before


def test_an_old_schema_is_migrated_by_the_normal_store_open(tmp_path: Path) -> None:
    import sqlite3

    from shelldon.store import _MIGRATIONS, _split_sql
    from tests.unit.backup.pets import rewrite

    pet = make_pet(tmp_path / "pet")
    backup = tmp_path / "pet.tar.gz"
    assert shelldon(pet.home, "backup", str(backup)).returncode == 0
    old = tmp_path / "v1.db"
    db = sqlite3.connect(old)
    for statement in _split_sql(_MIGRATIONS[0]):
        db.execute(statement)
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO facts (fact, created_at) VALUES ('remembered in v1', 1.0)")
    db.commit()
    db.close()
    aged = rewrite(backup, tmp_path / "aged.tar.gz", {"shelldon.db": old.read_bytes()})

    home = tmp_path / "new"
    restored = shelldon(home, "restore", str(aged), "--yes")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert f"(schema v1, migrated to v{SCHEMA_VERSION})" in restored.stdout
    with Store(home / "shelldon.db") as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.conversation.facts() == ["remembered in v1"]
        assert [t.name for t in store.tools.approved()] == ["adder", "flaky"]


def test_backup_refuses_a_file_inside_the_home_or_one_that_exists(tmp_path: Path) -> None:
    pet = make_pet(tmp_path / "pet")
    inside = shelldon(pet.home, "backup", str(pet.workspace / "pet.tar.gz"))
    assert inside.returncode == 1
    assert "is inside the pet's home" in inside.stderr
    assert not (pet.workspace / "pet.tar.gz").exists()
    existing = tmp_path / "pet.tar.gz"
    existing.write_text("keep me")
    refused = shelldon(pet.home, "backup", str(existing))
    assert refused.returncode == 1
    assert "already exists; choose another file or pass --force" in refused.stderr
    assert existing.read_text() == "keep me"
    assert shelldon(pet.home, "backup", str(existing), "--force").returncode == 0
    assert tarfile.is_tarfile(existing)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_backup_of_a_home_without_a_pet_says_so(tmp_path: Path) -> None:
    result = shelldon(tmp_path / "nobody", "backup", str(tmp_path / "x.tar.gz"))
    assert result.returncode == 1
    assert result.stderr.startswith(f"shelldon backup: there is no pet at {tmp_path / 'nobody'}")
    assert not (tmp_path / "nobody").exists()


def test_backup_names_what_it_left_out_of_the_workspace(tmp_path: Path) -> None:
    pet = make_pet(tmp_path / "pet")
    (pet.workspace / "passwd").symlink_to("/etc/passwd")
    os.mkfifo(pet.workspace / "pipe")
    backup = tmp_path / "pet.tar.gz"
    made = shelldon(pet.home, "backup", str(backup))
    assert made.returncode == 0, made.stderr
    assert "left out of the workspace: passwd: a symbolic link" in made.stdout
    assert "left out of the workspace: pipe: not a regular file" in made.stdout
    with tarfile.open(backup) as tar:
        index = json.load(tar.extractfile("backup.json"))  # type: ignore[arg-type]
        assert all(m.isreg() or m.isdir() for m in tar.getmembers())
    assert "workspace/passwd" not in index["files"]


def test_help_says_what_backup_and_restore_do(tmp_path: Path) -> None:
    for command in ("backup", "restore"):
        result = shelldon(tmp_path, command, "--help")
        assert result.returncode == 0
        assert "exit status:" in result.stdout
        assert f"home:   {tmp_path}" in result.stdout
    assert "never the vault" in shelldon(tmp_path, "backup", "--help").stdout.lower()
    usage = shelldon(tmp_path, "restore")
    assert usage.returncode == 2
    assert "FILE" in usage.stderr


def test_backup_leaves_out_a_tool_that_is_not_the_approved_code(tmp_path: Path) -> None:
    pet = make_pet(tmp_path / "pet")
    (pet.live_tools / "adder.py").write_text(ADDER.replace("a + 1", "a + 1000"))
    backup = tmp_path / "pet.tar.gz"
    made = shelldon(pet.home, "backup", str(backup))
    assert made.returncode == 0, made.stderr
    assert "left out, not the code you approved (tampered or broken): adder" in made.stdout
    with tarfile.open(backup) as tar:
        inner = tar.extractfile("toolbox.tar.gz")
        assert inner is not None
        with tarfile.open(fileobj=io.BytesIO(inner.read())) as tools:
            assert "tools/adder.py" not in tools.getnames()


EDIT_DURING_EXPORT = textwrap.dedent(
    """
    import os, sys
    from shelldon.cli import main
    tool, edited = sys.argv[1], sys.argv[2]
    opened = []
    def edit_between_check_and_copy(event, args):
        # The export reads a tool twice: to check it is the approved code, then to copy it.
        # The edit lands between the two, as the owner's editor (or a tool) could.
        if event == "open" and isinstance(args[0], str) and args[0] == tool:
            opened.append(tool)
            if len(opened) == 2:
                with open(tool, "w") as fh:
                    fh.write(edited)
    sys.addaudithook(edit_between_check_and_copy)
    sys.exit(main(sys.argv[3:]))
    """
)


def test_a_tool_changed_while_backing_up_fails_the_backup_with_one_line_and_no_file(
    tmp_path: Path,
) -> None:
    pet = make_pet(tmp_path / "pet")
    tool = str(pet.live_tools / "adder.py")
    edited = ADDER.replace("a + 1", "a + 2")
    backup = tmp_path / "pet.tar.gz"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLDON_")}
    env["SHELLDON_HOME"] = str(pet.home)
    made = subprocess.run(
        [sys.executable, "-c", EDIT_DURING_EXPORT, tool, edited, "backup", str(backup)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert Path(tool).read_text() == edited  # the edit did land mid-export
    assert made.returncode == 1
    assert made.stderr.splitlines() == [
        "shelldon backup: tool adder changed while exporting; run it again"
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["pet"]


def test_ctrl_c_at_a_restore_prompt_restores_nothing(tmp_path: Path) -> None:
    pet = make_pet(tmp_path / "pet")
    backup = tmp_path / "pet.tar.gz"
    assert shelldon(pet.home, "backup", str(backup)).returncode == 0
    home = tmp_path / "new"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLDON_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "shelldon", "restore", str(backup)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**env, "SHELLDON_HOME": str(home)},
        # As at a terminal: a shell that ran the tests in the background (`./test &`) left
        # SIGINT ignored in the xdist workers, and an ignored signal stays ignored across exec.
        # (One call, no lock taken: safe in the fork of a threaded process.)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + 60
    while b"[y/N] " not in seen and time.monotonic() < deadline:
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            break
        seen += chunk
    assert b"Add adder to the toolbox? [y/N] " in seen
    assert any(p.name.startswith(".restore-") for p in home.iterdir())  # mid-way
    proc.send_signal(signal.SIGINT)
    # Ctrl-C alone, as at a terminal: closing stdin at the same moment races it (an answer of
    # EOF, "no", read before the signal is handled, and the restore goes on).
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out[-500:], err[-500:])
    assert err.decode().endswith("shelldon restore: interrupted (Ctrl-C); nothing was restored\n")
    assert not home.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give files to another user")
def test_as_root_the_restored_pet_belongs_to_the_homes_owner(tmp_path: Path) -> None:
    # `sudo shelldon restore` into /var/lib/shelldon, owned by the service user.
    pet = make_pet(tmp_path / "pet")
    backup = tmp_path / "pet.tar.gz"
    assert shelldon(pet.home, "backup", str(backup)).returncode == 0
    home = tmp_path / "service-home"
    home.mkdir(mode=0o700)
    os.chown(home, 65534, 65534)
    restored = shelldon(home, "restore", str(backup), "--yes")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    owners = {
        (p.stat().st_uid, p.stat().st_gid)
        for p in [home, *home.rglob("*")]
        if p.relative_to(home).parts[:1] != ("logs",)
    }
    assert owners == {(65534, 65534)}


def test_a_second_restore_at_the_same_time_is_refused(tmp_path: Path) -> None:
    import fcntl

    pet = make_pet(tmp_path / "pet")
    backup = tmp_path / "pet.tar.gz"
    assert shelldon(pet.home, "backup", str(backup)).returncode == 0
    home = tmp_path / "new"
    home.mkdir()
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a restore running now holds
        refused = shelldon(home, "restore", str(backup), "--yes")
    finally:
        os.close(fd)
    assert refused.returncode == 1
    assert f"another restore into {home} is running; wait for it" in refused.stderr
    assert [p.name for p in home.iterdir() if p.name != "logs"] == []


def test_what_a_killed_restore_left_behind_is_swept_by_the_next(tmp_path: Path) -> None:
    pet = make_pet(tmp_path / "pet")
    backup = tmp_path / "pet.tar.gz"
    assert shelldon(pet.home, "backup", str(backup)).returncode == 0
    home = tmp_path / "new"
    (home / ".restore-killed" / "workspace").mkdir(parents=True)
    restored = shelldon(home, "restore", str(backup), "--yes")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert [p.name for p in home.iterdir() if p.name.startswith(".")] == []
