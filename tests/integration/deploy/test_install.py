"""deploy/install.sh and uninstall.sh in a scratch root (--prefix): what they write, with which
modes, that a second run changes nothing, and that uninstall reverses it."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from shelldon.config import load_settings
from shelldon.config_edit import with_owner

REPO = Path(__file__).resolve().parents[3]
INSTALL = REPO / "deploy" / "install.sh"
UNINSTALL = REPO / "deploy" / "uninstall.sh"
SRC = Path("opt/shelldon/src")


def sh(script: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["bash", str(script), *args], input=stdin, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def install(root: Path) -> subprocess.CompletedProcess[str]:
    return sh(INSTALL, "--prefix", str(root), "--skip-venv")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def snapshot(root: Path) -> dict[str, str]:
    """Every path with its mode and content hash (the copied source by name only: other
    people may be editing it while this runs)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        digest = ""
        if path.is_file() and not rel.is_relative_to(SRC):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        out[str(rel)] = f"{mode(path):o} {digest}"
    return out


def test_install_writes_the_service_layout(tmp_path: Path) -> None:
    root = tmp_path / "root"
    proc = install(root)
    unit = root / "etc/systemd/system/shelldon.service"
    assert unit.read_text() == (REPO / "deploy/shelldon.service").read_text()
    assert (root / "etc/systemd/journald.conf.d/shelldon.conf").exists()
    creds = root / "etc/shelldon/credentials"
    assert mode(creds) == 0o700
    for name in ("telegram_token", "anthropic_api_key", "openai_api_key"):
        # LoadCredential= needs every file; empty means "not set".
        assert mode(creds / name) == 0o600 and (creds / name).read_text() == ""
    config = root / "etc/shelldon/config.toml"
    assert mode(config) == 0o640
    settings = load_settings(config, environ={"SHELLDON_HOME": str(root / "var/lib/shelldon")})
    assert settings.telegram.allowed_users == () and settings.brain.provider == "anthropic"
    # `shelldon pair` can set the owner in it, changing nothing else.
    skeleton = config.read_text()
    assert with_owner(skeleton, 1001) == skeleton.replace("= []", "= [1001]", 1)
    assert skeleton.count("= []") == 1
    home = root / "var/lib/shelldon"
    for d in (home, home / "workspace", home / "vault"):
        assert mode(d) == 0o700
    wrapper = root / "usr/local/bin/shelldon"
    assert mode(wrapper) == 0o755 and "/opt/shelldon/venv/bin/shelldon" in wrapper.read_text()
    assert (root / SRC / "pyproject.toml").exists() and not (root / SRC / ".git").exists()
    actions = (root / "install-actions.log").read_text().splitlines()
    assert any(a.startswith("useradd --system") and a.endswith(" shelldon") for a in actions)
    assert "systemctl daemon-reload" in actions
    assert "systemctl enable shelldon.service" in actions
    assert any(a.startswith("chown root:root") and str(creds) in a for a in actions)
    assert any("venv/bin/pip install" in a for a in actions)
    # The owner is told how to put the token in, without it ever going through argv, and
    # to pair with the bot rather than look up their id.
    assert "--credential telegram_token" in proc.stdout
    assert "sudo shelldon pair CODE" in proc.stdout and "userinfobot" not in proc.stdout


def test_install_twice_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    install(root)
    first = snapshot(root)
    install(root)
    assert snapshot(root) == first


def test_reinstall_keeps_the_owners_config_and_credentials(tmp_path: Path) -> None:
    root = tmp_path / "root"
    install(root)
    config = root / "etc/shelldon/config.toml"
    config.write_text("[telegram]\nallowed_users = [1001]\n")
    sh(INSTALL, "--prefix", str(root), "--credential", "telegram_token", stdin="123:abc\n")
    install(root)
    assert config.read_text() == "[telegram]\nallowed_users = [1001]\n"
    assert (root / "etc/shelldon/credentials/telegram_token").read_text() == "123:abc\n"


def test_a_credential_is_stored_root_only_and_never_echoed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    install(root)
    proc = sh(
        INSTALL,
        "--prefix",
        str(root),
        "--credential",
        "anthropic_api_key",
        stdin="sk-ant-SECRET\n",
    )
    stored = root / "etc/shelldon/credentials/anthropic_api_key"
    assert stored.read_text() == "sk-ant-SECRET\n" and mode(stored) == 0o600
    assert "SECRET" not in proc.stdout + proc.stderr
    assert not list(stored.parent.glob(".*"))  # no temporary file left behind


def test_an_unknown_credential_name_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", str(INSTALL), "--prefix", str(tmp_path), "--credential", "ssh_key"],
        input="x\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "unknown credential ssh_key" in proc.stderr


def test_uninstall_keeps_the_pet_and_purge_removes_everything(tmp_path: Path) -> None:
    root = tmp_path / "root"
    install(root)
    (root / "var/lib/shelldon/shelldon.db").write_bytes(b"memories")
    sh(UNINSTALL, "--prefix", str(root))
    assert not (root / "etc/systemd/system/shelldon.service").exists()
    assert not (root / "opt/shelldon").exists()
    assert not (root / "usr/local/bin/shelldon").exists()
    assert (root / "var/lib/shelldon/shelldon.db").read_bytes() == b"memories"
    assert (root / "etc/shelldon/config.toml").exists()
    actions = (root / "install-actions.log").read_text().splitlines()
    assert actions[0] == "systemctl disable --now shelldon.service"
    sh(UNINSTALL, "--prefix", str(root), "--purge")
    left = [p for p in root.rglob("*") if p.is_file()]
    assert left == [root / "install-actions.log"]
    assert "userdel shelldon" in (root / "install-actions.log").read_text()


@pytest.mark.slow
def test_the_readme_steps_turn_doctor_green(tmp_path: Path) -> None:
    root = tmp_path / "root"
    install(root)
    config = root / "etc/shelldon/config.toml"
    env = {
        "PATH": os.environ["PATH"],
        "SHELLDON_HOME": str(root / "var/lib/shelldon"),
        "SHELLDON_CONFIG": str(config),
        "CREDENTIALS_DIRECTORY": str(root / "etc/shelldon/credentials"),
    }

    def doctor() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "shelldon", "doctor"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    fresh = doctor()
    assert fresh.returncode == 1
    for line in ("secret telegram_token", "secret anthropic_api_key", "telegram.allowed_users"):
        assert f"FAIL {line}" in fresh.stdout, fresh.stdout
    token = "123456789:AAHfiqksKZ8WmR2zSjiQ7_v4TMAKdiHm9T0"
    sh(INSTALL, "--prefix", str(root), "--credential", "telegram_token", stdin=token + "\n")
    sh(INSTALL, "--prefix", str(root), "--credential", "anthropic_api_key", stdin="sk-ant-x\n")
    config.write_text(config.read_text().replace("allowed_users = []", "allowed_users = [1001]"))
    ready = doctor()
    assert ready.returncode == 0, ready.stdout
    assert "ok   telegram token shape" in ready.stdout
    assert token not in ready.stdout and "sk-ant-x" not in ready.stdout


def test_an_upgrade_replaces_the_code_copy_and_works_from_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    install(root)
    stale = root / SRC / "shelldon" / "removed_upstream.py"
    stale.write_text("x = 1\n")
    install(root)
    assert not stale.exists()  # the copy is replaced, not merged
    # Re-running the installed copy's own script (as the README's upgrade path may) keeps it.
    sh(root / SRC / "deploy" / "install.sh", "--prefix", str(root), "--skip-venv")
    assert (root / SRC / "pyproject.toml").exists()


def test_install_says_how_to_turn_on_a_memory_controller_the_kernel_left_off(
    tmp_path: Path,
) -> None:
    # Issue 33: a stock Raspberry Pi kernel boots with the memory controller off.
    cgroups = tmp_path / "cgroups"
    note = "add cgroup_enable=memory to the one\nline of /boot/firmware/cmdline.txt"
    for enabled, told in (("0", True), ("1", False)):
        cgroups.write_text(
            f"#subsys_name\thierarchy\tnum_cgroups\tenabled\nmemory\t0\t1\t{enabled}\n"
        )
        env = {**os.environ, "SHELLDON_PROC_CGROUPS": str(cgroups)}
        proc = subprocess.run(
            ["bash", str(INSTALL), "--prefix", str(tmp_path / f"root{enabled}"), "--skip-venv"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (note in proc.stdout) is told, proc.stdout
