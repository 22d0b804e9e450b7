"""Every resource has an owner: the sqlite connection a ``WiredActor`` opens is closed when the
actor exits, whatever its own exit handler does, so an actor that crashes and is started again
(let it crash) leaks no descriptor each time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from thespian.actors import ActorAddress, ActorExitRequest

from actors.messages import Boot, Crash, Wire
from actors.strikes import StrikeLedgerActor
from actors.wired import WiredActor
from shelldon.config import Settings
from tests.integration.actors.conftest import Looped


class OwnExitActor(WiredActor):
    """A wired actor with an exit handler of its own that knows nothing of the store."""

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: ActorAddress) -> None:
        raise RuntimeError("its own clean-up failed")


def open_on(database: Path) -> int:
    """Descriptors of this process open on the database's files (the db, its -wal, -shm)."""
    fds = Path("/proc/self/fd")
    count = 0
    for fd in os.listdir(fds):
        try:
            target = os.readlink(fds / fd)
        except OSError:
            continue
        count += target.startswith(str(database))
    return count


@pytest.mark.parametrize("actor", [StrikeLedgerActor, OwnExitActor])
def test_an_actor_crashed_again_and_again_leaks_no_database_descriptor(
    running: Looped, settings: Settings, actor: type[WiredActor]
) -> None:
    def crash_one() -> None:
        address = running.createActor(actor)
        running.tell(address, Wire(Boot(settings)))
        running.tell(address, Crash())
        running.driver.step(0.2)

    crash_one()  # the first may open what the process keeps (sqlite's own)
    before = open_on(settings.database)

    for _ in range(5):
        crash_one()

    assert open_on(settings.database) == before
