"""`shelldon demo --yes`: the README's first command tells the whole self-coding story."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .harness import free_port


@pytest.mark.slow
def test_demo_walks_the_whole_story(tmp_path: Path) -> None:
    env = {**os.environ, "SHELLDON_ACTORS_ADMIN_PORT": str(free_port())}
    proc = subprocess.run(
        [sys.executable, "-m", "shelldon", "demo", "--yes", "--home", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    steps = [
        "you › What time is it?",
        "My clock (get_time) says 20",
        "you › Please save a note for me.",
        "— approve?",
        "↳ write_file",
        "[y/N] y",
        "Approved",
        "Done: ",
        "notes.txt",
        "you › Can you make yourself a tool that counts words?",
        "passed its test — add it to my toolbox?",
        "gate passed: 2 test(s)",
        "Added word_count",
        "you › How many words are in",
        "word_count tool counted 5 words",
        "— end of the demo —",
        "live self-coded tools: word_count",
    ]
    position = 0
    for step in steps:
        found = out.find(step, position)
        assert found >= 0, f"{step!r} missing (or out of order) in:\n{out}"
        position = found + len(step)
    assert (tmp_path / "demo" / "workspace" / "notes.txt").read_text() == "hello from shelldon\n"
    assert (tmp_path / "demo" / "workspace" / "tools" / "word_count.py").exists()
    assert "Traceback" not in out + proc.stderr


@pytest.mark.slow
def test_demo_without_input_answers_no_and_ends(tmp_path: Path) -> None:
    env = {**os.environ, "SHELLDON_ACTORS_ADMIN_PORT": str(free_port())}
    proc = subprocess.run(
        [sys.executable, "-m", "shelldon", "demo", "--home", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("[y/N] n   (no input)") == 2
    assert "— end of the demo —" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "demo" / "workspace" / "notes.txt").exists()
