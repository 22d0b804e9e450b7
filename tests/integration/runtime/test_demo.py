"""`shelldon demo --yes`: the README's first command tells the whole self-coding story."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.pythons import python_without_pytest


@pytest.mark.slow
def test_demo_walks_the_whole_story(tmp_path: Path) -> None:
    env = dict(os.environ)
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
    assert (tmp_path / "demo" / "toolbox" / "live" / "word_count.py").exists()
    assert "Traceback" not in out + proc.stderr


def demo_env() -> dict[str, str]:
    return {**os.environ}


def last_line(text: str) -> str:
    return text.rstrip("\n").rsplit("\n", 1)[-1]


@pytest.mark.slow
def test_demo_without_input_stops_at_the_first_no_with_status_1(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "shelldon", "demo", "--home", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=120,
        env=demo_env(),
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.count("[y/N] n   (no input)") == 1
    assert last_line(proc.stdout) == (
        "shelldon: the demo stopped at step 2: you said no to the step that needed your "
        "approval; answer y (or run `shelldon demo --yes`)"
    )
    assert "end of the demo" not in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "demo" / "workspace" / "notes.txt").exists()


@pytest.mark.slow
def test_demo_where_pytest_is_missing_says_so_and_stops_at_the_gate(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "find_pytest.py").write_text(
        "import importlib.util, shelldon; print(importlib.util.find_spec('pytest'))"
    )
    check = subprocess.run(
        python_without_pytest(tmp_path, "find_pytest"),
        capture_output=True,
        text=True,
        cwd=probe,
        env={**os.environ, "PYTHONPATH": str(probe)},
    )
    assert check.stdout.strip() == "None", check.stdout + check.stderr  # the control
    proc = subprocess.run(
        [*python_without_pytest(tmp_path, "shelldon"), "demo", "--yes", "--home", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**demo_env(), "PYTHONPATH": ""},
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert f"pytest is not installed for {sys.executable}" in out
    assert "my install needs fixing, not the tool" in out
    assert last_line(out) == (
        "shelldon: the demo stopped at step 3: the tool I wrote did not pass its gate "
        "(my reply above says why)"
    )
    assert "Traceback" not in out + proc.stderr
    assert "live self-coded tools" not in out


@pytest.mark.slow
def test_ctrl_c_at_a_demo_prompt_exits_130_and_leaves_nothing(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "shelldon", "demo", "--home", str(tmp_path / "demo")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=demo_env(),
        start_new_session=True,
    )
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + 60
    while b"[y/N]" not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            assert chunk, seen
            seen += chunk
    assert b"[y/N]" in seen, seen
    members = session_members(proc.pid)
    assert len(members) >= 2  # the main process and the zygote at least
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    try:
        out, err = proc.communicate(timeout=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, (seen + out + err).decode()
    assert last_line(out.decode()) == "shelldon: the demo was interrupted (Ctrl-C)"
    assert b"Traceback" not in seen + out + err
    time.sleep(0.2)
    assert not session_members(proc.pid), "processes of the demo outlived it"


def session_members(sid: int) -> set[int]:
    """Live processes whose session is ``sid`` (zombies are gone for good: not counted)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat[0] != "Z" and int(stat[3]) == sid:
            found.add(int(entry.name))
    return found
