"""deploy/shelldon.service: what the issue asks for is there, `systemd-analyze verify` is
clean and `systemd-analyze security --offline=true` scores it at most 2.0."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from actors.service import HEALTH_EVERY_S
from shelldon.doctor import MAX_EXPOSURE, exposure_score, unit_memory_max_mb

UNIT = Path(__file__).resolve().parents[3] / "deploy" / "shelldon.service"
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")


def directives() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def seconds(value: str) -> float:
    match = re.fullmatch(r"([0-9]+)(s|min)?", value)
    assert match, value
    return int(match.group(1)) * (60 if match.group(2) == "min" else 1)


def test_the_unit_is_a_notify_service_with_a_watchdog_and_restarts() -> None:
    d = directives()
    assert d["Type"] == ["notify"]
    assert d["NotifyAccess"] == ["main"]
    assert d["Restart"] == ["on-failure"]
    assert d["StartLimitBurst"] and d["StartLimitIntervalSec"]
    assert d["KillMode"] == ["mixed"]
    assert d["Delegate"] == ["yes"]
    # The main loop pings the supervisor at least twice per watchdog interval.
    assert seconds(d["WatchdogSec"][0]) >= 2 * HEALTH_EVERY_S


def test_memory_is_capped_with_reclaim_before_the_kill() -> None:
    d = directives()
    assert unit_memory_max_mb(UNIT.read_text()) == 400
    high = unit_memory_max_mb(f"MemoryMax={d['MemoryHigh'][0]}")
    assert high is not None and high < 400
    assert int(d["TasksMax"][0]) > 0


def test_secrets_come_only_through_load_credential() -> None:
    d = directives()
    names = {v.split(":", 1)[0] for v in d["LoadCredential"]}
    assert names == {"telegram_token", "anthropic_api_key", "openai_api_key"}
    for value in d["Environment"]:
        assert not re.search(r"TOKEN|KEY|SECRET|PASSWORD", value, re.IGNORECASE), value
    assert d["Environment"] == [
        "SHELLDON_HOME=/var/lib/shelldon",
        "SHELLDON_CONFIG=/etc/shelldon/config.toml",
    ]


def test_only_the_home_is_writable_and_the_rest_is_locked_down() -> None:
    d = directives()
    assert d["ProtectSystem"] == ["strict"]
    writable = [p for p in d["ReadWritePaths"] if "/sys/fs/cgroup/" not in p]
    assert writable == ["/var/lib/shelldon"]
    assert d["ProtectHome"] == ["yes"]  # the home is under /var/lib
    for key in ("PrivateTmp", "NoNewPrivileges", "ProtectControlGroups", "LockPersonality"):
        assert d[key] == ["yes"], key
    for key in ("ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs"):
        assert d[key] == ["yes"], key
    assert d["CapabilityBoundingSet"] == [""]
    assert d["SystemCallFilter"][0] == "@system-service"
    assert d["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"]
    # The worker's own user, PID, mount (+ network) namespaces; no ipc, uts, cgroup.
    assert d["RestrictNamespaces"] == ["user mnt net pid"]
    # An OOM kill inside a turn's cgroup must not stop the unit (systemd's default policy).
    assert d["OOMPolicy"] == ["continue"]
    assert d["PrivateUsers"] == ["yes"]


def analyzable_copy(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this venv's shelldon (verify checks it exists)."""
    exe = Path(sys.executable).parent / "shelldon"
    text = re.sub(r"(?m)^ExecStart=\S+", f"ExecStart={exe}", UNIT.read_text())
    copy = tmp_path / "shelldon.service"
    copy.write_text(text)
    return copy


@needs_analyze
def test_systemd_analyze_verify_is_clean(tmp_path: Path) -> None:
    assert ANALYZE is not None
    proc = subprocess.run(
        [ANALYZE, "verify", str(analyzable_copy(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr


@needs_analyze
def test_exposure_is_at_most_two() -> None:
    score, why = exposure_score(UNIT)
    assert score is not None, why
    assert score <= MAX_EXPOSURE
