"""The store's rows and the taken promotion."""

from __future__ import annotations

import ast
from pathlib import Path

import shelldon.store.rows
from shelldon.store import ParkedPromotion, Store


def test_the_rows_module_imports_nothing_but_dataclasses_and_typing() -> None:
    # The rules import these rows and must not import sqlite3.
    tree = ast.parse(Path(shelldon.store.rows.__file__).read_text())
    imported = {
        alias.name if isinstance(node, ast.Import) else node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported <= {"__future__", "dataclasses", "typing"}


def test_a_taken_promotion_names_its_tool_and_hash(tmp_path: Path) -> None:
    with Store(tmp_path / "shelldon.db") as store:
        store.parked.park_promotion(
            "t1", 5, "adder", "ab" * 32, "s", now=0, ttl_s=10, code=b"c", test=b"t"
        )
        taken = store.parked.take_promotion("t1", now=1)
    assert taken == ParkedPromotion("ok", "t1", 5, "adder", "ab" * 32, "s", b"c", b"t", "")


def test_a_promotion_row_holding_blobs_is_taken_as_text(tmp_path: Path) -> None:
    # A row written by other hands (a hostile backup) may hold BLOBs for the name and hash.
    with Store(tmp_path / "shelldon.db") as store:
        store.parked.park_promotion("t2", 5, b"\xff\x00", b"\x01", "s", now=0, ttl_s=10)  # type: ignore[arg-type]
        taken = store.parked.take_promotion("t2", now=1)
    assert (taken.name, taken.code_hash) == (str(b"\xff\x00"), str(b"\x01"))
