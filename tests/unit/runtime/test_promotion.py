"""The promotion rules without an actor, a database or a gate run: a passing tool is parked with
exactly the bytes the gate judged and the owner is asked; a failing one is told and, while its
repair rounds last, offered a fix; a tap promotes exactly the parked bytes, or discards them."""

from __future__ import annotations

from dataclasses import dataclass

from shelldon.config import LimitsSettings
from shelldon.contracts import Decision, ProposeTool
from shelldon.rules.effects import AskOwner, RecordReply, SettleTap
from shelldon.rules.promotion import (
    PROMOTION_EXPIRED,
    Audit,
    ParkPromotion,
    ParkRepair,
    Promote,
    Proposal,
    Refuse,
    ResetStrikes,
    gated,
    promoted,
    promotion_taken,
)
from shelldon.store import ParkedPromotion

CODE = (
    'DESCRIPTION = "Adds two numbers."\n'
    'PARAMS_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}\n\n'
    "def run(a: int = 0, b: int = 0) -> str:\n    return str(a + b)\n"
)
TEST = "from adder import run\n\ndef test_adds():\n    assert run(a=1, b=2) == '3'\n"
LIMITS = LimitsSettings()


@dataclass(frozen=True)
class Report:
    passed: bool = True
    unavailable: bool = False
    findings: tuple[str, ...] = ()
    dynamic_imports: tuple[str, ...] = ()
    tests_passed: int = 1
    duration_s: float = 0.4
    output: str = "1 passed"


@dataclass(frozen=True)
class Judged:
    name: str = "adder"
    code_hash: str = "h-new"
    code: bytes = CODE.encode()
    test: bytes = TEST.encode()


@dataclass(frozen=True)
class Live:
    name: str = "adder"
    code_hash: str = "h-old"
    approved_at: float = 0.0
    state: str = "live"
    code: bytes = b"def adder(a, b):\n    return a - b\n"
    test: bytes = TEST.encode()


def job(round: int = 0) -> Proposal:
    return Proposal("p1", 7, ProposeTool("adder", CODE, TEST), round)


def tap(approved: bool) -> Decision:
    return Decision(7, 42, "p1", approved)


def test_a_passing_tool_is_parked_with_the_judged_bytes_and_the_owner_asked() -> None:
    audit, park = gated(job(), Judged(), None, Report(), LIMITS)
    assert isinstance(audit, Audit) and (audit.action, audit.code_hash) == ("passed", "h-new")
    assert isinstance(park, ParkPromotion)
    ask = park.ask
    assert (park.code, park.test, park.replaces_hash) == (CODE.encode(), TEST.encode(), "")
    assert park.ttl_s == LIMITS.approval_ttl_s
    assert isinstance(ask, AskOwner) and "add it to my toolbox?" in ask.text
    assert ask.description == "Adds two numbers."
    assert ask.gate_summary.startswith("passed: 1 test(s)")


def test_a_replacement_shows_what_it_changes_against_the_live_version() -> None:
    _, park = gated(job(), Judged(), Live(), Report(), LIMITS)
    assert isinstance(park, ParkPromotion) and park.replaces_hash == "h-old"
    ask = park.ask
    assert isinstance(ask, AskOwner) and "replace the live one?" in ask.text
    assert "return a - b" in ask.diff and ask.replaces


def test_a_failed_gate_is_recorded_and_offered_a_fix_while_rounds_last() -> None:
    failed = Report(passed=False, findings=("test_adds failed",), output="E assert 0 == 3")
    _, record, park = gated(job(), Judged(), None, failed, LIMITS)
    assert isinstance(record, RecordReply) and "failed its gate" in record.text
    assert isinstance(park, ParkRepair) and park.offer.round == 0
    ask = park.ask
    assert isinstance(ask, AskOwner) and ask.failed and ask.output == "E assert 0 == 3"


def test_a_failed_gate_past_its_rounds_is_thrown_away_without_an_offer() -> None:
    failed = Report(passed=False)
    effects = gated(job(LIMITS.max_repair_rounds), Judged(), None, failed, LIMITS)
    assert not any(isinstance(e, ParkRepair) for e in effects)
    (refuse,) = [e for e in effects if isinstance(e, Refuse)]
    assert "so I threw it away" in refuse.text


def test_a_gate_that_could_not_run_blames_the_install_not_the_tool() -> None:
    effects = gated(job(), Judged(), None, Report(passed=False, unavailable=True), LIMITS)
    (refuse,) = [e for e in effects if isinstance(e, Refuse)]
    assert "my install needs fixing" in refuse.text
    assert not any(isinstance(e, ParkRepair) for e in effects)


def test_an_approved_tap_promotes_exactly_the_parked_bytes() -> None:
    taken = ParkedPromotion(
        "ok", "p1", 7, "adder", "h-new", "tool adder", b"parked code", b"parked test"
    )
    (promote,) = promotion_taken(tap(True), taken)
    assert promote == Promote("adder", b"parked code", b"parked test", "h-new", "", "p1")
    *_, record, settle = promoted(tap(True), promote)
    assert isinstance(record, RecordReply) and "it is live" in record.text
    assert settle == SettleTap(tap(True), "✅ Added adder — it's live from your next message.")


def test_a_promoted_replacement_clears_the_old_versions_strikes() -> None:
    promote = Promote("adder", b"c", b"t", "h-new", "h-old", "p1")
    assert ResetStrikes("adder") in promoted(tap(True), promote)


def test_a_promotion_the_toolbox_refuses_tells_why_and_goes_not_live() -> None:
    promote = Promote("adder", b"c", b"t", "h-new", "", "p1")
    audit, settle = promoted(tap(True), promote, "hash mismatch")
    assert isinstance(audit, Audit) and audit.action == "promote_failed"
    assert settle == SettleTap(tap(True), "Could not add adder: hash mismatch")


def test_a_denied_tap_discards_and_an_expired_one_changes_nothing() -> None:
    taken = ParkedPromotion("ok", "p1", 7, "adder", "h-new")
    audit, settle = promotion_taken(tap(False), taken)
    assert isinstance(audit, Audit) and audit.action == "discarded"
    assert settle == SettleTap(tap(False), "❌ Discarded adder.")
    assert promotion_taken(tap(True), ParkedPromotion("expired", "p1")) == [
        SettleTap(tap(True), PROMOTION_EXPIRED)
    ]
