"""Containment as the installed service has it, on the stock kernel and with ``--pi`` (no
Landlock: the user + mount namespace layer), under systemd (issue 23):

- a self-coded tool that tries to stop or renice the service's processes reaches none of them
  (each worker lives in a PID namespace of its own);
- a tool that touches 600 MB (three quarters of the machine where it has less: see
  ``HOG_MB``), one that allocates slowly up to the limit and one that forks
  until refused each end their own turn, five times over; the service keeps its main process
  (NRestarts unchanged) and answers the next turn;
- nothing a tool or a gate test starts (``setsid``, double fork, ``nohup``) outlives its turn
  or gate run.

Attack inspiration: issue 23 (a SIGSTOP to the zygote made the service declare it lost and
stop; a 600 MB tool got the whole unit restarted); systemd's ``OOMPolicy=`` (stop, the
default, ends the whole unit for any OOM kill inside it).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.pids import running
from tests.system.rig import (
    CGROUP,
    TURN_S,
    Pet,
    cgroup_pids,
    describe_pids,
    memory_events,
    show,
    wait_until,
)

REPEAT = 5
STRIKES = 3  # [limits] strike_threshold's default: a tool that fails three times is quarantined

HOG = """\
DESCRIPTION = "Hold a block of memory of the given size (MB) and say how big it was."
PARAMS_SCHEMA = {"type": "object", "properties": {"mb": {"type": "integer"}}}


def run(mb=1):
    block = b"\\x01" * (mb * 2**20)  # written, not just reserved: every page is touched
    return str(len(block) // 2**20)
"""
HOG_TEST = (
    "from memory_hog import run\n\n\ndef test_a_small_block():\n    assert run(mb=2) == '2'\n"
)

CREEP = """\
import time

DESCRIPTION = "Take memory a little at a time, up to the given size (MB)."
PARAMS_SCHEMA = {"type": "object", "properties": {"mb": {"type": "integer"}}}


def run(mb=1):
    held = []
    for _ in range(mb // 4):
        held.append(b"\\x02" * (4 * 2**20))
        time.sleep(0.02)
    return str(4 * len(held))
"""
CREEP_TEST = "from memory_creep import run\n\n\ndef test_a_little():\n    assert run(mb=8) == '8'\n"

FORKER = """\
import os
import time

DESCRIPTION = "Fork children that wait, until the system says no; say how many."
PARAMS_SCHEMA = {"type": "object", "properties": {"most": {"type": "integer"}}}


def run(most=10):
    made = 0
    while made < most:
        try:
            pid = os.fork()
        except OSError as exc:
            return f"refused after {made} forks: {exc}"
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        made += 1
    return f"made {made} forks"
"""
FORKER_TEST = (
    "from forker import run\n\n\ndef test_three():\n    assert run(most=3) == 'made 3 forks'\n"
)

STOPPER = """\
import errno
import os
import signal

DESCRIPTION = "Try to stop and renice the given processes; say what the kernel answered."
PARAMS_SCHEMA = {"type": "object", "properties": {"pids": {"type": "string"}}}


def _try(fn):
    try:
        fn()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "allowed"


def run(pids=""):
    out = []
    for pid in (int(p) for p in pids.split(",") if p):
        stop = _try(lambda: os.kill(pid, signal.SIGSTOP))
        nice = _try(lambda: os.setpriority(os.PRIO_PROCESS, pid, 19))
        out.append(f"{pid}:{stop}:{nice}")
        if stop == "allowed":
            os.kill(pid, signal.SIGCONT)
    return " ".join(out)
"""
STOPPER_TEST = "from stopper import run\n\n\ndef test_nothing():\n    assert run('') == ''\n"

LEAVER = """\
import subprocess

DESCRIPTION = "Leave sleepers behind the way daemons do (setsid, double fork, nohup)."
PARAMS_SCHEMA = {"type": "object", "properties": {"seconds": {"type": "string"}}}
QUIET = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}


def run(seconds="1"):
    subprocess.Popen(["setsid", "sleep", seconds], **QUIET)
    subprocess.run(["sh", "-c", f"(sleep {seconds} &) ; exit 0"], check=True, **QUIET)
    subprocess.Popen(["nohup", "sleep", seconds], start_new_session=True, **QUIET)
    return "left three"
"""


def leaver_test(seconds: str) -> str:
    return (
        "from leaver import run\n\n\n"
        f"def test_leaves_three():\n    assert run({seconds!r}) == 'left three'\n"
    )


def unique_seconds() -> str:
    return f"{500 + secrets.randbelow(10**6) / 10**7:.7f}"


def sleepers(seconds: str) -> list[int]:
    """Live processes running ``sleep <seconds>``."""
    return running("sleep", seconds)


def zygote_of(main: int) -> int:
    """The service's zygote: the main process's child that is not a turn's worker."""
    kids = [int(p) for p in Path(f"/proc/{main}/task/{main}/children").read_text().split()]
    zygotes = [k for k in kids if "turns" not in Path(f"/proc/{k}/cgroup").read_text()]
    assert len(zygotes) == 1, (kids, zygotes)
    return zygotes[0]


def state_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def read_mb(path: Path) -> str:
    """A cgroup memory figure in MB ("max" stays as it is; "?" where the file is missing)."""
    try:
        raw = path.read_text().strip()
    except OSError:
        return "?"
    return raw if not raw.isdigit() else f"{int(raw) / 2**20:.1f}"


def tool_results(pet: Pet, since: int) -> list[str]:
    return [
        str(m.get("content"))
        for r in pet.brain.requests_since(since)
        for m in pet.brain.conversation(r)
        if m.get("role") == "tool"
    ]


@pytest.mark.smoke
def test_a_tool_cannot_stop_or_renice_the_service_or_its_zygote(pet: Pet) -> None:
    pet.promote_tool("stopper", STOPPER, STOPPER_TEST)
    pet.brain.reset()
    before = show()
    main = int(before["MainPID"])
    zygote = zygote_of(main)
    asked = len(pet.brain.requests)
    pet.brain.reply_tool_calls(("stopper", {"pids": f"{main},{zygote}"}))
    pet.brain.reply_text("The stopper is done.")
    mark = pet.bot.say("use the stopper")
    pet.bot.wait_text("The stopper is done.", since=mark)
    said = " ".join(tool_results(pet, asked))
    print(f"stopper said {said!r}; zygote {zygote} state {state_of(zygote)}")
    # SIGSTOP: not "allowed", not even EPERM: in the worker's PID namespace these pids name
    # nothing. setpriority: the same, unless the unit's own syscall filter (~@resources)
    # refuses it first (EPERM).
    for pid in (main, zygote):
        assert f"{pid}:ESRCH:ESRCH" in said or f"{pid}:ESRCH:EPERM" in said, said
    assert state_of(zygote) != "T" and state_of(main) != "T"
    time.sleep(2)
    after = show()
    assert after["MainPID"] == before["MainPID"] and after["NRestarts"] == before["NRestarts"]
    pet.turn("still with me?", "Still here after the stopper.")


def _hog_mb() -> int:
    total_mb = int(Path("/proc/meminfo").read_text().split()[1]) // 1024
    return min(600, total_mb * 3 // 4)


HOG_MB = _hog_mb()
"""What the hog takes: 600 MB, or three quarters of a smaller machine. At 512 MB (the Pi, and
``run-vm.sh --arch arm64``) the kernel refuses a 600 MB block outright (the overcommit guess:
more than RAM and swap together), a MemoryError that never reaches the turn's cgroup; that
path is ``test_06_memory_off``'s. Three quarters is still far over a turn's 128 MB, so it is the
cgroup that stops it, as this test means."""

RUNAWAYS = {
    "memory_hog": (HOG, HOG_TEST, {"mb": HOG_MB}, "memory"),
    "memory_creep": (CREEP, CREEP_TEST, {"mb": 1000}, "memory"),
    "forker": (FORKER, FORKER_TEST, {"most": 10000}, "refused"),
}


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("name", tuple(RUNAWAYS))
def test_a_runaway_tool_costs_one_turn_never_the_service(pet: Pet, name: str) -> None:
    code, test, args, ends = RUNAWAYS[name]
    pet.promote_tool(name, code, test)
    pet.brain.reset()
    before = show()
    turns = CGROUP / "turns"
    service_high = memory_events(CGROUP / "service").get("high", 0)
    unit_high = memory_events(CGROUP).get("high", 0)
    for n in range(REPEAT):
        oom_before = memory_events(turns).get("oom_group_kill", 0)
        asked = len(pet.brain.requests)
        pet.brain.reply_tool_calls((name, args))
        pet.brain.reply_text(f"The {name} run is over.")
        mark = pet.bot.say(f"use {name}, round {n}")
        started = time.monotonic()
        wait_until(lambda mark=mark: pet.bot.texts(mark), TURN_S, f"an answer to {name} round {n}")
        took = time.monotonic() - started
        replies = pet.bot.texts(mark)
        results = tool_results(pet, asked)
        print(f"{name} round {n}: {took:.1f} s, replies {replies!r}, tool said {results[-1:]!r}")
        if ends == "memory":
            assert any("more memory than one turn may have" in r for r in replies), replies
            assert memory_events(turns).get("oom_group_kill", 0) > oom_before
        else:
            assert any(f"The {name} run is over." in r for r in replies), replies
            assert any("refused after" in r for r in results), results
        now = show()
        assert now["MainPID"] == before["MainPID"], (before, now)
        assert now["NRestarts"] == before["NRestarts"], (before, now)
        pet.brain.reset()
        pet.turn(f"still with me after round {n}?", f"Still here after {name} round {n}.")
        if ends == "memory" and n + 1 == STRIKES:
            # Each kill was its strike: now it is quarantined, and the owner brings it back.
            mark = pet.bot.say(f"/restore {name}")
            pet.bot.wait_text(f"Restored {name}", since=mark)
    figures = {
        f"{where}/{knob}": read_mb(CGROUP / where / knob)
        for where in ("service", "turns", ".")
        for knob in ("memory.current", "memory.peak", "memory.max")
    }
    print(f"{name}: memory (MB) {figures}")
    # The turns met their own limits: systemd's MemoryHigh never had to squeeze the service.
    assert memory_events(CGROUP / "service").get("high", 0) == service_high
    assert memory_events(CGROUP).get("high", 0) == unit_high


def test_nothing_a_tool_or_a_gate_test_starts_outlives_its_turn_or_gate_run(pet: Pet) -> None:
    gated = unique_seconds()
    pet.promote_tool("leaver", LEAVER, leaver_test(gated))
    assert sleepers(gated) == [], describe_pids(cgroup_pids())
    pet.brain.reset()
    seconds = unique_seconds()
    pet.brain.reply_tool_calls(("leaver", {"seconds": seconds}))
    pet.brain.reply_text("Left three sleepers.")
    mark = pet.bot.say("leave some sleepers")
    pet.bot.wait_text("Left three sleepers.", since=mark)
    wait_until(lambda: not sleepers(seconds), 30, "the turn's sleepers to be gone")
    assert not sleepers(gated)


@pytest.mark.timeout(900)
def test_without_a_cgroup_the_pid_namespace_alone_ends_the_stragglers() -> None:
    # The same kernel without systemd's delegation (a plain `shelldon chat`): the integration
    # tests of that case, run here, on this kernel (--pi: the namespace layer only).
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--timeout", "600"),
            "tests/integration/sandbox/test_stragglers.py",
        ],
        capture_output=True,
        text=True,
        timeout=800,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout
