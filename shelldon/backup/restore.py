"""Restoring a backup (``shelldon restore FILE``) into the home, all or nothing.

A backup may come from anywhere, so a restore trusts nothing in it that could run code or
decide for the owner:

- It is refused while any connection has the home's database open (the service, a chat, a
  ``tools`` command; ``database_in_use``): the running service would go on writing to the
  replaced file and lose everything after the restore. Stop the service first.
- It is refused over a home that holds a pet (conversation, facts, audit, tools, workspace
  files) unless ``force``; then the pet that was there is moved to ``<home>/replaced-*/``,
  never deleted. The vault and an existing ``config.toml`` are never touched.
- The archive is unpacked into a new directory inside the home and checked whole there
  (``unpack_backup``); the database is migrated by the normal ``Store`` open, then loses its
  tool approvals, parked approvals and promotions and unanswered inbox events
  (``Store.distrust_for_restore``). Every tool is gated again by real pytest and put to the
  owner, as ``tools import`` does; one that was quarantined goes back to quarantine. An old
  toolbox in the restored workspace is set aside, never carried over (the audit log that would
  vouch for it came in the same file). The backup's config becomes ``config.toml`` only when
  the home has none, the config in use would be that file, and the owner says yes to where it
  sends the bot token and model key; else it is written as ``config.restored.toml`` to read.
- Only when all of that succeeded is anything moved into place (renames within the home's
  filesystem); any failure before removes the new directory and leaves the home as it was.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from shelldon.backup.layout import (
    CONFIG_MEMBER,
    DATABASE_MEMBER,
    TOOLBOX_MEMBER,
    WORKSPACE_DIR,
    BackupError,
)
from shelldon.backup.reader import Unpacked, unpack_backup
from shelldon.config import ConfigError, Settings, load_settings
from shelldon.home import PRIVATE_DIR, make_private_dir
from shelldon.store import Distrusted, Store, database_in_use
from shelldon.toolbox.atomic import fsync_dir
from shelldon.toolbox.importer import Ask, ImportResult, Outcome, import_tools
from shelldon.toolbox.legacy import set_aside_restored
from shelldon.toolbox.toolbox import Toolbox

RESTORED_CONFIG = "config.restored.toml"
NOT_RESTORED_TOOLS = "toolbox-not-restored.tar.gz"
_PET_TABLES = ("messages", "facts", "schedule", "audit", "approved_tools")
_PET_PARTS = (DATABASE_MEMBER, "toolbox", WORKSPACE_DIR)


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What a restore did: the backup it read, each tool's fate, what it distrusted, where
    the config went and where the pet that was there went."""

    backup: Unpacked
    schema_version: int
    results: tuple[ImportResult, ...]
    requarantined: tuple[str, ...]
    distrusted: Distrusted
    config: str
    replaced: Path | None
    set_aside: tuple[str, ...]
    kept_toolbox: Path | None


def database_users(database: Path) -> tuple[int, ...]:
    """Other processes that have ``database`` (or its WAL files) open, as far as ``/proc``
    lets this one see, to name them: every process as root; as another user, only its own
    processes that are dumpable, which the service is not (``database_in_use`` decides)."""
    base = str(database.resolve())
    targets = {base, f"{base}-wal", f"{base}-shm"}
    found: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{entry.name}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry.name}/fd/{fd}") in targets:
                    found.append(int(entry.name))
                    break
    return tuple(found)


def _database_rows(path: Path) -> int:
    """How many rows of a pet's life the database holds (-1 when it cannot be read, or a
    write-ahead log a crash left may hold more)."""
    wal = path.with_name(f"{path.name}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        return -1
    try:
        # immutable: nobody has it open (checked before), and a read must not leave -shm/-wal.
        db = sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)
    except sqlite3.Error:
        return -1
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return sum(
            int(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # noqa: S608 - our names
            for t in _PET_TABLES
            if t in tables
        )
    except sqlite3.Error:
        return -1
    finally:
        db.close()


def pet_in_home(settings: Settings) -> tuple[str, ...]:
    """What of a pet the home already holds, in words ("" parts left out): a database with
    rows in it, files in the workspace, tools in the toolbox. A fresh home (empty directories,
    a database nothing was written to, the vault, a config) holds none."""
    found: list[str] = []
    if settings.database.exists():
        rows = _database_rows(settings.database)
        if rows:
            found.append(
                f"{settings.database.name} ({rows} rows)" if rows > 0 else settings.database.name
            )
    if settings.workspace.is_dir() and any(settings.workspace.iterdir()):
        found.append(f"{WORKSPACE_DIR}/ ({len(list(settings.workspace.iterdir()))} entries)")
    tools = [
        p.name
        for sub in ("live", "quarantine", "tests")
        if (settings.toolbox / sub).is_dir()
        for p in (settings.toolbox / sub).iterdir()
        if p.name != "manifest.json"
    ]
    if tools:
        found.append(f"toolbox/ ({len(tools)} files)")
    return tuple(found)


def config_destination(settings: Settings) -> str:
    """Where the backup's config may go: ``config.toml`` when the home has none and that is
    the file this shelldon would read; else ``config.restored.toml``, for the owner to read."""
    home_config = settings.home / "config.toml"
    would_read = settings.config_file.absolute() == home_config.absolute()
    if would_read and not os.path.lexists(home_config):
        return "config.toml"
    return RESTORED_CONFIG


def config_endpoints(config: Path, home: Path) -> str:
    """Where a config sends the bot token and the model key, in one sentence for the owner;
    ``ConfigError`` when it is not a config this shelldon can use."""
    restored = load_settings(config, environ={"SHELLDON_HOME": str(home)})
    brain = restored.brain
    where = brain.base_url or "its default address"
    if brain.provider == "scripted":
        return f"the bot token goes to {restored.telegram.api_base}; the brain is scripted"
    return (
        f"the bot token goes to {restored.telegram.api_base}; the {brain.provider} key and "
        f"every conversation go to {where} (model {brain.model})"
    )


AskConfig = Callable[[str], bool]
"""Put the backup's config to the owner: given where it sends the secrets, True to use it."""


def _give_to_home_owner(paths: list[Path], home: Path) -> None:
    """As root, restored files belong to the home's owner (the service user), as the rest of
    the home does; otherwise they are this user's already."""
    st = home.stat()
    if os.geteuid() != 0 or st.st_uid == 0:
        return
    for top in paths:
        os.lchown(top, st.st_uid, st.st_gid)
        if top.is_dir() and not top.is_symlink():
            for root, dirs, files in os.walk(top):
                for name in dirs + files:
                    os.lchown(Path(root) / name, st.st_uid, st.st_gid)


def _prepare(
    settings: Settings,
    backup: Path,
    unpacked: Unpacked,
    ask_tool: Ask,
    ask_config: AskConfig,
    on_result: Callable[[ImportResult], None],
) -> RestoreReport:
    """Everything that happens inside the new directory before it moves into place; the
    report has no ``replaced`` or ``kept_toolbox`` yet."""
    root = unpacked.root
    workspace = make_private_dir(root / WORKSPACE_DIR)
    set_aside = set_aside_restored(workspace)
    now = time.time()
    with Store(root / DATABASE_MEMBER) as store:
        schema = store.schema_version
        distrusted = store.audit.distrust_for_restore(now)
        selfcode = Toolbox(root / "toolbox", store, settings.limits, settings.sandbox)
        results = import_tools(
            unpacked.tools,
            selfcode,
            ask_tool,
            archive=backup.absolute(),
            on_result=on_result,
            via="restore",
        )
        promoted = {r.name for r in results if r.outcome is Outcome.PROMOTED}
        requarantined = []
        for name, reason in unpacked.quarantined:
            if name in promoted:
                selfcode.quarantine(name, reason or "quarantined before the backup")
                requarantined.append(name)
        selfcode.write_manifest()
        config = ""
        if unpacked.has_config:
            config = config_destination(settings)
            if config == "config.toml":
                try:
                    endpoints = config_endpoints(root / CONFIG_MEMBER, settings.home)
                except ConfigError:
                    config = RESTORED_CONFIG
                else:
                    if not ask_config(endpoints):
                        config = RESTORED_CONFIG
        store.audit.record(
            "owner",
            "restored",
            backup.name,
            {
                "archive": str(backup.absolute()),
                "backup_made_at": unpacked.created_at,
                "shelldon": unpacked.shelldon_version,
                "schema_from": unpacked.schema_version,
                "tools": {r.name: r.outcome.value for r in results},
                "distrusted": dataclasses.asdict(distrusted),
                "config": config,
                "set_aside": list(set_aside),
            },
            now,
        )
    return RestoreReport(
        unpacked, schema, results, tuple(requarantined), distrusted, config, None, set_aside, None
    )


def _move_into_place(
    settings: Settings, root: Path, config: str, keep_toolbox: bool, had_pet: bool
) -> tuple[Path | None, Path | None]:
    """Put the old pet aside and the restored one in its place; returns where the old one
    went (None when there was nothing worth keeping) and the kept toolbox archive."""
    home = settings.home
    parts = (*_PET_PARTS, f"{DATABASE_MEMBER}-wal", f"{DATABASE_MEMBER}-shm")
    present = [p for p in parts if os.path.lexists(home / p)]
    done: list[tuple[Path, Path]] = []  # the renames so far, undone if a later one fails
    aside: Path | None = None
    kept: Path | None = None

    def move(source: Path, target: Path) -> None:
        os.replace(source, target)
        done.append((source, target))

    try:
        if present:
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            aside = Path(tempfile.mkdtemp(prefix=f"replaced-{stamp}-", dir=home))
            _give_to_home_owner([aside], home)
            for part in present:
                move(home / part, aside / part)
        for part in _PET_PARTS:
            move(root / part, home / part)
        if config:
            move(root / CONFIG_MEMBER, home / config)
        if keep_toolbox:
            kept = home / NOT_RESTORED_TOOLS
            move(root / TOOLBOX_MEMBER, kept)
        fsync_dir(home)
    except BaseException:
        for source, target in reversed(done):
            with contextlib.suppress(OSError):
                os.replace(target, source)
        raise
    if aside is not None and not had_pet:
        shutil.rmtree(aside, ignore_errors=True)  # empty directories and an empty database
        aside = None
    return aside, kept


@contextlib.contextmanager
def _only_restore(home: Path) -> Iterator[Path]:
    """Hold the home for one restore and give it a new directory inside, removed whatever
    happens: a second restore at the same time is refused, and what a killed one left behind
    (``.restore-*``) is removed first."""
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BackupError(f"another restore into {home} is running; wait for it") from None
        for leftover in home.glob(".restore-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        root = Path(tempfile.mkdtemp(prefix=".restore-", dir=home))
        try:
            yield root
        finally:
            shutil.rmtree(root, ignore_errors=True)
    finally:
        os.close(fd)


def restore_backup(
    settings: Settings,
    backup: Path,
    ask_tool: Ask,
    ask_config: AskConfig,
    *,
    force: bool,
    on_checked: Callable[[Unpacked], None],
    on_result: Callable[[ImportResult], None],
) -> RestoreReport:
    """Restore the backup at ``backup`` into ``settings``' home (see the module docstring);
    ``BackupError`` says why it was refused, with the home left as it was."""
    home = settings.home
    if not backup.is_file():
        raise BackupError(f"{backup} is not a file (a backup made by 'shelldon backup')")
    if database_in_use(settings.database):
        users = database_users(settings.database)
        who = (
            f"process {', '.join(str(p) for p in users[:5])}"
            if users
            else "a process this user cannot see into"
        )
        raise BackupError(
            f"the pet's database {settings.database} is in use ({who}: the service, a chat or "
            "a tools command); stop it first (sudo systemctl stop shelldon), then restore"
        )
    had_pet = pet_in_home(settings)
    if had_pet and not force:
        raise BackupError(
            f"{home} already holds a pet ({', '.join(had_pet)}); restore into an empty home "
            "(SHELLDON_HOME), or pass --force to move this one aside to "
            f"{home}/replaced-<time>/ first"
        )
    created_home = not home.exists()
    make_private_dir(home)
    try:
        with _only_restore(home) as root:
            unpacked = unpack_backup(backup, root)
            on_checked(unpacked)
            report = _prepare(settings, backup, unpacked, ask_tool, ask_config, on_result)
            keep_toolbox = any(
                r.outcome not in (Outcome.PROMOTED, Outcome.UNCHANGED) for r in report.results
            )
            _give_to_home_owner([root / p for p in os.listdir(root)], home)
            replaced, kept = _move_into_place(
                settings, root, report.config, keep_toolbox, bool(had_pet)
            )
            os.chmod(home, PRIVATE_DIR)
    except BaseException:
        if created_home:
            with contextlib.suppress(OSError):
                home.rmdir()
        raise
    return dataclasses.replace(report, replaced=replaced, kept_toolbox=kept)
