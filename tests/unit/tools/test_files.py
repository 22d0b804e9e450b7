"""read_file, list_dir and get_time as the model uses them."""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path

import pytest

from shelldon.worker.tools import ToolContext, ToolError, files
from shelldon.worker.tools.clock import get_time
from shelldon.worker.tools.files import READ_CAP_BYTES, list_dir, read_file


@pytest.fixture
def ws(home: Path) -> Path:
    return home / "workspace"


def test_read_file_returns_the_text(ws: Path, ctx: ToolContext) -> None:
    (ws / "notes").mkdir()
    (ws / "notes" / "todo.txt").write_text("buy milk\nfeed shelldon\n")
    assert read_file(ctx, "notes/todo.txt") == "buy milk\nfeed shelldon\n"


def test_read_file_reads_utf8_and_replaces_bad_bytes(ws: Path, ctx: ToolContext) -> None:
    (ws / "u.txt").write_bytes("héllo ✓ ".encode() + b"\xff")
    assert read_file(ctx, "u.txt") == "héllo ✓ \ufffd"


def test_read_file_stops_at_64_kib_and_says_so(ws: Path, ctx: ToolContext) -> None:
    (ws / "big.txt").write_text("a" * (READ_CAP_BYTES + 5000))
    text = read_file(ctx, "big.txt")
    assert text.startswith("a" * READ_CAP_BYTES)
    assert "first 65536 bytes of 70536" in text
    assert text.count("a") == READ_CAP_BYTES + text.split("…")[1].count("a")


def test_read_file_of_exactly_the_cap_is_whole(ws: Path, ctx: ToolContext) -> None:
    (ws / "edge.txt").write_text("b" * READ_CAP_BYTES)
    assert read_file(ctx, "edge.txt") == "b" * READ_CAP_BYTES


def test_read_file_of_a_missing_file_points_to_list_dir(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=r"no file 'nope.txt'.*list_dir"):
        read_file(ctx, "nope.txt")


def test_read_file_of_a_directory_points_to_list_dir(ws: Path, ctx: ToolContext) -> None:
    (ws / "d").mkdir()
    with pytest.raises(ToolError, match="is a directory; use list_dir"):
        read_file(ctx, "d")


def test_read_file_of_a_fifo_is_refused_without_blocking(ws: Path, ctx: ToolContext) -> None:
    os.mkfifo(ws / "pipe")
    started = time.monotonic()
    with pytest.raises(ToolError, match="not a regular file"):
        read_file(ctx, "pipe")
    assert time.monotonic() - started < 1.0


def test_read_file_refuses_binary_files(ws: Path, ctx: ToolContext) -> None:
    (ws / "blob.bin").write_bytes(b"\x7fELF\x00\x00\x01")
    with pytest.raises(ToolError, match="binary"):
        read_file(ctx, "blob.bin")


def test_read_file_refuses_a_secret_inside_the_workspace(ws: Path, ctx: ToolContext) -> None:
    (ws / ".env").write_text("API_KEY=sk-live")
    with pytest.raises(ToolError) as info:
        read_file(ctx, ".env")
    assert "sk-live" not in str(info.value)


def test_list_dir_dot_lists_the_workspace_root(ws: Path, ctx: ToolContext) -> None:
    (ws / "b.txt").write_text("12345")
    (ws / "a_dir").mkdir()
    (ws / "link").symlink_to("b.txt")
    assert list_dir(ctx, ".") == "a_dir/\nb.txt (5 bytes)\nlink@"


def test_list_dir_of_a_subdirectory(ws: Path, ctx: ToolContext) -> None:
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "main.py").write_text("print()")
    assert list_dir(ctx, "src") == "main.py (7 bytes)\npkg/"


def test_list_dir_hides_deny_listed_names_and_counts_them(ws: Path, ctx: ToolContext) -> None:
    (ws / ".env").write_text("x")
    (ws / "id_rsa").write_text("x")
    (ws / "readme.md").write_text("hi")
    listing = list_dir(ctx, ".")
    assert ".env" not in listing
    assert "id_rsa" not in listing
    assert listing == "readme.md (2 bytes)\n(2 deny-listed entries not shown)"


def test_list_dir_of_an_empty_directory_says_so(ctx: ToolContext) -> None:
    assert list_dir(ctx, ".") == "'.' is empty"


def test_list_dir_of_a_file_points_to_read_file(ws: Path, ctx: ToolContext) -> None:
    (ws / "f.txt").write_text("x")
    with pytest.raises(ToolError, match="use read_file"):
        list_dir(ctx, "f.txt")


def test_list_dir_of_a_missing_directory_is_a_clear_error(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="no directory 'ghost'"):
        list_dir(ctx, "ghost")


def test_list_dir_cuts_a_huge_directory(
    ws: Path, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "LIST_CAP_ENTRIES", 20)  # the same cut, with fewer files to make
    for i in range(23):
        (ws / f"f{i:04d}").touch()
    lines = list_dir(ctx, ".").splitlines()
    assert len(lines) == 21
    assert lines[-1] == "…[3 more entries; list a subdirectory]"


def test_get_time_is_iso_8601_local_time_with_offset(ctx: ToolContext) -> None:
    stamp = datetime.fromisoformat(get_time(ctx))
    assert stamp.tzinfo is not None
    assert abs((datetime.now().astimezone() - stamp).total_seconds()) < 2
