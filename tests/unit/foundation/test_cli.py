"""The command line: --version, and doctor on a fresh machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shelldon import __version__


def shelldon(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "SHELLDON_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "shelldon", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )


def test_version(tmp_path: Path) -> None:
    proc = shelldon("--version", home=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"shelldon {__version__}"


def test_doctor_on_a_fresh_machine_reports_each_point(tmp_path: Path) -> None:
    proc = shelldon("doctor", home=tmp_path / "new-home")
    assert proc.returncode == 0, proc.stdout
    out = proc.stdout
    for expected in (
        "python",
        "config",
        "none (defaults in use)",
        "home",
        "secret telegram_token",
        "missing",
        "all good",
    ):
        assert expected in out


def test_no_command_prints_help_and_exits_2(tmp_path: Path) -> None:
    proc = shelldon(home=tmp_path)
    assert proc.returncode == 2
    assert "usage: shelldon" in proc.stdout
