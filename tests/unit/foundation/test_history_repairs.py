"""The store's records of the toolbox lifecycle: a repair offer is taken exactly once and
remembers the turn it started (the round cap is counted from these rows), an expired offer
starts nothing, a replacement's promotion keeps the hash it was diffed against, and a v3
database gains all of it in one forward step."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from shelldon.store import SCHEMA_VERSION, RepairOffer, Store
from shelldon.store.schema import _MIGRATIONS

OFFER = RepairOffer("p1", 7, "echo_len", 0, b"code", b"test", "", "1 failed")


def test_a_repair_offer_is_taken_once_and_names_its_turn(store: Store) -> None:
    store.parked.park_repair(OFFER, "fix tool echo_len", now=100, ttl_s=60)
    assert [(p.kind, p.turn_id, p.summary) for p in store.parked.pending()] == [
        ("repair", "p1", "fix tool echo_len")
    ]
    assert store.parked.repair_round_of("r1") == 0
    taken = store.parked.take_repair("p1", now=110, turn_id="r1")
    assert taken == OFFER
    assert store.parked.take_repair("p1", now=111, turn_id="r2") is None
    assert store.parked.pending() == []
    # Proposals of the turn the tap started belong to the next round.
    assert store.parked.repair_round_of("r1") == 1
    assert store.parked.repair_round_of("r2") == 0


def test_an_expired_offer_starts_nothing_and_a_taken_one_is_kept(store: Store) -> None:
    store.parked.park_repair(OFFER, "fix tool echo_len", now=100, ttl_s=60)
    later = RepairOffer("p2", 7, "echo_len", 1, b"", b"", "", "")
    store.parked.park_repair(later, "fix tool echo_len", now=100, ttl_s=600)
    assert store.parked.take_repair("p1", now=161) is None
    store.parked.take_repair("p2", now=120, turn_id="r2")
    gone = store.parked.expire_pending(now=10_000)
    assert [(p.kind, p.turn_id) for p in gone] == [("repair", "p1")]
    assert store.parked.repair_round_of("r2") == 2  # the record of the taken offer outlives its TTL


def test_a_drop_takes_the_offer_without_a_turn(store: Store) -> None:
    store.parked.park_repair(OFFER, "fix tool echo_len", now=100, ttl_s=60)
    assert store.parked.take_repair("p1", now=101) == OFFER
    assert store.parked.take_repair("p1", now=102, turn_id="r1") is None
    assert store.parked.repair_round_of("r1") == 0


def test_a_replacement_promotion_keeps_its_base_hash(store: Store) -> None:
    store.parked.park_promotion(
        "p1", 7, "adder", "new", "tool adder", 0, 99, code=b"x", replaces_hash="old"
    )
    store.parked.park_promotion("p2", 7, "other", "h", "tool other", 0, 99, code=b"y")
    assert store.parked.take_promotion("p1", now=1).replaces_hash == "old"
    assert store.parked.take_promotion("p2", now=1).replaces_hash == ""


def test_forget_tool_withdraws_an_approval_once(store: Store) -> None:
    store.tools.approve("adder", "abc", now=5)
    forgotten = store.tools.forget("adder")
    assert forgotten is not None and forgotten.code_hash == "abc"
    assert store.tools.approval("adder") is None and store.tools.forget("adder") is None


def test_a_v3_database_gains_the_lifecycle_tables(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    db = sqlite3.connect(path)
    for script in _MIGRATIONS[:3]:
        db.executescript(script)
    db.execute("PRAGMA user_version = 3")
    db.execute(
        "INSERT INTO pending_promotions (turn_id, chat_id, name, code_hash, summary, "
        "created_at, expires_at, code, test) "
        "VALUES ('t1', 1, 'adder', 'abc', 's', 0, 99, x'01', x'')"
    )
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.parked.take_promotion("t1", now=1).replaces_hash == ""
        store.parked.park_repair(OFFER, "fix", now=0, ttl_s=9)
        assert [p.kind for p in store.parked.pending()] == ["repair"]
