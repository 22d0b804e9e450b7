"""The new-user harness itself: it answers prompts as they appear and bounds every wait."""

from __future__ import annotations

import os
import time
from pathlib import Path

from .newuser import REPO, converse, fresh_copy, new_user_env, readme_first_command

ASKER = r"""
for step in 1 2; do
  printf 'step %s [y/N] ' "$step"
  read -r answer
  echo "got $answer"
done
"""


def test_converse_answers_each_prompt_when_it_appears(tmp_path: Path) -> None:
    env = new_user_env(tmp_path / "home")
    run = converse(["bash", "-c", ASKER], cwd=tmp_path, env=env, timeout=30, answer=b"y\n")
    assert run.returncode == 0 and run.answered == 2, run.transcript()
    assert run.stdout == "step 1 [y/N] got y\nstep 2 [y/N] got y\n"


def test_converse_bounds_a_hang_and_kills_its_session(tmp_path: Path) -> None:
    pidfile = tmp_path / "child"
    hang = f"sleep 300 & echo $! > {pidfile}; wait"
    run = converse(["bash", "-c", hang], cwd=tmp_path, env=dict(os.environ), timeout=1)
    assert run.timed_out and "still running after 1 s" in run.how_it_ended()
    stat = Path(f"/proc/{int(pidfile.read_text())}/stat")
    deadline = time.monotonic() + 5
    while stat.exists() and _state(stat) != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not stat.exists() or _state(stat) == "Z", "the hung command's child survived"


def _state(stat: Path) -> str:
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def test_new_user_env_has_nothing_of_the_dev_venv(tmp_path: Path) -> None:
    env = new_user_env(tmp_path / "home")
    assert env["HOME"] == str(tmp_path / "home")
    assert not {"VIRTUAL_ENV", "PYTHONPATH"} & env.keys()
    assert not [k for k in env if k.startswith("SHELLDON_")]
    assert str(REPO / ".venv" / "bin") not in env["PATH"].split(os.pathsep)


def test_fresh_copy_has_the_sources_and_nothing_ignored(tmp_path: Path) -> None:
    copy = fresh_copy(tmp_path / "copy")
    assert readme_first_command(copy / "README.md") == readme_first_command()
    assert (copy / "pyproject.toml").exists() and (copy / "deploy" / "install.sh").exists()
    assert os.access(copy / "deploy" / "install.sh", os.X_OK)
    assert not (copy / ".venv").exists() and not list(copy.glob("*.egg-info"))
