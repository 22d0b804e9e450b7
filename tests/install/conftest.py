"""The venv the README's first command builds, built once per test run and shared by every
xdist worker (under a lock, in the run's common temp dir)."""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from .newuser import Conversation, converse, fresh_copy, new_user_env, readme_first_command

# pip may fetch every dependency on a cold cache; the demo itself takes about a second.
README_BOUND_S = 300.0


@dataclass(frozen=True)
class ReadmeRun:
    """The README's first command, run in a fresh copy of the checkout by a new user."""

    command: str
    checkout: Path  # the copy; the README built checkout/.venv
    home: Path  # the user's fresh HOME
    run: Conversation

    @property
    def venv(self) -> Path:
        return self.checkout / ".venv"


def _shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    # Under xdist each worker has base/../popen-gwN; the parent is this run's, shared by all.
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def readme_run(tmp_path_factory: pytest.TempPathFactory) -> ReadmeRun:
    shared = _shared_dir(tmp_path_factory) / "readme-first-command"
    shared.mkdir(exist_ok=True)
    record = shared / "run.json"
    with (shared / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker waits for the one build
        if not record.exists():
            checkout = fresh_copy(shared / "shelldon")
            home = shared / "home"
            env = new_user_env(home)
            # The copy's README is the one under test (the same text as the checkout's).
            command = readme_first_command(checkout / "README.md")
            run = converse(
                ["bash", "-c", command],
                cwd=checkout,
                env=env,
                timeout=README_BOUND_S,
                answer=b"y\n",
            )
            record.write_text(
                json.dumps(
                    {
                        "command": command,
                        "checkout": str(checkout),
                        "home": str(home),
                        "run": run.to_json(),
                    }
                )
            )
        data = json.loads(record.read_text())
    return ReadmeRun(
        data["command"],
        Path(data["checkout"]),
        Path(data["home"]),
        Conversation.from_json(data["run"]),
    )
