"""A toolbox archive is hostile until checked: each way of escaping the workspace, hiding a link
or exhausting memory refuses the whole archive, with a message naming the member, before
anything is written.

Inspired by: CVE-2007-4559 (tarfile path traversal), CVE-2001-1267 (GNU tar ``..``), the
zip-slip disclosures (Snyk, 2018), symlink/hardlink escapes fixed by PEP 706's extraction
filters, CVE-2022-48565-style pax header tricks, and decompression bombs (42.zip).
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from shelldon.cli.tools import ToolsRequest, run_tools
from shelldon.config import Settings
from shelldon.store import Store
from shelldon.toolbox.archive import ArchiveError, ArchiveLimits, read_archive
from shelldon.toolbox.manifest import code_hash
from tests.unit.selfcode.samples import ADDER
from tests.unit.toolbox.archives import (
    adder_members,
    manifest_entry,
    regular,
    toolbox_json,
    write_tar,
)

Members = list[tuple[tarfile.TarInfo, bytes]]


def special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, b""


def pax_renamed(shown: str, real: str) -> tuple[tarfile.TarInfo, bytes]:
    info, data = regular(shown, b"x = 1\n")
    info.pax_headers = {"path": real}
    return info, data


def non_utf8() -> Members:
    code = b"DESCRIPTION = '\xff'\n"
    entry = manifest_entry("adder", ADDER) | {"code_hash": code_hash(code)}
    return [regular("toolbox.json", toolbox_json(entry)), regular("tools/adder.py", code)]


HOSTILE: dict[str, tuple[Callable[[], Members], str]] = {
    "dotdot": (lambda: [*adder_members(), regular("../evil.py", b"x")], "path traversal"),
    "nested_dotdot": (
        lambda: [*adder_members(), regular("tools/../../evil.py", b"x")],
        "path traversal",
    ),
    "absolute": (lambda: [*adder_members(), regular("/tmp/evil.py", b"x")], "absolute path"),
    "pax_absolute": (
        lambda: [*adder_members(), pax_renamed("tools/x.py", "/tmp/evil.py")],
        "absolute path",
    ),
    "pax_dotdot": (
        lambda: [*adder_members(), pax_renamed("tools/x.py", "../../evil.py")],
        "path traversal",
    ),
    "backslash": (
        lambda: [*adder_members(), regular("tools\\..\\..\\evil.py", b"x")],
        "backslash",
    ),
    "symlink": (
        lambda: [special("tools/adder.py", tarfile.SYMTYPE, "/etc/passwd")],
        "is a link",
    ),
    "hardlink": (
        lambda: [special("tools/adder.py", tarfile.LNKTYPE, "/etc/passwd")],
        "is a link",
    ),
    "fifo": (lambda: [special("tools/adder.py", tarfile.FIFOTYPE)], "special file"),
    "char_device": (lambda: [special("tools/adder.py", tarfile.CHRTYPE)], "special file"),
    "unexpected_dir": (lambda: [special("etc", tarfile.DIRTYPE)], "unexpected directory"),
    "oversize_member": (
        lambda: [*adder_members(), regular("tools/big.py", b"#" * (64 * 1024 + 1))],
        "the limit is 65536",
    ),
    "too_many_members": (
        lambda: [regular(f"tools/t{i}.py", b"") for i in range(404)],
        "more than 403 members",
    ),
    "duplicate_member": (
        lambda: [*adder_members(), regular("tools/adder.py", b"evil = 1\n")],
        "appears twice",
    ),
    "unlisted_file": (
        lambda: [*adder_members(), regular("sitecustomize.py", b"x")],
        "does not list: sitecustomize.py",
    ),
    "edited_code": (
        lambda: [
            regular("toolbox.json", toolbox_json(manifest_entry("adder", ADDER))),
            regular("tools/adder.py", ADDER.replace("a + 1", "a + 2").encode()),
        ],
        "does not match its hash",
    ),
    "dunder_name": (
        lambda: [
            regular("toolbox.json", toolbox_json(manifest_entry("__init__", "x = 1\n"))),
            regular("tools/__init__.py", b"x = 1\n"),
        ],
        "bad tool name",
    ),
    "no_manifest": (lambda: [regular("tools/adder.py", ADDER.encode())], "has no toolbox.json"),
    "not_utf8": (non_utf8, "not UTF-8"),
}


def workspace_files(settings: Settings) -> list[str]:
    return sorted(
        str(p.relative_to(settings.workspace))
        for p in settings.workspace.rglob("*")
        if not p.is_dir()
    )


def import_archive(settings: Settings, path: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    request = ToolsRequest(action="import", file=str(path), yes=True)
    status = run_tools(settings, request, io.StringIO(), out, err)
    return status, out.getvalue(), err.getvalue()


def assert_nothing_written(settings: Settings, tmp_path: Path) -> None:
    assert workspace_files(settings) == []
    assert not (tmp_path / "evil.py").exists()
    with Store(settings.database) as store:
        assert store.audit.log() == []


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archive_is_refused_and_nothing_is_written(
    case: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    members, message = HOSTILE[case]
    monkeypatch.chdir(tmp_path)  # a relative escape would land here
    path = write_tar(tmp_path / f"{case}.tar.gz", members())
    status, out, err = import_archive(settings, path)
    assert status == 1
    assert message in err
    assert err.startswith("shelldon tools: ")
    assert "added" not in out
    assert_nothing_written(settings, tmp_path)


def test_decompression_bomb_stops_at_the_cap(settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "bomb.tar.gz"
    path.write_bytes(gzip.compress(b"\0" * (33 * 1024 * 1024), compresslevel=1))
    assert path.stat().st_size < 200_000
    status, _, err = import_archive(settings, path)
    assert status == 1
    assert "unpacks to more than 33554432 bytes" in err
    assert_nothing_written(settings, tmp_path)


def test_oversize_archive_file_is_refused_before_reading(
    settings: Settings, tmp_path: Path
) -> None:
    path = tmp_path / "huge.tar.gz"
    path.write_bytes(os.urandom(16 * 1024 * 1024 + 1))
    status, _, err = import_archive(settings, path)
    assert status == 1
    assert "a toolbox archive is at most 16777216" in err
    assert_nothing_written(settings, tmp_path)


def test_a_file_that_is_not_a_tar_gz_is_refused(settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("just some notes\n")
    status, _, err = import_archive(settings, path)
    assert status == 1
    assert "is not a shelldon toolbox" in err
    assert_nothing_written(settings, tmp_path)


def test_gzipped_garbage_is_refused_as_not_a_tar(settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "garbage.tar.gz"
    path.write_bytes(gzip.compress(os.urandom(4096)))
    status, _, err = import_archive(settings, path)
    assert status == 1
    assert "not a readable tar file" in err or "has no toolbox.json" in err
    assert_nothing_written(settings, tmp_path)


def test_a_missing_archive_is_a_clear_error(settings: Settings, tmp_path: Path) -> None:
    status, _, err = import_archive(settings, tmp_path / "nope.tar.gz")
    assert status == 1
    assert "cannot read" in err and "nope.tar.gz" in err


def test_limits_are_configurable_for_smaller_devices(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "two.tar.gz", adder_members())
    assert [t.name for t in read_archive(path)] == ["adder"]
    with pytest.raises(ArchiveError, match="lists 1 tools; at most 0"):
        read_archive(path, ArchiveLimits(max_tools=0))
    with pytest.raises(ArchiveError, match="limit is 100"):
        read_archive(path, ArchiveLimits(max_member_bytes=100))


def test_a_well_formed_archive_reads_back_its_tool(tmp_path: Path) -> None:
    # The control case: the same builder without a hostile member is accepted.
    path = write_tar(tmp_path / "ok.tar.gz", adder_members())
    (tool,) = read_archive(path)
    assert tool.code == ADDER
    assert tool.code_hash == code_hash(ADDER)
    assert "from adder import run" in tool.test
