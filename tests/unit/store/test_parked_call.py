"""Taking the parked call a tap decided: consumed once, the owner's decision audited, and a
blob that is no call reported (and audited) as corrupt, never run."""

from __future__ import annotations

from pathlib import Path

from shelldon.contracts import Message, RequestToolApproval, Result, Role, ToolCall, encode
from shelldon.store import Store

CALL = ToolCall("c1", "write_file", {"path": "x"})
PARKED = RequestToolApproval(CALL, "write_file(path='x')", (Message(Role.USER, "save it"),))


def test_an_approved_call_is_taken_once_and_the_decision_audited(tmp_path: Path) -> None:
    with Store(tmp_path / "shelldon.db") as store:
        store.parked.park_approval("t1", 5, encode(PARKED), "s", now=0, ttl_s=10)
        assert store.parked.take_call("t1", True, now=1) == (PARKED, "ok")
        assert store.parked.take_call("t1", True, now=2) == (None, "unknown")
        (entry,) = store.audit.log()
    assert (entry.actor, entry.action, entry.subject) == ("owner", "approved", "write_file")


def test_a_queued_tap_is_judged_when_it_was_accepted(tmp_path: Path) -> None:
    with Store(tmp_path / "shelldon.db") as store:
        store.parked.park_approval("t1", 5, encode(PARKED), "s", now=0, ttl_s=10)
        assert store.parked.take_call("t1", False, now=60, tapped_at=5) == (PARKED, "ok")
        assert store.audit.log()[0].action == "denied"


def test_a_parked_blob_that_is_no_call_is_corrupt_and_audited(tmp_path: Path) -> None:
    with Store(tmp_path / "shelldon.db") as store:
        store.parked.park_approval("t1", 5, encode(Result("t1", "hi")), "s", now=0, ttl_s=10)
        assert store.parked.take_call("t1", True, now=1) == (None, "corrupt")
        (entry,) = store.audit.log()
    assert (entry.actor, entry.action, entry.subject) == ("approvals", "corrupt", "t1")
