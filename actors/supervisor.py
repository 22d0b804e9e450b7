"""SupervisorActor: the root. Starts every actor, wires them to each other, restarts one that
dies (with backoff), and answers the main process's health pings."""

from __future__ import annotations

import datetime as dt
from typing import Any

import structlog
from thespian.actors import ActorAddress, ActorExitRequest, ChildActorExited, WakeupMessage

from actors.arbiter import ArbiterActor
from actors.base import ContractActor
from actors.broker import BrokerActor
from actors.gate import GateRunnerActor
from actors.messages import Boot, Fatal, PeerRestarted, Ping, Status, TransportPolling, Wire
from actors.strikes import StrikeLedgerActor
from actors.transport import TransportActor
from actors.turn import TurnActor

log = structlog.get_logger(__name__)

ROLES: dict[str, type[ContractActor]] = {
    "broker": BrokerActor,
    "turn": TurnActor,
    "strikes": StrikeLedgerActor,
    "gate": GateRunnerActor,
    "arbiter": ArbiterActor,
    "transport": TransportActor,
}
"""Every actor the supervisor runs, by role, in start order."""

MAX_BACKOFF_S = 30.0


class SupervisorActor(ContractActor):
    """Never crashes on a handler's error: it is what restarts the others (its own failures
    are logged; a wedged supervisor stops the watchdog and systemd restarts the service)."""

    crash_on_error = False

    def __init__(self) -> None:
        super().__init__()
        self.boot: Boot | None = None
        self.children: dict[str, Any] = {}
        self.restarts: dict[str, int] = {}
        self.fatal: Fatal | None = None
        self.stopping = False
        self.polling = False

    def receiveMsg_Boot(self, msg: Boot, sender: ActorAddress) -> None:
        if self.boot is None:  # a second Boot is only answered
            self.boot = msg
            for role, cls in ROLES.items():
                self.children[role] = self.createActor(cls)
            self._wire_all()
            log.info("service_started", actors=len(self.children), transport=msg.transport)
        self.send(sender, self._status())

    def _wire_all(self, *, fresh: bool = True) -> None:
        b = self.boot
        assert b is not None
        peers = {**self.children, "supervisor": self.myAddress}
        for address in self.children.values():
            self.send(address, Wire(b, peers, fresh))

    def _status(self) -> Status:
        fatal = self.fatal
        return Status(
            ready=self.boot is not None and fatal is None,
            fatal=fatal.reason if fatal else "",
            exit_status=fatal.exit_status if fatal else 0,
            restarts=sum(self.restarts.values()),
            peers=dict(self.children),
            polling=self.polling,
        )

    def receiveMsg_Ping(self, msg: Ping, sender: ActorAddress) -> None:
        self.send(sender, self._status())

    def receiveMsg_TransportPolling(self, msg: TransportPolling, sender: ActorAddress) -> None:
        self.polling = True

    def receiveMsg_Fatal(self, msg: Fatal, sender: ActorAddress) -> None:
        log.error("service_fatal", reason=msg.reason, exit_status=msg.exit_status)
        if self.fatal is None:
            self.fatal = msg

    def receiveMsg_ChildActorExited(self, msg: ChildActorExited, sender: ActorAddress) -> None:
        role = next((r for r, a in self.children.items() if a == msg.childAddress), None)
        if role is None or self.stopping:
            return
        count = self.restarts.get(role, 0)
        self.restarts[role] = count + 1
        delay = min(MAX_BACKOFF_S, 0.1 * (2 ** min(count, 8)))
        log.error("actor_died", role=role, restarts=count + 1, restart_in_s=delay)
        self.wakeupAfter(dt.timedelta(seconds=delay), payload=role)

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: ActorAddress) -> None:
        if self.stopping:
            return
        role = msg.payload  # the only wake-up it arms: a restart
        self.children[role] = self.createActor(ROLES[role])
        self._wire_all(fresh=False)
        for peer, address in self.children.items():
            if PeerRestarted in ROLES[peer].accepted:  # only those that act on it
                self.send(address, PeerRestarted(role))
        log.warning("actor_restarted", role=role)

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: ActorAddress) -> None:
        self.stopping = True
