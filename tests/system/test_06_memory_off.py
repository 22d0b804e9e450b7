"""The installed service on a kernel whose memory cgroup controller is off, as a stock Raspberry
Pi kernel boots without ``cgroup_enable=memory`` (issue 33). Run by ``run-vm.sh --memory-off``:
512 MB of memory, ``cgroup_disable=memory`` on the kernel command line. Elsewhere these skip.

- the start log, ``shelldon doctor`` and the installer say plainly that only ``RLIMIT_AS``
  bounds a turn, and how to turn the controller on;
- a tool that allocates 600 MB fails at once (long before the turn's deadline) and the owner is
  told it ran out of memory; the service keeps its main process, the device keeps memory to
  spare, and the next turn is answered.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from shelldon.proc.sandbox.memory import kernel_memory_controller
from tests.system.rig import WRAPPER, Pet, events, journal, sh, show

pytestmark = pytest.mark.skipif(
    kernel_memory_controller(), reason="the memory controller is on (run-vm.sh --memory-off)"
)

HOG = """\
DESCRIPTION = "Hold a block of memory of the given size (MB) and say how big it was."
PARAMS_SCHEMA = {"type": "object", "properties": {"mb": {"type": "integer"}}}


def run(mb=1):
    block = b"\\x01" * (mb * 2**20)
    return str(len(block) // 2**20)
"""
HOG_TEST = "from memory_hog import run\n\n\ndef test_small():\n    assert run(mb=2) == '2'\n"
TURN_TIMEOUT_S = 25.0  # [limits] turn_timeout_s's default


def meminfo_mb(field: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) // 1024
    raise AssertionError(field)


def test_the_log_doctor_and_installer_say_only_rlimit_as_bounds_a_turn(pet: Pet) -> None:
    pet.fresh()
    layers = events(journal("-b", unit_only=True), "sandbox_layer")
    (cap,) = [e for e in layers if e.get("layer") == "memory cap"][-1:]
    assert cap["active"] is False and "memory: RLIMIT_AS only" in cap["detail"], cap
    doctor = sh(str(WRAPPER), "doctor", check=False)
    assert doctor.returncode == 0, doctor.stdout  # a warning, not a failure (mode best-effort)
    (line,) = [x for x in doctor.stdout.splitlines() if " memory controller " in x]
    assert line.startswith("warn") and "cgroup_enable=memory" in line, line
    (rlimits,) = [x for x in doctor.stdout.splitlines() if " rlimits " in x]
    print(f"MemTotal {meminfo_mb('MemTotal')} MB; doctor: {rlimits.strip()}")
    scratch = Path("/tmp/install-memory-off")
    install = sh("bash", "deploy/install.sh", "--prefix", str(scratch), "--skip-venv")
    assert "add cgroup_enable=memory" in install.stdout, install.stdout


def test_a_600_mb_tool_fails_fast_and_the_owner_is_told(pet: Pet) -> None:
    pet.promote_tool("memory_hog", HOG, HOG_TEST)
    before = show("MainPID", "NRestarts")
    lowest = [meminfo_mb("MemAvailable")]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            lowest.append(meminfo_mb("MemAvailable"))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    pet.brain.reset()
    pet.brain.reply_tool_calls(("memory_hog", {"mb": 600}))
    pet.brain.reply_text("I tried to hold it.")
    started = time.monotonic()
    mark = pet.bot.say("hold 600 MB")
    said = pet.bot.wait_text("ran out of memory", since=mark)
    took = time.monotonic() - started
    done.set()
    sampler.join()
    print(
        f"600 MB tool: told in {took:.1f} s; MemAvailable lowest {min(lowest)} MB "
        f"of {meminfo_mb('MemTotal')} MB"
    )
    assert "memory_hog" in said
    assert took < TURN_TIMEOUT_S, "stopped by the deadline, not by a memory limit"
    assert min(lowest) > 64, "the device came close to running out"
    assert show("MainPID", "NRestarts") == before
    pet.turn("still there?", "Still here.")


def test_the_kernel_really_has_no_memory_controller() -> None:
    controllers = Path("/sys/fs/cgroup/cgroup.controllers").read_text().split()
    assert "memory" not in controllers
    cmdline = Path("/proc/cmdline").read_text()
    assert "cgroup_disable=memory" in cmdline
