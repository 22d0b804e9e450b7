"""The command line keeps the README's promises, tried as a user would: subprocess runs of the
installed `shelldon` console script. `--config` before or after every command, a --help per
command that says what it will use, and the README's exit-status table walked row by row."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .harness import chat_service

REPO = Path(__file__).resolve().parents[3]
SHELLDON = str(Path(sys.executable).with_name("shelldon"))
COMMANDS = (
    ["doctor"],
    ["run"],
    ["chat"],
    ["tools"],
    ["tools", "list"],
    ["tools", "show", "x"],
    ["tools", "restore", "x"],
    ["tools", "export", "out.tar.gz"],
    ["tools", "import", "in.tar.gz"],
    ["backup", "out.tar.gz"],
    ["restore", "in.tar.gz"],
    ["pair", "ABCD-EFGH"],
)


def shelldon(
    *args: str, home: Path, stdin: str = "", timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SHELLDON_")}
    environ |= {"SHELLDON_HOME": str(home), **env}
    return subprocess.run(
        [SHELLDON, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ,
        cwd=home.parent,
    )


def test_the_command_is_the_installed_console_script() -> None:
    assert Path(SHELLDON).is_file() and os.access(SHELLDON, os.X_OK)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_config_works_before_and_after_every_command(home: Path, command: list[str]) -> None:
    missing = str(home / "nope.toml")
    for args in (["--config", missing, *command], [*command, "--config", missing]):
        proc = shelldon(*args, home=home)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert proc.stderr == f"shelldon: config: {missing}: config file does not exist\n"


def test_the_demo_refuses_a_config_it_would_not_use(home: Path) -> None:
    proc = shelldon("demo", "--config", "x.toml", home=home)
    assert proc.returncode == 2
    assert "the demo writes a config of its own" in proc.stderr


@pytest.mark.parametrize("command", [*COMMANDS[:4], ["demo"]], ids=" ".join)
def test_each_command_has_a_help_that_says_what_it_uses(home: Path, command: list[str]) -> None:
    proc = shelldon(*command, "--help", home=home)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    usage, description = text.split("\n\n")[:2]
    assert usage.startswith(f"usage: shelldon {command[0]}")
    assert len(description.split()) >= 12, description  # says what it does
    assert "exit status:" in text
    if command != ["demo"]:
        assert "--config FILE" in text
        assert f"home:   {home}" in text
        assert f"config: {home / 'config.toml'} (not there: defaults in use)" in text


def readme_exit_statuses() -> dict[int, str]:
    text = (REPO / "README.md").read_text()
    section = text.split("### Exit statuses", 1)[1].split("\n#", 1)[0]
    return {int(m[1]): m[2] for m in re.finditer(r"^\| (\d+) \| (.+?) \|$", section, re.M)}


def test_the_readme_table_is_the_one_the_command_uses() -> None:
    from shelldon.cli import EXIT_STATUSES

    assert sorted(readme_exit_statuses()) == [n for n, _ in EXIT_STATUSES]


@pytest.mark.slow
def test_every_status_in_the_readme_table_is_what_its_case_exits_with(home: Path) -> None:
    seen: dict[int, str] = {}

    def case(status: int, why: str, proc: subprocess.CompletedProcess[str] | int) -> None:
        code = proc if isinstance(proc, int) else proc.returncode
        assert code == status, (why, proc)
        seen[status] = why

    case(0, "--version", shelldon("--version", home=home))
    case(0, "doctor for chat on a fresh home", shelldon("doctor", "--for", "chat", home=home))
    case(1, "a tool that is not there", shelldon("tools", "show", "nosuch", home=home))
    case(1, "a demo nobody answers", shelldon("demo", "--home", str(home / "d"), home=home))
    case(2, "an unknown option", shelldon("run", "--bogus", home=home))
    case(2, "no command", shelldon(home=home))
    case(2, "a misspelt override", shelldon("doctor", home=home, SHELLDON_BRAIN_PROVDER="x"))
    (home / "config.toml").write_text("[limits]\nstrike_threshold = 'x'\n")
    case(2, "a config typo", shelldon("doctor", home=home))
    (home / "config.toml").unlink()
    case(78, "run without a token", shelldon("run", home=home))
    case(
        78,
        "chat without an API key",
        shelldon("chat", home=home, SHELLDON_BRAIN_PROVIDER="anthropic"),
    )
    case(130, "Ctrl-C in chat", interrupted_chat(home))
    assert sorted(seen) == sorted(readme_exit_statuses())


def interrupted_chat(home: Path) -> int:
    with chat_service(home, command=(SHELLDON,)) as proc:
        time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        return proc.wait(timeout=10)
