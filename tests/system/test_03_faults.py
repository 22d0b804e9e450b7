"""Faults as systemd and the kernel handle them: kill -9 of the whole service, a stopped main
process, a fork bomb the owner approved. (Runaway self-coded tools: test_05_containment.)"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import Counter

import pytest

from tests.system.rig import (
    START_S,
    TURN_S,
    UNIT,
    WORKSPACE,
    Pet,
    cgroup_pids,
    describe_pids,
    journal,
    sh,
    show,
    sqlite,
    wait_until,
)


def approvals_for(turn_query: str) -> list[str]:
    return sqlite(
        "SELECT action FROM audit WHERE action IN ('approved', 'denied') "
        f"AND turn_id = '{turn_query}' ORDER BY id;"
    )


def turn_id_of(callback_data: str) -> str:
    """The turn id an approval button carries (``a:<turn id>:<mac>``)."""
    return callback_data.split(":")[1]


@pytest.mark.smoke
def test_kill_9_of_the_whole_service_restarts_it_and_a_parked_approval_runs_once(
    pet: Pet,
) -> None:
    ledger = WORKSPACE / "ran-once.txt"
    ledger.unlink(missing_ok=True)
    pet.brain.reply_tool_calls(("run_shell", {"command": "echo ran >> ran-once.txt"}))
    mark = pet.bot.say("append a line to ran-once.txt")
    ask = pet.bot.wait_keyboard(since=mark)
    approve = ask.buttons()[0]["callback_data"]
    before = show()
    # Every process of the unit gets SIGKILL at once, as a crash of the whole service would.
    sh("systemctl", "kill", "-s", "KILL", UNIT)
    after = pet.wait_ready(timeout=START_S + 30, other_than=before["MainPID"])
    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1, (before, after)
    assert not ledger.exists()
    # The keyboard sent before the crash still decides the parked call.
    pet.brain.reply_text("Done: appended the line.")
    mark = pet.bot.mark()
    first = pet.bot.tap(ask, 0)
    pet.bot.wait_text("Done: appended the line.", since=mark)
    wait_until(lambda: pet.bot.answered(first), TURN_S, "the tap to be answered")
    assert ledger.read_text() == "ran\n"
    # A second tap on the same button (a stale keyboard, a double tap) runs nothing again.
    asked = len(pet.brain.requests)
    second = pet.bot.tap_data(approve, ask.message_id)
    wait_until(lambda: pet.bot.answered(second), TURN_S, "the second tap to be answered")
    time.sleep(5)
    assert ledger.read_text() == "ran\n"
    assert len(pet.brain.requests) == asked
    assert pet.bot.texts(mark).count("Done: appended the line.") == 1
    assert approvals_for(turn_id_of(approve)) == ["approved"]


@pytest.mark.timeout(900)
def test_a_stopped_main_process_is_replaced_by_the_watchdog(pet: Pet) -> None:
    before = show()
    main = int(before["MainPID"])
    stopped_at = time.monotonic()
    os.kill(main, signal.SIGSTOP)
    try:
        wait_until(
            lambda: show()["MainPID"] not in ("0", str(main)),
            150,
            "systemd to start a new main process",
            every=1.0,
        )
        replaced_s = time.monotonic() - stopped_at
        after = pet.wait_ready(other_than=str(main))
        ready_s = time.monotonic() - stopped_at
    finally:
        # Only if it is somehow still there: never leave a stopped process behind.
        with contextlib.suppress(ProcessLookupError):
            os.kill(main, signal.SIGCONT)
    print(f"SIGSTOP → new MainPID after {replaced_s:.0f} s, READY after {ready_s:.0f} s")
    assert 25 <= replaced_s <= 100, replaced_s
    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1, (before, after)
    assert any("Watchdog timeout" in line for line in journal("--since", "-5min"))
    pet.turn("are you back?", "Back after the watchdog.")


def where(pids: dict[int, str]) -> Counter[str]:
    """How many processes sit in the service's own leaf and how many in turn cgroups."""
    return Counter("turns" if cg.startswith("turns") else cg for cg in pids.values())


def test_an_approved_fork_bomb_is_bounded_and_leaves_nothing_behind(pet: Pet) -> None:
    # Idle: the main process and the zygote in the service's leaf, the zygote's spare worker
    # waiting in a turn cgroup of its own. Let a spare settle first.
    time.sleep(3)
    idle = cgroup_pids()
    before = show()
    asked = len(pet.brain.requests)
    # The shell stays (exec, no fork needed) while the bomb grows: its end does not end the bomb
    # early, and every fork past the turn's pids.max fails.
    bomb = "bomb() { bomb | bomb & }; bomb; exec sleep 8"
    pet.brain.reply_tool_calls(("run_shell", {"command": bomb}))
    pet.brain.reply_text("The shell command finished.")
    mark = pet.bot.say("run this shell function for me")
    ask = pet.bot.wait_keyboard(since=mark)
    assert "bomb" in ask.visible
    peak = {"unit": 0, "turns": 0}
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            now = where(cgroup_pids())
            peak["unit"] = max(peak["unit"], sum(now.values()))
            peak["turns"] = max(peak["turns"], now["turns"])
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        pet.bot.tap(ask, 0)
        pet.bot.wait_text("The shell command finished.", since=mark, timeout=TURN_S + 60)
        wait_until(
            lambda: where(cgroup_pids()) == where(idle),
            60,
            f"the unit's processes back to idle ({where(idle)})",
        )
    finally:
        sampling.set()
        sampler.join(5)
    left = cgroup_pids()
    after = show()
    results = [
        str(m.get("content"))[:300]
        for r in pet.brain.requests_since(asked)
        for m in pet.brain.conversation(r)
        if m.get("role") == "tool"
    ]
    print(
        f"fork bomb: idle {dict(where(idle))}, peak {peak}, after {dict(where(left))};"
        f" run_shell said {results}; replies {pet.bot.texts(mark)}"
    )
    assert where(left) == where(idle), describe_pids(left)
    assert after["MainPID"] == before["MainPID"] and after["NRestarts"] == before["NRestarts"]
    # It did explode (forks past the limit were refused), and never held more than a turn's
    # pids.max (64, the worker included) beside the idle processes (the spare waits in a turn
    # cgroup of its own).
    assert any("Cannot fork" in r for r in results), results
    assert peak["turns"] <= where(idle)["turns"] + 64, peak
    assert peak["unit"] <= sum(where(idle).values()) + 64, peak
    pet.turn("are you still fine?", "Fine after the fork bomb.")
