"""What a new user has: a fresh copy of the checkout, a fresh HOME, a shell without the dev venv,
and a terminal they answer ``[y/N]`` at. Used by the tests that run the README and the installer
literally (tests/install)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROMPT = b"[y/N] "

# The story `shelldon demo` tells, in order (the lines tests/integration/runtime/test_demo.py
# checks through the dev venv; here they must come out of a venv a new user built).
STORY = (
    "My clock (get_time) says",
    "Approved",
    "passed its test",
    "Added word_count",
    "word_count tool counted 5 words",
    "— end of the demo —",
    "live self-coded tools: word_count",
)
NEVER = ("No module named", "Traceback")


def readme_first_command(readme: Path = REPO / "README.md") -> str:
    """The command after "# set up and run the demo" in README.md's first ```sh block."""
    text = readme.read_text(encoding="utf-8")
    block = re.search(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert block, "README.md has no ```sh block"
    lines = block.group(1).splitlines()
    for i, line in enumerate(lines):
        if line.startswith("# set up and run the demo"):
            command = next((c.strip() for c in lines[i + 1 :] if c.strip()), "")
            assert command and not command.startswith("#"), f"no command after {line!r}"
            return command
    raise AssertionError("README.md's first ```sh block has no '# set up and run the demo' line")


def fresh_copy(dest: Path) -> Path:
    """The checkout as a clone of it would be, from the working tree: every file git tracks
    (with its uncommitted edits) plus new files not yet added, nothing git ignores (.venv,
    *.egg-info, caches). Untracked files are included so a module being written right now
    and already imported by tracked code does not make the copy half a checkout."""
    ls_files = ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    listed = subprocess.run(
        ["git", "-c", "safe.directory=*", *ls_files],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    dest.mkdir(parents=True)
    for rel in sorted(set(filter(None, listed.split("\0")))):
        src = REPO / rel
        if not src.is_symlink() and not src.is_file():
            continue  # deleted in the working tree, not yet in the index
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, target)
    return dest


def _real_pip_cache() -> str:
    if os.environ.get("PIP_CACHE_DIR"):
        return os.environ["PIP_CACHE_DIR"]
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(cache) / "pip")


def _real_pip_config() -> str | None:
    """The machine's pip configuration of the real user (which index or mirror reaches the
    registry), if there is one: a fresh HOME must not cut the way to PyPI."""
    if os.environ.get("PIP_CONFIG_FILE"):
        return None  # kept as it is
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    for candidate in (Path(config) / "pip" / "pip.conf", Path.home() / ".pip" / "pip.conf"):
        if candidate.is_file():
            return str(candidate)
    return None


def _is_venv_bin(entry: str) -> bool:
    """A venv's bin directory (the dev venv's, or the one running these tests)."""
    path = Path(entry or ".").resolve()
    dev = (REPO / ".venv" / "bin").resolve()
    return path in (dev, Path(sys.prefix, "bin").resolve()) or (path.parent / "pyvenv.cfg").exists()


def new_user_env(home: Path) -> dict[str, str]:
    """This environment as a new user's shell would have it: a fresh HOME, caches and temp
    dir, and nothing of the dev venv or of this test run (VIRTUAL_ENV, a venv's bin on PATH,
    PYTHONPATH, SHELLDON_*, PYTEST_*). pip keeps the real user's cache (no refetch on every
    run) and configuration (the way to the registry)."""
    for sub in ("", ".cache", ".config", "tmp"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    drop = {"VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"}
    drop |= {"PYTHONUSERBASE", "CONDA_PREFIX", "CREDENTIALS_DIRECTORY", "XDG_CONFIG_HOME"}
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not k.startswith(("SHELLDON_", "PYTEST_", "_PYTEST"))
    }
    path = env.get("PATH", os.defpath).split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in path if not _is_venv_bin(p))
    env["PIP_CACHE_DIR"] = _real_pip_cache()
    if config := _real_pip_config():
        env["PIP_CONFIG_FILE"] = config
    env["HOME"] = str(home)
    env["XDG_CACHE_HOME"] = str(home / ".cache")
    env["XDG_CONFIG_HOME"] = str(home / ".config")
    env["TMPDIR"] = str(home / "tmp")  # the demo's default home lands here, cleaned up with it
    return env


@dataclass
class Conversation:
    """A command run to its end (or its bound) with a person answering its prompts."""

    returncode: int | None  # None: still running at the bound, then killed
    stdout: str
    stderr: str
    answered: int  # [y/N] prompts answered
    seconds: float
    bound: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def how_it_ended(self) -> str:
        if self.timed_out:
            return f"still running after {self.bound:.0f} s (killed)"
        return f"exit status {self.returncode} after {self.seconds:.1f} s"

    def transcript(self) -> str:
        return f"--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: str) -> Conversation:
        return cls(**json.loads(text))


def converse(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float, answer: bytes = b""
) -> Conversation:
    """Run ``argv``, reading its output as it comes; each time a ``[y/N]`` prompt appears on
    its stdout, type ``answer`` (when given). Bounded by ``timeout`` seconds in all: what is
    left of its session then is SIGKILLed (always, at the end, for stray children)."""
    started = time.monotonic()
    deadline = started + timeout
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE if answer else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    sinks = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    answered = 0
    returncode: int | None = None
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        for fd in sinks:
            sel.register(fd, selectors.EVENT_READ)
        try:
            while sel.get_map():
                now = time.monotonic()
                # Once it has exited, a stray child holding the pipes gets 2 s, no more.
                if now >= deadline or (exited_at is not None and now - exited_at > 2):
                    break
                for key, _ in sel.select(min(deadline - now, 0.5)):
                    data = os.read(key.fd, 65536)
                    if data:
                        sinks[key.fd].extend(data)
                    else:
                        sel.unregister(key.fd)
                if exited_at is None and proc.poll() is not None:
                    exited_at = time.monotonic()
                while answer and answered < out.count(PROMPT):
                    assert proc.stdin is not None
                    with contextlib.suppress(BrokenPipeError):
                        proc.stdin.write(answer)
                        proc.stdin.flush()
                    answered += 1
            with contextlib.suppress(subprocess.TimeoutExpired):
                returncode = proc.wait(max(0.0, deadline - time.monotonic()))
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(BrokenPipeError):
                        stream.close()
    return Conversation(
        returncode,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
        answered,
        round(time.monotonic() - started, 1),
        timeout,
    )


def story_problems(run: Conversation) -> list[str]:
    """Everything wrong with a demo run, as a new user would see it ([] when all is well)."""
    problems = []
    if run.returncode != 0:
        problems.append(run.how_it_ended())
    position = 0
    for line in STORY:
        found = run.stdout.find(line, position)
        if found < 0:
            problems.append(f"{line!r} missing (or out of order)")
        else:
            position = found + len(line)
    problems += [f"{bad!r} in the output" for bad in NEVER if bad in run.stdout + run.stderr]
    return problems


def demo_home(stdout: str) -> Path | None:
    """The home the demo announced on its first line ("shelldon demo — home DIR, logs ...")."""
    found = re.search(r"^shelldon demo — home (.+?), logs ", stdout, re.MULTILINE)
    return Path(found.group(1)) if found else None


def dev_only_distributions() -> set[str]:
    """The names in pyproject's dev extra that are not runtime dependencies (normalized)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = {_dist_name(r) for r in project["dependencies"]}
    return {_dist_name(r) for r in project["optional-dependencies"]["dev"]} - runtime


def _dist_name(requirement: str) -> str:
    name = re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_distributions(python: Path, env: dict[str, str]) -> set[str]:
    """The distributions installed for ``python`` (normalized names)."""
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps([d.metadata['Name'] for d in m.distributions()]))"
    )
    proc = subprocess.run(
        [str(python), "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return {_dist_name(n) for n in json.loads(proc.stdout)}


def imports(python: Path, module: str, env: dict[str, str]) -> bool:
    """Whether ``python`` can import ``module``."""
    proc = subprocess.run(
        [str(python), "-c", f"import {module}"], env=env, capture_output=True, timeout=60
    )
    return proc.returncode == 0


def clone_venv(venv: Path, dest: Path) -> Path:
    """A copy of ``venv`` at ``dest`` that works on its own: scripts' shebangs repointed (the
    copy shares the original's editable source checkout). Costs a second, not a pip install."""
    shutil.copytree(venv, dest, symlinks=True)
    old, new = f"#!{venv}/bin/".encode(), f"#!{dest}/bin/".encode()
    for script in (dest / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if data.startswith(old):
                script.write_bytes(new + data[len(old) :])
    return dest
