"""Which memory caps are in force, said plainly, and the address-space cap a turn falls back to
where the memory cgroup controller is off (issue 33: a stock Raspberry Pi kernel)."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from shelldon.config import Settings
from shelldon.doctor import run_doctor
from shelldon.proc.sandbox import memory

PI_CGROUPS = """\
#subsys_name\thierarchy\tnum_cgroups\tenabled
cpuset\t0\t1\t1
cpu\t0\t1\t1
memory\t0\t1\t0
pids\t0\t1\t1
"""


def test_the_kernel_flag_in_proc_cgroups_says_whether_memory_is_on(tmp_path: Path) -> None:
    cgroups = tmp_path / "cgroups"
    cgroups.write_text(PI_CGROUPS)
    assert not memory.kernel_memory_controller(cgroups)
    cgroups.write_text(PI_CGROUPS.replace("memory\t0\t1\t0", "memory\t0\t1\t1"))
    assert memory.kernel_memory_controller(cgroups)
    assert not memory.kernel_memory_controller(tmp_path / "missing")


def test_the_fallback_leaves_the_service_its_share_and_splits_the_rest() -> None:
    # A 512 MB board (the VM) and the Pi Zero 2W (416 MB): the floor a Python worker needs.
    assert memory.fallback_address_space_mb(1024, 480) == memory.FALLBACK_FLOOR_MB
    assert memory.fallback_address_space_mb(1024, 416) == memory.FALLBACK_FLOOR_MB
    assert memory.fallback_address_space_mb(1024, 1024) == (1024 - memory.SERVICE_SHARE_MB) // 2
    # A roomy machine keeps the configured cap; an unreadable size changes nothing.
    assert memory.fallback_address_space_mb(1024, 24000) == 1024
    assert memory.fallback_address_space_mb(1024, 0) == 1024
    # Never above what the owner configured.
    assert memory.fallback_address_space_mb(100, 480) == 100


def test_memory_total_is_read_from_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:         491520 kB\nMemFree:  1000 kB\n")
    assert memory.memory_total_mb(meminfo) == 480
    assert memory.memory_total_mb(tmp_path / "missing") == 0


def cgroup_dir(tmp_path: Path, subtree: str) -> Path:
    """A directory shaped like a writable cgroup whose children get ``subtree``'s controllers."""
    path = tmp_path / "cg"
    path.mkdir()
    (path / "cgroup.procs").write_text("")
    (path / "cgroup.subtree_control").write_text(subtree)
    return path


def with_cgroup(settings: Settings, path: Path) -> Settings:
    return dataclasses.replace(
        settings, sandbox=dataclasses.replace(settings.sandbox, cgroup=str(path))
    )


def test_a_turn_cgroup_without_the_memory_controller_is_no_memory_cap(
    settings: Settings, tmp_path: Path
) -> None:
    pids_only = with_cgroup(settings, cgroup_dir(tmp_path, "pids"))
    assert not memory.turn_memory_cap(pids_only.sandbox)
    capped, detail = memory.memory_cap_line(pids_only)
    assert not capped and detail.startswith("memory: RLIMIT_AS only")
    (tmp_path / "cg" / "cgroup.subtree_control").write_text("memory pids")
    assert memory.turn_memory_cap(pids_only.sandbox)
    capped, detail = memory.memory_cap_line(pids_only)
    assert capped and "memory.max 128 MB per turn" in detail
    # With a per-turn cap in force the configured address-space cap stands.
    assert memory.with_memory_fallback(pids_only) == pids_only


def test_without_a_cap_the_settings_in_force_carry_the_fallback(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory, "memory_total_mb", lambda: 480)
    assert not memory.turn_memory_cap(settings.sandbox)  # no delegated cgroup in a test
    fallen = memory.with_memory_fallback(settings)
    assert fallen.limits.rlimit_as_mb == memory.FALLBACK_FLOOR_MB
    assert fallen.limits.max_tool_executions == settings.limits.max_tool_executions


def test_doctor_names_the_fix_and_fails_only_when_strict(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory, "kernel_memory_controller", lambda *_: False)
    monkeypatch.setattr("shelldon.proc.sandbox.kernel_memory_controller", lambda *_: False)
    out = io.StringIO()
    run_doctor(settings, out, for_run=False)
    report = out.getvalue()
    line = next(x for x in report.splitlines() if " memory controller " in x)
    assert line.startswith("warn") and "cgroup_enable=memory" in line
    assert "/boot/firmware/cmdline.txt" in line
    cap = next(x for x in report.splitlines() if "sandbox memory cap" in x)
    assert "memory: RLIMIT_AS only" in cap and "cgroup_enable=memory" in cap
    strict = dataclasses.replace(
        settings, sandbox=dataclasses.replace(settings.sandbox, mode="required")
    )
    out = io.StringIO()
    assert run_doctor(strict, out, for_run=False) == 1
    line = next(x for x in out.getvalue().splitlines() if " memory controller " in x)
    assert line.startswith("FAIL")
