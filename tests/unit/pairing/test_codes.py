"""Pairing codes: issued once per person per ten minutes, capped per hour, kept as a digest,
redeemed once and only while good. Attack cases (guessing, floods, reuse, a code from a
restored backup) are from the issue's threat list and OpenClaw's pairing write-ups."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from shelldon.rules import pairing as rules
from shelldon.store import PairingCode, Store

NOW = 1_800_000_000.0


def issued(user_id: int, code: str, at: float = NOW) -> PairingCode:
    return PairingCode(
        user_id=user_id,
        chat_id=user_id,
        name=f"user{user_id}",
        username="",
        digest=rules.digest(code),
        issued_at=at,
        expires_at=at + rules.CODE_TTL_S,
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "shelldon.db") as s:
        yield s


def test_codes_are_eight_unambiguous_characters_and_differ() -> None:
    codes = {rules.new_code() for _ in range(200)}
    assert len(codes) == 200
    for code in codes:
        assert len(code) == 8 and set(code) <= set(rules.CODE_ALPHABET)
        assert not set(code) & set("01OI")


def test_a_code_is_typed_in_any_case_with_or_without_its_dash() -> None:
    code = "ABCDEFGH"
    assert rules.shown(code) == "ABCD-EFGH"
    for typed in ("ABCD-EFGH", "abcd-efgh", " abcdefgh ", "ABCD EFGH"):
        assert rules.normalized(typed) == code
    for bad in ("", "ABCD-EFG", "ABCD-EFGHJ", "ABCD-EFG0", "ABCD-EFG!", "ÄBCD-EFGH"):
        assert rules.normalized(bad) == ""


def test_the_first_message_issues_a_repeat_is_quiet_then_reminded() -> None:
    assert rules.offer(None, 0, NOW).kind == "issue"
    row = issued(7, "ABCDEFGH")
    assert rules.offer(row, 1, NOW + 5).kind == "quiet"
    assert rules.offer(row, 1, NOW + rules.REMIND_EVERY_S).kind == "remind"
    reminded = dataclasses.replace(row, reminded_at=NOW + 70)
    assert rules.offer(reminded, 1, NOW + 100).kind == "quiet"


def test_a_flood_of_strangers_gets_at_most_the_hourly_cap_of_codes() -> None:
    assert rules.offer(None, rules.MAX_CODES_PER_HOUR - 1, NOW).kind == "issue"
    verdict = rules.offer(None, rules.MAX_CODES_PER_HOUR, NOW)
    assert verdict.kind == "quiet" and "last hour" in verdict.reason


def test_only_a_good_code_matches_and_never_an_expired_or_used_one() -> None:
    good, other = issued(7, "ABCDEFGH"), issued(8, "HGFEDCBA")
    assert rules.matching("ABCDEFGH", [other, good], NOW + 1) == good
    assert rules.matching("ABCDEFGJ", [other, good], NOW + 1) is None
    assert rules.matching("ABCDEFGH", [good], NOW + rules.CODE_TTL_S) is None
    used = dataclasses.replace(good, redeemed_at=NOW + 2)
    assert rules.matching("ABCDEFGH", [used], NOW + 3) is None


def test_names_from_telegram_lose_escapes_and_overrides_and_are_capped() -> None:
    assert rules.clean_name("Ada\x1b]0;pwned\x07 \u202eevil") == "Ada]0;pwned evil"
    assert rules.clean_name("x" * 500) == "x" * rules.NAME_CHARS
    assert rules.clean_name(42) == ""
    assert rules.who("Ada", "ada", 123456) == "Ada (@ada, id 123456)"
    assert rules.who("", "", 5) == "someone (id 5)"


def test_the_store_keeps_the_digest_only_and_one_row_per_person(store: Store) -> None:
    store.pairing.issue(issued(7, "ABCDEFGH"))
    store.pairing.issue(issued(7, "JKLMNPQR", at=NOW + 700))
    db = sqlite3.connect(store.path)
    rows = db.execute("SELECT * FROM pairing_codes").fetchall()
    db.close()
    assert len(rows) == 1 and "JKLMNPQR" not in repr(rows) and "ABCDEFGH" not in repr(rows)
    assert store.pairing.outstanding(7, NOW + 701) == issued(7, "JKLMNPQR", at=NOW + 700)
    assert store.pairing.outstanding(7, NOW + 700 + rules.CODE_TTL_S) is None


def test_rows_older_than_an_hour_go_so_a_flood_cannot_fill_the_table(store: Store) -> None:
    for n in range(50):
        store.pairing.issue(issued(1000 + n, rules.new_code(), at=NOW + n * 600))
    assert store.pairing.issued_since(0) <= 7
    assert store.pairing.issued_since(NOW + 49 * 600 - 3600) == 7


def test_a_code_is_redeemed_once_and_the_others_are_withdrawn(store: Store) -> None:
    store.pairing.issue(issued(7, "ABCDEFGH"))
    store.pairing.issue(issued(8, "HGFEDCBA"))
    with store.pairing.redeeming(NOW + 1) as live:
        row = rules.matching("ABCDEFGH", live, NOW + 1)
        assert row is not None
        store.pairing.redeem(row, NOW + 1)
    with store.pairing.redeeming(NOW + 2) as live:
        assert live == []
    assert store.pairing.outstanding(8, NOW + 2) is None


def test_a_redemption_that_fails_half_way_leaves_the_code_good(store: Store) -> None:
    store.pairing.issue(issued(7, "ABCDEFGH"))
    with pytest.raises(OSError), store.pairing.redeeming(NOW + 1) as live:
        row = rules.matching("ABCDEFGH", live, NOW + 1)
        assert row is not None
        store.pairing.redeem(row, NOW + 1)
        raise OSError("the config could not be written")
    assert store.pairing.outstanding(7, NOW + 2) is not None


def test_a_restored_database_brings_no_pairing_code(store: Store) -> None:
    store.pairing.issue(issued(7, "ABCDEFGH"))
    store.audit.distrust_for_restore(NOW)
    assert store.pairing.outstanding(7, NOW + 1) is None
