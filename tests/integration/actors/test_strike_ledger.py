"""The strike ledger tells the toolbox's owner about a self-coded tool at the threshold, not
one strike fewer."""

from __future__ import annotations

from dataclasses import dataclass

from thespian.actors import ActorAddress

from actors.base import ContractActor
from actors.messages import Boot, QuarantineDue, Wire
from actors.strikes import StrikeLedgerActor
from shelldon.config import Settings
from shelldon.contracts import ToolFailure
from shelldon.rules.effects import Strike
from shelldon.store import Store
from tests.integration.actors.conftest import Looped


@dataclass(frozen=True, slots=True)
class Told:
    """Ask the stand-in gate what it was told."""


class GateStandIn(ContractActor):
    def __init__(self) -> None:
        super().__init__()
        self.told: list[QuarantineDue] = []

    def receiveMsg_QuarantineDue(self, msg: QuarantineDue, sender: ActorAddress) -> None:
        self.told.append(msg)

    def receiveMsg_Told(self, msg: Told, sender: ActorAddress) -> None:
        self.send(sender, tuple(self.told))


def test_the_threshold_quarantines_and_one_strike_fewer_does_not(
    running: Looped, settings: Settings
) -> None:
    with Store(settings.database) as store:
        store.tools.approve("adder", "ab" * 32, now=0)
    threshold = settings.limits.strike_threshold
    gate = running.createActor(GateStandIn)
    ledger = running.createActor(StrikeLedgerActor)
    running.tell(ledger, Wire(Boot(settings), {"gate": gate}))
    strike = Strike(7, (ToolFailure("adder", "boom", "c1"),))

    for _ in range(threshold - 1):
        running.tell(ledger, strike)
    assert running.ask(gate, Told(), 5) == ()

    running.tell(ledger, strike)
    assert running.ask(gate, Told(), 5) == (QuarantineDue(7, "adder", threshold, "boom"),)
