"""`shelldon doctor` for a deployment: token shape, allowed users, Landlock, RLIMITs, memory,
the unit and its exposure — each one line, and a failing exit status when `run` would fail."""

from __future__ import annotations

import dataclasses
import io
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shelldon.config import SandboxSettings, Settings, load_settings
from shelldon.doctor import (
    Check,
    gather_checks,
    run_doctor,
    unit_memory_max_mb,
)
from shelldon.proc.sandbox import landlock_abi
from shelldon.proc.sandbox.memory import read_meminfo
from shelldon.toolbox.toolbox import Toolbox
from tests.unit.selfcode.samples import ADDER, promote

GOOD_TOKEN = "123456789:AAHfiqksKZ8WmR2zSjiQ7_v4TMAKdiHm9T0"
UNIT = Path(__file__).resolve().parents[3] / "deploy" / "shelldon.service"


def by_name(checks: list[Check], name: str) -> Check:
    return next(c for c in checks if c.name == name)


def configured(home: Path, users: str = "1001") -> Settings:
    return load_settings(
        environ={"SHELLDON_HOME": str(home), "SHELLDON_TELEGRAM_ALLOWED_USERS": users}
    )


def test_a_well_shaped_token_passes_without_being_printed(home: Path) -> None:
    (home / "vault" / "telegram_token").write_text(GOOD_TOKEN + "\n")
    out = io.StringIO()
    status = run_doctor(configured(home), out, for_run=True, unit=home / "no.service")
    assert "ok   telegram token shape" in out.getvalue()
    assert GOOD_TOKEN not in out.getvalue() and "AAHfiqks" not in out.getvalue()
    assert status == 0, out.getvalue()


def test_a_malformed_token_fails_for_run(home: Path) -> None:
    (home / "vault" / "telegram_token").write_text("my-bot-password-1234\n")
    out = io.StringIO()
    status = run_doctor(configured(home), out, for_run=True, unit=home / "no.service")
    assert "FAIL telegram token shape" in out.getvalue()
    assert "my-bot-password" not in out.getvalue()
    assert status == 1


def test_empty_allowed_users_fails_for_run_and_only_warns_for_chat(settings: Settings) -> None:
    run = by_name(gather_checks(settings, for_run=True), "telegram.allowed_users")
    chat = by_name(gather_checks(settings, for_run=False), "telegram.allowed_users")
    assert not run.ok and run.required
    assert not chat.ok and not chat.required


def test_a_missing_token_fails_for_run(settings: Settings) -> None:
    check = by_name(gather_checks(settings, for_run=True), "secret telegram_token")
    assert not check.ok and check.required


def test_the_fallback_and_its_key_are_checked(home: Path) -> None:
    settings = load_settings(
        environ={
            "SHELLDON_HOME": str(home),
            "SHELLDON_BRAIN_PROVIDER": "openai",
            "SHELLDON_BRAIN_FALLBACK_PROVIDER": "anthropic",
            "SHELLDON_BRAIN_FALLBACK_MODEL": "claude-haiku-4-5",
            "SHELLDON_BRAIN_FALLBACK_KEY": "spare_key",
        }
    )
    fallback = by_name(gather_checks(settings, gate=False), "fallback")
    assert fallback.ok and fallback.detail == "anthropic (model claude-haiku-4-5, key spare_key)"
    key = by_name(gather_checks(settings, gate=False), "secret spare_key")
    assert not key.ok and key.required and "fallback" in key.detail
    (home / "vault" / "spare_key").write_text("sk-ant-spare\n")
    key = by_name(gather_checks(settings, gate=False), "secret spare_key")
    assert key.ok and "sk-ant-spare" not in key.detail


def test_with_a_config_file_doctor_checks_for_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text("[brain]\nprovider = 'scripted'\n")
    proc = subprocess.run(
        [sys.executable, "-m", "shelldon", "doctor"],
        env={"PATH": os.environ["PATH"], "SHELLDON_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1, proc.stdout
    assert "FAIL telegram.allowed_users" in proc.stdout
    relaxed = subprocess.run(
        [sys.executable, "-m", "shelldon", "doctor", "--for", "chat"],
        env={"PATH": os.environ["PATH"], "SHELLDON_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert relaxed.returncode == 0, relaxed.stdout


def test_landlock_line_matches_the_kernel(settings: Settings) -> None:
    abi = landlock_abi()
    check = by_name(gather_checks(settings), "landlock")
    assert check.ok == (abi > 0)
    assert not check.required  # the Pi's stock kernel has none; other layers take over
    lsm = Path("/sys/kernel/security/lsm")
    if lsm.exists() and os.access(lsm, os.R_OK):
        assert (abi > 0) == ("landlock" in lsm.read_text())


def test_rlimits_above_the_hard_limit_fail(tmp_path: Path) -> None:
    home = tmp_path / "home"

    def lower_cpu_hard_limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (10, 10))

    proc = subprocess.run(
        [sys.executable, "-m", "shelldon", "doctor"],
        env={
            "PATH": os.environ["PATH"],
            "SHELLDON_HOME": str(home),
            "SHELLDON_LIMITS_RLIMIT_CPU_S": "30",
        },
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=lower_cpu_hard_limit,
    )
    line = next(x for x in proc.stdout.splitlines() if " rlimits " in x)
    assert line.startswith("FAIL") and "RLIMIT_CPU 30 above the hard limit 10" in line
    assert proc.returncode == 1


def test_rlimits_that_fit_pass(settings: Settings) -> None:
    assert by_name(gather_checks(settings), "rlimits").ok


def test_memory_line_compares_available_memory_with_the_cap(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  434176 kB\nMemFree: 1000 kB\nMemAvailable:  102400 kB\n")
    values = read_meminfo(meminfo)
    assert values["MemAvailable"] == 102400
    from shelldon.doctor import _memory_check

    low = _memory_check(UNIT.read_text(), values)
    assert not low.ok and "100 MB available of 424 MB; MemoryMax 400 MB" in low.detail
    roomy = _memory_check(None, {"MemTotal": 434176, "MemAvailable": 307200})
    assert roomy.ok and "300 MB available" in roomy.detail


def test_memory_max_suffixes_are_read() -> None:
    assert unit_memory_max_mb("MemoryMax=400M\n") == 400
    assert unit_memory_max_mb("MemoryMax=1G") == 1024
    assert unit_memory_max_mb("MemoryMax=409600K") == 400
    assert unit_memory_max_mb("[Service]\nMemoryHigh=300M") is None


def test_a_missing_unit_is_reported_as_not_installed(settings: Settings, tmp_path: Path) -> None:
    checks = gather_checks(settings, unit=tmp_path / "shelldon.service")
    unit = by_name(checks, "systemd unit")
    if shutil.which("systemctl"):
        assert not unit.ok and "not installed" in unit.detail and not unit.required
    else:
        assert unit.ok and "no systemd" in unit.detail


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_the_installed_unit_exposure_is_scored(settings: Settings) -> None:
    check = by_name(gather_checks(settings, unit=UNIT), "unit exposure")
    assert check.ok and check.required, check.detail


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_a_lax_unit_fails_the_exposure_check(settings: Settings, tmp_path: Path) -> None:
    lax = tmp_path / "lax.service"
    lax.write_text("[Service]\nExecStart=/bin/true\n")
    check = by_name(gather_checks(settings, unit=lax), "unit exposure")
    assert not check.ok and check.required
    assert float(check.detail.split()[0]) > 2.0


def test_doctor_gates_a_sample_tool_and_says_how_long_it_took(settings: Settings) -> None:
    gate = by_name(gather_checks(settings), "gate")
    assert gate.ok and gate.required
    assert gate.detail.startswith("a sample tool passed (AST checks + sandboxed pytest, 2 tests)")
    took = float(gate.detail.rsplit(" in ", 1)[1].removesuffix(" s"))
    assert 0 < took < 30


@pytest.mark.parametrize(("mode", "fs"), [("off", "auto"), ("best-effort", "none")])
def test_without_a_filesystem_layer_doctor_says_self_coded_tools_are_off(
    settings: Settings, mode: str, fs: str
) -> None:
    bare = dataclasses.replace(settings, sandbox=SandboxSettings(mode=mode, fs=fs))
    checks = gather_checks(bare)
    selfcoded = by_name(checks, "self-coded tools")
    assert not selfcoded.ok and not selfcoded.required
    assert "self-coded tools are off" in selfcoded.detail
    gate = by_name(checks, "gate")  # nothing model-written would be gated: not run either
    assert not gate.ok and not gate.required and gate.detail.startswith("not run:")


def test_doctor_names_the_layer_self_coded_tools_run_under(settings: Settings) -> None:
    check = by_name(gather_checks(settings, gate=False), "self-coded tools")
    assert check.ok and check.detail == "on: gated and run under landlock"


def test_doctor_reports_toolbox_files_that_will_not_run(settings: Settings, sc: Toolbox) -> None:
    promote(sc, "adder", ADDER)
    assert by_name(gather_checks(settings, gate=False), "toolbox").ok
    (sc.live_dir / "adder.py").write_text(ADDER.replace("a + 1", "a + 2"))
    (sc.live_dir / "planted.py").write_text(ADDER)
    check = by_name(gather_checks(settings, gate=False), "toolbox")
    assert not check.ok and not check.required
    assert "adder (its code is not what the owner approved)" in check.detail
    assert "planted (planted.py was never approved)" in check.detail


def test_doctor_says_an_old_toolbox_in_the_workspace_moves_at_the_next_start(
    settings: Settings,
) -> None:
    (settings.workspace / "tools").mkdir()
    check = by_name(gather_checks(settings, gate=False), "toolbox")
    assert not check.ok and not check.required
    assert "the next start moves the tools" in check.detail and "tools-unapproved" in check.detail


def test_doctor_without_pytest_fails_the_gate_line_plainly(tmp_path: Path) -> None:
    from tests.pythons import python_without_pytest

    home = tmp_path / "home"
    proc = subprocess.run(
        [*python_without_pytest(tmp_path, "shelldon"), "doctor", "--for", "chat"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SHELLDON_HOME": str(home), "PYTHONPATH": ""},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = [ln for ln in proc.stdout.splitlines() if ln.split()[1:2] == ["gate"]]
    assert line.startswith("FAIL gate")
    assert f"pytest is not installed for {sys.executable}" in line
    assert "the tool was not at fault" in line


@pytest.mark.parametrize(
    "base_url", ["http://127.0.0.1:8080/v1", "http://192.168.1.20:11434/v1", "http://llama.lan/v1"]
)
def test_a_keyless_openai_server_here_or_on_the_lan_needs_no_key(home: Path, base_url: str) -> None:
    settings = load_settings(
        environ={
            "SHELLDON_HOME": str(home),
            "SHELLDON_BRAIN_PROVIDER": "openai",
            "SHELLDON_BRAIN_BASE_URL": base_url,
        }
    )
    key = by_name(gather_checks(settings, gate=False), "secret openai_api_key")
    assert key.ok
    assert key.detail == f"not needed: {base_url} is on this machine or the LAN"


def test_a_keyless_public_openai_endpoint_fails(home: Path) -> None:
    settings = load_settings(
        environ={"SHELLDON_HOME": str(home), "SHELLDON_BRAIN_PROVIDER": "openai"}
    )
    key = by_name(gather_checks(settings, gate=False), "secret openai_api_key")
    assert not key.ok and key.required


def test_a_secret_file_others_can_read_is_a_warning(home: Path) -> None:
    token = home / "vault" / "telegram_token"
    token.write_text(GOOD_TOKEN)
    token.chmod(0o644)
    checks = gather_checks(configured(home), for_run=True, gate=False)
    mode = by_name(checks, "secret telegram_token mode")
    assert not mode.ok and not mode.required
    assert mode.detail == f"{token} is readable by others (mode 0644): chmod 600 {token}"
    token.chmod(0o600)
    names = [c.name for c in gather_checks(configured(home), for_run=True, gate=False)]
    assert "secret telegram_token mode" not in names
