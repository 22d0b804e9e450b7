"""The unit as deploy/install.sh left it, and a start that reports READY."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from tests.system.rig import (
    CGROUP,
    CONFIG,
    CREDENTIALS,
    HOME,
    UNIT,
    WRAPPER,
    Pet,
    cgroup_pids,
    describe_pids,
    events,
    journal,
    sh,
    show,
)


@pytest.mark.smoke
def test_the_unit_is_installed_and_enabled() -> None:
    assert Path("/etc/systemd/system/shelldon.service").is_file()
    assert sh("systemctl", "is-enabled", UNIT, check=False).stdout.strip() == "enabled"
    assert WRAPPER.is_file() and WRAPPER.stat().st_mode & stat.S_IXUSR
    home = HOME.stat()
    assert stat.S_IMODE(home.st_mode) == 0o700
    assert sh("stat", "-c", "%U", str(HOME)).stdout.strip() == "shelldon"
    assert stat.S_IMODE(CREDENTIALS.stat().st_mode) == 0o700 and CREDENTIALS.stat().st_uid == 0
    assert sh("stat", "-c", "%U:%G %a", str(CONFIG)).stdout.strip() == "root:shelldon 640"
    fragment = show("FragmentPath", "UnitFileState")
    assert fragment["FragmentPath"] == "/etc/systemd/system/shelldon.service", fragment


@pytest.mark.smoke
def test_a_start_reports_ready_with_its_status_text(configured: Pet) -> None:
    started = time.monotonic()
    state = configured.restart()
    took = time.monotonic() - started
    print(f"restart → READY in {took:.1f} s: {state}")
    assert state["ActiveState"] == "active" and state["SubState"] == "running", state
    assert state["StatusText"] == "running", state
    main = int(state["MainPID"])
    assert main > 0
    # It runs as the service user, inside the unit's cgroup, and the bot is polling.
    uid_line = next(
        line
        for line in Path(f"/proc/{main}/status").read_text().splitlines()
        if line.startswith("Uid:")
    )
    shelldon_uid = sh("id", "-u", "shelldon").stdout.strip()
    assert uid_line.split()[1] == shelldon_uid, uid_line
    pids = cgroup_pids()
    assert main in pids, describe_pids(pids)
    assert CGROUP.is_dir()
    # The start log says what turns get: their own cgroup under the delegated subtree.
    layers = events(journal("--since", "-2min", unit_only=True), "sandbox_layer")
    cgroup = [e for e in layers if e["layer"] == "cgroup per turn"][-1]
    assert cgroup["active"] is True and cgroup["detail"].endswith("/turns"), cgroup
    names = [c["command"] for c in configured.bot.fake.commands]
    assert names == [
        "start", "help", "tools", "pending", "budget", "restore",
        "memory", "forget", "new", "schedule", "cancel", "usage", "retire",
    ], names  # fmt: skip
    assert configured.bot.polls() > 0
