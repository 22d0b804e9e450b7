"""Nothing arriving on an actor socket is unpickled blindly: a frame must be sealed with the
service's wire key, and even then only trusted classes are resolved.

Sources of the payloads: the classic ``__reduce__`` -> ``os.system`` gadget (Python docs, "pickle
— Restricting Globals"; Marco Slaviero, "Sour Pickles", Black Hat 2011), protocol-4 dotted
STACK_GLOBAL names that walk attributes (``codec.os.system``: Trail of Bits' fickling write-ups),
and gadgets hidden inside a legitimate Thespian envelope (sender address, message).
"""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import structlog
import structlog.testing
from thespian.actors import (
    ActorAddress,
    ActorExitRequest,
    InvalidActorSpecification,
    ValidateSource,
)
from thespian.system.logdirector import LoggerFileDup
from thespian.system.transport.streamBuffer import ackDataErrMsg, ackMsg

from actors.hardening import (
    GuardedUnpickler,
    RefusedPickle,
    forget_wire_key,
    guarded_loads,
    harden_thespian,
    open_frame,
    seal_frame,
    seal_pickled,
)
from actors.system import RunningSystem
from shelldon.contracts import InboundMessage, Message, Role, Tier, ToolCall, ToolDefinition
from tests.integration.actors.messages import Calls, CountCalls, Explode, Ping, Pong
from tests.integration.actors.probes import ProbeActor


class _Reduce:
    """Pickles as ``func(*args)``: what an attacker sends."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func = func
        self.args = args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.func, self.args


def _global_call(module: str, name: str, arg: str) -> bytes:
    """A protocol-4 pickle calling ``module.name(arg)`` through STACK_GLOBAL (dotted names too)."""

    def short(text: str) -> bytes:
        raw = text.encode()
        return pickle.SHORT_BINUNICODE + bytes([len(raw)]) + raw

    return (
        pickle.PROTO
        + b"\x04"
        + short(module)
        + short(name)
        + pickle.STACK_GLOBAL
        + short(arg)
        + pickle.TUPLE1
        + pickle.REDUCE
        + pickle.STOP
    )


def _attack_payloads(marker: Path) -> dict[str, bytes]:
    shell = f"touch {marker}"
    return {
        "os.system": pickle.dumps(_Reduce(os.system, shell)),
        "subprocess.Popen": pickle.dumps(_Reduce(subprocess.Popen, ["touch", str(marker)])),
        "builtins.open": pickle.dumps(_Reduce(open, str(marker), "w")),
        "builtins.eval": pickle.dumps(_Reduce(eval, f"open({str(marker)!r}, 'w')")),
        "protocol 0 GLOBAL": f"cposix\nsystem\n(V{shell}\ntR.".encode(),
        "dotted name through a trusted module": _global_call(
            "shelldon.contracts", "codec.os.system", shell
        ),
        "function defined in a trusted module": _global_call(
            "shelldon.contracts.codec", "decode", shell
        ),
        "untrusted thespian class": _global_call("thespian.actors", "ActorSystem", "simple"),
        "gadget inside a thespian envelope": pickle.dumps(
            (ActorAddress(None), _Reduce(os.system, shell))
        ),
        "gadget inside a trusted contract": pickle.dumps(
            InboundMessage(1, 2, _Reduce(os.system, shell))  # type: ignore[arg-type]
        ),
    }


def _send_raw(port: int, payload: bytes) -> bytes:
    """Frame ``payload`` as Thespian's TCP transport does and return the peer's framed answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=3) as conn:
        conn.sendall(b"%d>" % len(payload) + payload)
        answer = b""
        while chunk := conn.recv(4096):  # a NAK closes the socket; an ACK keeps it open
            answer += chunk
            size, mark, rest = answer.partition(b">")
            if mark and len(rest) >= int(size):
                break
    return answer


@pytest.mark.parametrize("name", list(_attack_payloads(Path("/nonexistent")).keys()))
def test_an_untrusted_class_is_refused_before_anything_runs(tmp_path: Path, name: str) -> None:
    marker = tmp_path / "pwned"
    payload = _attack_payloads(marker)[name]

    with pytest.raises(RefusedPickle):
        guarded_loads(payload)
    assert not marker.exists()


def test_a_refusal_is_logged_with_the_class_it_named() -> None:
    with structlog.testing.capture_logs() as logs, pytest.raises(RefusedPickle):
        guarded_loads(pickle.dumps(_Reduce(os.system, "true")))

    assert [(e["event"], e["module"], e["name"]) for e in logs] == [
        ("pickle_refused", "posix", "system")
    ]


def test_an_untrusted_module_is_never_imported() -> None:
    # Importing can run code: the registry is checked before the import.
    with pytest.raises(RefusedPickle):
        GuardedUnpickler.__new__(GuardedUnpickler).find_class("antigravity", "x")
    import sys

    assert "antigravity" not in sys.modules


@pytest.mark.parametrize(
    "message",
    [
        InboundMessage(1, 2, "hi"),
        ToolDefinition("clock", "what time is it", {"type": "object"}, Tier.RISKY),
        Message(Role.ASSISTANT, "x", (ToolCall("1", "clock", {}),)),
        Ping("hello", turn_id="t1"),
        (ActorAddress(None), ActorExitRequest()),
        {"nested": [1, 2.5, b"bytes", {3, 4}, frozenset({5})]},
    ],
)
def test_messages_that_legitimately_travel_are_let_in(message: object) -> None:
    assert guarded_loads(pickle.dumps(message)) == message


def test_a_sealed_frame_opens_and_an_unsealed_one_is_refused() -> None:
    harden_thespian()  # makes this process's wire key
    message = InboundMessage(1, 2, "hi")

    assert open_frame(seal_frame(message)) == message
    with pytest.raises(RefusedPickle, match="wire key"):
        open_frame(pickle.dumps(message))


def test_a_fork_that_forgets_the_wire_key_can_no_longer_seal() -> None:
    harden_thespian()
    pid = os.fork()
    if pid == 0:  # the worker's side of a fork: forget first, then try to forge
        try:
            forget_wire_key()
            seal_frame(Ping("forged"))
        except RefusedPickle:
            os._exit(0)
        os._exit(1)
    _, status = os.waitpid(pid, 0)

    assert os.waitstatus_to_exitcode(status) == 0
    assert open_frame(seal_frame(Ping("parent still seals"))) == Ping("parent still seals")


def _marker_stays_absent(marker: Path) -> bool:
    time.sleep(0.3)  # an accepted gadget would have run by now
    return not marker.exists()


@pytest.mark.parametrize("target", ["admin", "actor"])
@pytest.mark.parametrize("sealed", [False, True], ids=["unsealed", "sealed with the wire key"])
def test_a_malicious_pickle_sent_to_an_actor_system_port_runs_nothing(
    running: RunningSystem, tmp_path: Path, target: str, sealed: bool
) -> None:
    # Unsealed: refused by the frame MAC. Sealed (a fork that still holds the key): refused by
    # the class allowlist. Either way nothing is unpickled blindly.
    probe = running.system.createActor(ProbeActor)
    port = running.admin_port if target == "admin" else probe.addressDetails.sockname[1]
    marker = tmp_path / "pwned"

    for name, payload in _attack_payloads(marker).items():
        answer = _send_raw(port, seal_pickled(payload) if sealed else payload)
        assert answer == ackDataErrMsg, f"{name}: expected the data-error NAK, got {answer!r}"

    assert _marker_stays_absent(marker)
    # The system keeps working: the same actor (and the Admin, to create one) still answer.
    reply = running.system.ask(probe, Ping("still there"), 5)
    assert isinstance(reply, Pong)
    assert isinstance(
        running.system.ask(running.system.createActor(ProbeActor), Ping("x"), 5), Pong
    )


def test_a_well_formed_message_without_the_wire_key_is_not_delivered(
    running: RunningSystem,
) -> None:
    # Any local process can connect to loopback; only forks of the service hold the key.
    probe = running.system.createActor(ProbeActor)
    port = probe.addressDetails.sockname[1]
    envelope = pickle.dumps((ActorAddress(None), Explode(turn_id="forged")))

    assert _send_raw(port, envelope) == ackDataErrMsg
    tampered = seal_pickled(envelope).replace(b"forged", b"forgeD")
    assert _send_raw(port, tampered) == ackDataErrMsg
    assert running.system.ask(probe, CountCalls(), 5) == Calls(0)

    assert _send_raw(port, seal_pickled(envelope)) == ackMsg  # the same frame, sealed: delivered
    assert running.system.ask(probe, CountCalls(), 5) == Calls(1)


@pytest.mark.parametrize(
    "message",
    [
        ValidateSource("0" * 32, b"PK\x03\x04 zipped code", "evil.zip"),
        LoggerFileDup(),
    ],
    ids=["source loading", "logger file redirect"],
)
def test_thespian_messages_that_carry_code_or_paths_are_refused_by_the_admin(
    running: RunningSystem, message: object
) -> None:
    # Thespian's source loading ships code for the Admin to import; LoggerFileDup names a file.
    frame = seal_pickled(pickle.dumps((ActorAddress(None), message)))
    answer = _send_raw(running.admin_port, frame)

    assert answer == ackDataErrMsg
    assert isinstance(
        running.system.ask(running.system.createActor(ProbeActor), Ping("x"), 5), Pong
    )


@pytest.mark.parametrize("class_name", ["this.Zen", "os.path.Anything", "thespian.troupe.Troupe"])
def test_the_admin_creates_no_actor_from_outside_the_trusted_packages(
    running: RunningSystem, class_name: str
) -> None:
    # A createActor request names the class as a string the Admin would import.
    with pytest.raises(InvalidActorSpecification, match="not in a trusted actor package"):
        running.system.createActor(class_name)

    assert isinstance(
        running.system.ask(running.system.createActor(ProbeActor), Ping("x"), 5), Pong
    )
