"""No actor waits for the zygote (issue 29): a turn's worker and a gate's pytest are asked
for in a handler that returns at once, and arrive on a watched descriptor. With the zygote
stopped the actors still answer; once it runs again the turn goes on."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from .harness import Service

pytestmark = pytest.mark.slow


def closed_but_watched(svc: Service) -> list[tuple[str, int]]:
    """Descriptors an actor still watches after closing them: ``poll`` reports them (POLLNVAL)
    at once, every time, and the loop spins."""

    def look() -> list[tuple[str, int]]:
        bad = []
        for ref in list(svc.driver._base.actorRegistry.values()):
            actor = getattr(ref, "instance", None)
            for fd in getattr(actor, "_shelldon_watch", ()):
                try:
                    os.fstat(fd)
                except OSError:
                    bad.append((type(actor).__name__, fd))
        return bad

    return svc.driver.call(look)  # type: ignore[no-any-return]


def test_a_stopped_zygote_stalls_no_actor_and_the_turn_goes_on(tmp_path: Path) -> None:
    svc = Service(tmp_path / "home", [{"when": "hi", "text": "Hello after the pause."}])
    try:
        os.kill(svc.zygote.pid, signal.SIGSTOP)
        try:
            svc.say("hi")
            time.sleep(0.5)  # the arbiter has handed the turn to the TurnActor by now
            started = time.monotonic()
            assert svc.status().ready
            assert time.monotonic() - started < 1.0
            assert "Hello" not in svc.quiet_for(0.2)
        finally:
            os.kill(svc.zygote.pid, signal.SIGCONT)
        svc.expect("Hello after the pause.")
        assert svc.zygote.alive()
        time.sleep(0.3)  # the worker's exit reported and its descriptors closed
        assert closed_but_watched(svc) == []
    finally:
        svc.stop()


def test_a_zygote_that_never_answers_is_given_up_and_the_owner_told(tmp_path: Path) -> None:
    svc = Service(tmp_path / "home", [{"when": "hi", "text": "never"}])
    pid = svc.zygote.pid
    try:
        os.kill(pid, signal.SIGSTOP)
        svc.say("hi")
        started = time.monotonic()
        assert svc.status().ready  # still answering while the spawn waits
        assert time.monotonic() - started < 1.0
        svc.expect("something broke", timeout=15)
        assert not svc.zygote.alive()  # killed, as a zygote that breaks the protocol is
        assert closed_but_watched(svc) == []
    finally:
        svc.stop()
