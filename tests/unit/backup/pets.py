"""Pets to back up, and backups rewritten by hand (damaged, or hostile but self-consistent)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from pathlib import Path

from shelldon.config import Settings, load_settings
from shelldon.home import prepare_home
from shelldon.store import Store
from shelldon.toolbox.toolbox import Toolbox
from tests.unit.selfcode.samples import ADDER, ADDER_TEST, calling_test, promote, tool

SECRET = "123456:AAF-the-bot-token-never-leaves-the-vault"
FLAKY = tool("Fails a lot.", "raise RuntimeError('boom')")
FLAKY_TEST = calling_test(
    "flaky", "with pytest.raises(RuntimeError):\n        run()", head="import pytest"
)
NOW = 1_790_000_000.0


def home_settings(home: Path) -> Settings:
    """Default settings for ``home`` (which need not exist)."""
    return load_settings(environ={"SHELLDON_HOME": str(home)})


def make_pet(home: Path) -> Settings:
    """A pet with a life: conversation, facts, a scheduled turn, audit, strikes, a live and a
    quarantined tool, a parked approval, workspace files, a config and a secret in the vault."""
    settings = home_settings(home)
    prepare_home(settings)
    (settings.vault / "telegram_token").write_text(SECRET + "\n")
    (settings.home / "config.toml").write_text("[limits]\ndaily_turn_budget = 12\n")
    (settings.workspace / "notes.md").write_text("# the owner's notes\n")
    (settings.workspace / "bin").mkdir()
    script = settings.workspace / "bin" / "hello.sh"
    script.write_text("#!/bin/sh\necho hello\n")
    script.chmod(0o755)
    (settings.workspace / "empty").mkdir()
    with Store(settings.database) as store:
        sc = Toolbox.from_settings(settings, store)
        promote(sc, "adder", ADDER, ADDER_TEST)
        promote(sc, "flaky", FLAKY, FLAKY_TEST)
        for _ in range(3):
            store.tools.strike("flaky", "RuntimeError: boom", NOW)
        sc.quarantine("flaky", "failed 3 times: RuntimeError: boom")
        store.conversation.append(7, "user", "what is my cat called?", NOW)
        store.conversation.append(7, "assistant", "Miso.", NOW + 1)
        store.conversation.remember("the cat is called Miso", NOW)
        store.schedule.add(7, NOW + 86400, "remind me to feed Miso", NOW)
        store.audit.record("owner", "approved", "write_file", {"args": {"path": "notes.md"}}, NOW)
        store.parked.park_approval("turn-1", 7, b"parked", "write_file notes.md", time.time(), 3600)
    return settings


def members(path: Path) -> dict[str, tuple[tarfile.TarInfo, bytes]]:
    """Every member of the archive at ``path`` (header, data), in order."""
    found: dict[str, tuple[tarfile.TarInfo, bytes]] = {}
    with tarfile.open(path) as tar:
        for info in tar.getmembers():
            fh = tar.extractfile(info) if info.isreg() else None
            found[info.name] = (info, fh.read() if fh else b"")
    return found


def rewrite(
    source: Path,
    target: Path,
    changes: dict[str, bytes | None] | None = None,
    *,
    extra: list[tuple[tarfile.TarInfo, bytes]] = (),  # type: ignore[assignment]
    rehash: bool = True,
    index: dict[str, object] | None = None,
) -> Path:
    """Copy the backup ``source`` to ``target`` with members replaced (bytes) or dropped
    (None) and ``extra`` headers added before the index; ``rehash`` rewrites backup.json's
    sizes and hashes to match, as a forger would."""
    changes = changes or {}
    old = members(source)
    index = json.loads(old.pop("backup.json")[1]) | (index or {})
    with tarfile.open(target, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, (info, original) in old.items():
            data = original
            if name in changes:
                if changes[name] is None:
                    if rehash:
                        index["files"].pop(name, None)
                    continue
                data = changes[name] or b""
                info.size = len(data)
            if info.isreg() and rehash:
                index["files"][name] = {
                    "size": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
        for info, data in extra:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
            if info.isreg() and rehash:
                index["files"][info.name] = {
                    "size": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
        raw = json.dumps(index).encode()
        info = tarfile.TarInfo("backup.json")
        info.size = len(raw)
        tar.addfile(info, io.BytesIO(raw))
    return target


def regular(name: str, data: bytes, mode: int = 0o600) -> tuple[tarfile.TarInfo, bytes]:
    """A regular-file member."""
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info, data


def link(name: str, to: str, *, hard: bool = False) -> tuple[tarfile.TarInfo, bytes]:
    """A symbolic (or hard) link member."""
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    info.linkname = to
    return info, b""


def snapshot(home: Path) -> dict[str, bytes]:
    """Every regular file under ``home`` (logs aside: commands append to them) and its bytes."""
    return {
        str(p.relative_to(home)): p.read_bytes()
        for p in sorted(home.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.relative_to(home).parts[0] != "logs"
    }
