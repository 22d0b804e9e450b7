"""The sqlite store: durable, versioned, consumed exactly once."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shelldon.store import SCHEMA_VERSION, Store, StoreError
from shelldon.store.schema import _MIGRATIONS


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "shelldon.db")
    yield s
    s.close()


def test_new_database_is_wal_full_sync_and_versioned(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as s:
        assert s.schema_version == SCHEMA_VERSION
    db = sqlite3.connect(tmp_path / "db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {
        "messages",
        "facts",
        "pending_approvals",
        "pending_promotions",
        "tool_health",
        "schedule",
        "budget",
        "processed_updates",
        "inbox",
        "audit",
    } <= tables


def test_reopening_does_not_migrate_twice(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as s:
        s.conversation.remember("likes tea", now=1)
    with Store(tmp_path / "db") as s:
        assert s.conversation.facts() == ["likes tea"]


def test_database_from_a_newer_shelldon_is_refused_clearly(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "db")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    db.close()
    with pytest.raises(StoreError, match="newer than this shelldon"):
        Store(tmp_path / "db")


def test_garbage_file_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError):
        Store(tmp_path / "db")


def test_approval_is_consumed_exactly_once(store: Store) -> None:
    store.parked.park_approval("t1", 5, b"blob", "run_shell: ls", now=100, ttl_s=60)
    assert store.parked.parked_approval("t1")
    first = store.parked.take_approval("t1", now=120)
    assert (first.status, first.blob, first.chat_id) == ("ok", b"blob", 5)
    assert store.parked.take_approval("t1", now=121).status == "unknown"
    assert not store.parked.parked_approval("t1")


def test_expired_approval_is_reported_expired_and_consumed(store: Store) -> None:
    store.parked.park_approval("t1", 5, b"blob", "s", now=100, ttl_s=60)
    assert store.parked.take_approval("t1", now=160).status == "expired"
    assert store.parked.take_approval("t1", now=161).status == "unknown"


def test_expire_pending_sweeps_both_kinds(store: Store) -> None:
    store.parked.park_approval("a", 1, b"x", "s", now=0, ttl_s=10)
    store.parked.park_promotion("p", 1, "tool", "hash", "s", now=0, ttl_s=10)
    store.parked.park_approval("b", 1, b"x", "s", now=0, ttl_s=100)
    gone = store.parked.expire_pending(now=50)
    assert sorted((g.kind, g.turn_id) for g in gone) == [("approval", "a"), ("promotion", "p")]
    assert [p.turn_id for p in store.parked.pending()] == ["b"]


def test_an_approval_whose_tap_is_queued_does_not_expire(store: Store) -> None:
    store.parked.park_approval("a", 1, b"x", "s", now=0, ttl_s=10)
    store.parked.park_approval("b", 1, b"x", "s", now=0, ttl_s=10)
    gone = store.parked.expire_pending(now=50, keep={"a"})
    assert [g.turn_id for g in gone] == ["b"]
    assert store.parked.parked_approval("a") == b"x"  # read without consuming it
    assert store.parked.take_approval("a", now=51).status == "expired"  # the taker still judges


def test_parked_rows_can_be_read_without_being_consumed(store: Store) -> None:
    store.parked.park_promotion("p", 1, "shout", "h", "tool shout", now=0, ttl_s=10, code=b"c")
    assert store.parked.parked_promotion("p") == ("shout", b"c")
    assert (
        store.parked.parked_promotion("nope") is None
        and store.parked.parked_approval("nope") == b""
    )
    assert store.parked.take_promotion("p", now=1).status == "ok"


def test_a_card_keeps_its_first_final_outcome(store: Store) -> None:
    store.cards.record("t1", 7, 42, "<b>Approve?</b>", now=100)
    card = store.cards.get("t1")
    assert card is not None and (card.chat_id, card.message_id, card.outcome) == (7, 42, "")
    assert store.cards.close("t1", "✅ Approved")
    assert not store.cards.close("t1", "⌛ Expired")  # a late outcome does not rewrite it
    card = store.cards.get("t1")
    assert card is not None and card.outcome == "✅ Approved"
    # Asked again under the same turn: the newest card is the turn's card, open again.
    store.cards.record("t1", 7, 50, "<b>Approve this too?</b>", now=200)
    card = store.cards.get("t1")
    assert card is not None and (card.message_id, card.outcome) == (50, "")


def test_old_cards_are_forgotten(store: Store) -> None:
    from shelldon.store import CARD_KEEP_S

    store.cards.record("old", 7, 1, "x", now=0)
    store.cards.record("new", 7, 2, "y", now=CARD_KEEP_S + 1)
    assert store.cards.get("old") is None and store.cards.get("new") is not None


def test_promotion_take_returns_name_and_hash(store: Store) -> None:
    store.parked.park_promotion("t9", 1, "weather", "abc123", "gate passed", now=0, ttl_s=10)
    taken = store.parked.take_promotion("t9", now=1)
    assert taken.status == "ok"
    assert (taken.name, taken.code_hash) == ("weather", "abc123")
    assert store.parked.take_promotion("t9", now=1).status == "unknown"


def test_a_promotion_keeps_the_gated_bytes_it_was_parked_with(store: Store) -> None:
    store.parked.park_promotion(
        "t9", 1, "adder", "abc", "s", now=0, ttl_s=10, code=b"x=1", test=b"t"
    )
    assert store.parked.parked_code("adder") == b"x=1"
    taken = store.parked.take_promotion("t9", now=1)
    assert (taken.code, taken.test) == (b"x=1", b"t")
    assert store.parked.parked_code("adder") == b""


def test_approvals_record_the_hash_and_move_between_live_and_quarantine(store: Store) -> None:
    store.tools.approve("adder", "h1", now=5, turn_id="t1")
    assert store.tools.set_state("adder", "quarantined")
    (tool,) = store.tools.approved()
    assert (tool.name, tool.code_hash, tool.state, tool.approved_at) == (
        "adder",
        "h1",
        "quarantined",
        5,
    )
    store.tools.approve("adder", "h2", now=6)  # a replacement
    assert store.tools.approval("adder") == type(tool)("adder", "h2", "live", 6)
    assert not store.tools.set_state("ghost", "live")
    with pytest.raises(ValueError, match="tool state"):
        store.tools.set_state("adder", "blessed")


def test_a_home_from_before_the_toolbox_left_the_workspace_is_migrated(tmp_path: Path) -> None:
    # A v2 database (the schema before approvals were recorded) with a parked promotion.
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    for script in _MIGRATIONS[:2]:
        db.executescript(script)
    db.execute("PRAGMA user_version = 2")
    db.execute(
        "INSERT INTO pending_promotions VALUES ('t1', 1, 'adder', 'abc', 'tool adder', 0, 99)"
    )
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.tools.approved() == []
        assert store.parked.promotions_without_code() == [("t1", "adder", "abc")]
        assert store.parked.keep_promotion_code("t1", b"x=1", b"")
        assert store.parked.promotions_without_code() == []
        assert store.parked.take_promotion("t1", now=1).code == b"x=1"


def _racer(
    path: str,
    turn_id: str,
    barrier: multiprocessing.synchronize.Barrier,
    results: multiprocessing.queues.Queue,
) -> None:  # type: ignore[name-defined]
    s = Store(path)
    barrier.wait()
    results.put(s.parked.take_approval(turn_id, now=1).status)
    s.close()


def test_two_racing_readers_consume_an_approval_once(tmp_path: Path) -> None:
    path = str(tmp_path / "db")
    with Store(path) as s:
        for i in range(20):
            s.parked.park_approval(f"t{i}", 1, b"x", "s", now=0, ttl_s=100)
    ctx = multiprocessing.get_context("fork")
    for i in range(20):
        barrier = ctx.Barrier(2)
        results = ctx.Queue()
        procs = [
            ctx.Process(target=_racer, args=(path, f"t{i}", barrier, results)) for _ in range(2)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(10)
        got = sorted(results.get(timeout=5) for _ in range(2))
        assert got == ["ok", "unknown"]


def test_row_survives_sigkill_right_after_commit(tmp_path: Path) -> None:
    path = tmp_path / "db"
    code = textwrap.dedent(f"""
        import os, signal, sys
        from shelldon.store import Store
        s = Store({str(path)!r})
        s.parked.park_approval("t-kill", 3, b"parked-state", "run_shell: ls", now=1, ttl_s=3600)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code], timeout=30)
    assert proc.returncode == -signal.SIGKILL
    with Store(path) as s:
        taken = s.parked.take_approval("t-kill", now=2)
    assert (taken.status, taken.blob) == ("ok", b"parked-state")


def test_strikes_accumulate_atomically_and_reset(store: Store) -> None:
    assert [store.tools.strike("weather", f"boom {i}", now=i) for i in range(3)] == [1, 2, 3]
    health = store.tools.health()
    assert (health[0].name, health[0].strikes, health[0].last_error) == ("weather", 3, "boom 2")
    store.tools.reset_strikes("weather")
    assert store.tools.health() == []


def test_scheduled_turn_is_started_once_when_due(store: Store) -> None:
    store.schedule.add(1, due_at=100, prompt="water the plants", now=0)
    store.schedule.add(1, due_at=50, prompt="earlier", now=0)
    assert store.schedule.next_due() == 50
    assert store.schedule.due(now=10) == []
    due = store.schedule.due(now=200)
    assert [d.prompt for d in due] == ["earlier", "water the plants"]
    assert store.schedule.due(now=200) == due  # looking starts nothing
    assert store.schedule.start(due[0].id, now=200)
    assert not store.schedule.start(due[0].id, now=201)
    assert [d.prompt for d in store.schedule.due(now=300)] == ["water the plants"]
    assert store.schedule.start(due[1].id, now=300)
    assert store.schedule.due(now=300) == []
    assert store.schedule.next_due() is None


def test_budget_refuses_past_the_limit(store: Store) -> None:
    assert store.schedule.spend_budget("2026-11-29", 2, limit=3)
    assert not store.schedule.spend_budget("2026-11-29", 2, limit=3)
    assert store.schedule.spend_budget("2026-11-29", 1, limit=3)
    assert store.schedule.budget_spent("2026-11-29") == 3
    assert store.schedule.spend_budget("2026-11-30", 3, limit=3)


def test_inbox_handoff_is_idempotent_per_update(store: Store) -> None:
    assert store.inbox.put(b"m1", now=1, update_id=10)
    assert not store.inbox.put(b"m1-again", now=2, update_id=10)
    assert store.inbox.is_processed(10)
    assert store.inbox.put(b"scheduled", now=3)
    items = store.inbox.waiting()
    assert [i.blob for i in items] == [b"m1", b"scheduled"]
    assert store.inbox.take(items[0].id, now=4)
    assert not store.inbox.take(items[0].id, now=5)
    assert [i.blob for i in store.inbox.waiting()] == [b"scheduled"]


def test_conversation_window_is_oldest_first(store: Store) -> None:
    for i in range(5):
        store.conversation.append(7, "user", f"m{i}", now=i)
    store.conversation.append(8, "user", "other chat", now=9)
    assert [m.content for m in store.conversation.recent(7, limit=3)] == ["m2", "m3", "m4"]


def test_audit_log_is_append_only(store: Store, tmp_path: Path) -> None:
    store.audit.record(
        "approval", "approved", "run_shell", {"command": "ls -la"}, now=1, turn_id="t1"
    )
    store.audit.record("selfcode", "promoted", "weather", {}, now=2, code_hash="ab12")
    entries = store.audit.log()
    assert [(e.action, e.subject) for e in entries] == [
        ("approved", "run_shell"),
        ("promoted", "weather"),
    ]
    assert entries[0].detail == {"command": "ls -la"}
    assert entries[1].code_hash == "ab12"
    db = sqlite3.connect(tmp_path / "shelldon.db")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("DELETE FROM audit")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("UPDATE audit SET action = 'nothing'")


def test_concurrent_writers_from_processes_all_land(tmp_path: Path) -> None:
    path = str(tmp_path / "db")
    Store(path).close()
    pids = []
    for w in range(4):
        pid = os.fork()
        if pid == 0:
            try:
                s = Store(path)
                for i in range(25):
                    s.conversation.append(1, "user", f"{w}-{i}", now=i)
                s.close()
            finally:
                os._exit(0)
        pids.append(pid)
    for pid in pids:
        assert os.waitpid(pid, 0)[1] == 0
    with Store(path) as s:
        assert len(s.conversation.recent(1, limit=1000)) == 100


def test_a_home_from_before_usage_was_counted_keeps_its_memory_and_counts_from_now(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v3.db"
    db = sqlite3.connect(path)
    for script in _MIGRATIONS[:3]:
        db.executescript(script)
    db.execute("PRAGMA user_version = 3")
    db.execute("INSERT INTO facts (fact, created_at) VALUES ('the cat is Miso', 1)")
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.conversation.numbered_facts()[0].fact == "the cat is Miso"
        assert store.usage.between(0, 10) == []
        store.usage.record("openai", "m", 10, -5, now=5, turn_id="t1")
        (row,) = store.usage.between(0, 10)
        assert (row.calls, row.input_tokens, row.output_tokens) == (1, 10, 0)
        assert store.usage.between(5.5, 10) == []
