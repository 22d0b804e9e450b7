"""`shelldon run` and `chat` with a configuration that cannot work: exit 78 at once, one log
line saying what to fix, nothing left running (an enabled unit then fails once at boot instead
of crash-looping: the unit's RestartPreventExitStatus=78)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

GOOD_TOKEN = "123456789:AAHfiqksKZ8WmR2zSjiQ7_v4TMAKdiHm9T0"


def start(home: Path, command: str, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith("SHELLDON_") and "API_KEY" not in k
    }
    environ |= {
        "SHELLDON_HOME": str(home),
        # Nothing listens here: a start that got as far as polling would hang, not exit.
        "SHELLDON_TELEGRAM_API_BASE": "http://127.0.0.1:9",
        **env,
    }
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "shelldon", command],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
        stdin=subprocess.DEVNULL,
    )
    return proc, time.monotonic() - started


def events(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def errors(stdout: str) -> list[dict[str, object]]:
    return [e for e in events(stdout) if e["level"] in ("error", "critical")]


@pytest.mark.parametrize(
    ("token", "says"),
    [
        ("my-bot-password-1234", "does not look like one from @BotFather"),
        ("", "no bot token configured"),  # install.sh's empty credential file
    ],
)
def test_run_with_an_unusable_token_exits_78_at_once_with_one_line(
    home: Path, token: str, says: str
) -> None:
    (home / "vault" / "telegram_token").write_text(token + "\n")
    proc, took = start(home, "run", SHELLDON_TELEGRAM_ALLOWED_USERS="1001")
    assert proc.returncode == 78, proc.stdout + proc.stderr
    assert took < 15
    [line] = errors(proc.stdout)
    assert line["event"] == "start_refused"
    assert says in str(line["reason"])
    assert token == "" or token not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not any(e["event"] == "service_ready" for e in events(proc.stdout))


def test_run_without_an_api_key_says_no_api_key_configured(home: Path) -> None:
    (home / "vault" / "telegram_token").write_text(GOOD_TOKEN)
    proc, _ = start(
        home, "run", SHELLDON_TELEGRAM_ALLOWED_USERS="1001", SHELLDON_BRAIN_PROVIDER="anthropic"
    )
    assert proc.returncode == 78, proc.stdout + proc.stderr
    [line] = errors(proc.stdout)
    assert str(line["reason"]).startswith("no API key configured: provider 'anthropic'")
    assert "refused my credentials" not in proc.stdout + proc.stderr


def test_chat_without_an_api_key_tells_the_terminal(home: Path) -> None:
    proc, _ = start(home, "chat", SHELLDON_BRAIN_PROVIDER="anthropic")
    assert proc.returncode == 78, proc.stdout + proc.stderr
    assert proc.stderr.startswith("shelldon: no API key configured: provider 'anthropic'")
    assert len(proc.stderr.splitlines()) == 1


def test_a_keyless_local_openai_server_is_not_refused(home: Path) -> None:
    proc, _ = start(
        home,
        "chat",
        SHELLDON_BRAIN_PROVIDER="openai",
        SHELLDON_BRAIN_BASE_URL="http://127.0.0.1:9/v1",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no API key" not in proc.stderr


@pytest.mark.slow
def test_run_with_nobody_allowed_starts_and_warns_once(home: Path, tmp_path: Path) -> None:
    from tests.fakes.fake_telegram import TEST_TOKEN

    from .harness import ThreadedFakeTelegram

    tg = ThreadedFakeTelegram()
    (home / "vault" / "telegram_token").write_text(TEST_TOKEN + "\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SHELLDON_")},
        "SHELLDON_HOME": str(home),
        "SHELLDON_TELEGRAM_API_BASE": tg.api_base,
    }
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "shelldon", "run"], env=env, stdout=out, stderr=out
        )
    try:
        tg.wait(lambda: tg.fake.commands, timeout=30)  # it polls: the warning did not stop it
        proc.terminate()
        assert proc.wait(10) == 0  # SIGTERM is systemd's clean stop
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        tg.close()
    warnings = [e for e in events(log.read_text()) if e["event"] == "start_warning"]
    assert len(warnings) == 1
    assert "allowed_users is empty: nobody can talk to the pet" in str(warnings[0]["warning"])


def test_an_unusable_database_stops_the_start_with_one_line(home: Path) -> None:
    # The toolbox is checked against the approvals in the database before anything forks.
    (home / "shelldon.db").write_bytes(b"not a database " * 100)
    proc, took = start(home, "chat")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"shelldon: cannot use database {home / 'shelldon.db'}: file is not a database"
    ]
    assert took < 30
