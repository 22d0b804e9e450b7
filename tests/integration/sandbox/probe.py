"""What the sandbox tests run inside a confined worker or gate: a self-coded probe tool that
tries what a hostile tool would and reports each errno, and a stand-in TurnActor to drive it.

Attack inspiration: the seed's admission that python_eval "is not a sandbox"; Landlock's and
bubblewrap's own test suites (reads outside the allowed tree, writes to a read-only bind);
CVE-style ptrace / /proc/<pid>/mem reads of a privileged parent; issue 12 (any process that can
open a TCP socket to 127.0.0.1 can talk to the actor holding the API key); issue 17 (a FREE
self-coded tool wrote a module and a manifest into the live tools, and a gate test hard-linked
another pending tool's staged file, when the toolbox lived in the workspace).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shelldon.config import Settings
from shelldon.contracts import Completion, Job, Result, Role, ToolCall, Usage
from shelldon.store import Store
from shelldon.toolbox.manifest import code_hash
from shelldon.toolbox.toolbox import Toolbox
from shelldon.worker.handle import WorkerHandle
from tests.pids import running

ATTACKS = """\
import ctypes
import errno
import json
import os
import socket


def _try(fn):
    try:
        fn()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "allowed"


def _read(path):
    with open(path, "rb") as fh:
        fh.read(1)


def _write(path):
    with open(path, "w") as fh:
        fh.write("x")


def _open(path):
    os.close(os.open(path, os.O_RDONLY))


def _open_for_writing(path):
    # Creates a missing file but never truncates one: an allowed attempt changes no tool.
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))


def _connect(port):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(2)
        sock.connect(("127.0.0.1", port))
    finally:
        sock.close()


def _ptrace(pid):
    libc = ctypes.CDLL(None, use_errno=True)
    # PTRACE_SEIZE attaches without stopping the tracee (ATTACH sends a SIGSTOP that, if it
    # lands after the detach, leaves the parent — a test worker — stopped for good).
    if libc.ptrace(0x4206, pid, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "ptrace")
    libc.ptrace(17, pid, 0, 0)  # PTRACE_DETACH


def _host_ppid():
    # Inside a PID namespace getppid() says 0 (or 1), but /proc is the host's and names the
    # parent all the same: what an attacker would read.
    try:
        with open("/proc/self/status") as fh:
            return int(next(line for line in fh if line.startswith("PPid:")).split()[1])
    except (OSError, StopIteration, ValueError):
        return 0


def _signal(pid):
    os.kill(pid, 0)  # the permission check of any signal, without sending one


def _renice(pid):
    os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, pid))


def _prlimit(pid):
    import resource

    resource.prlimit(pid, resource.RLIMIT_NOFILE)


def _pidfd_signal(pid):
    import signal

    fd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY)
    try:
        signal.pidfd_send_signal(fd, 0)
    finally:
        os.close(fd)


def process_attacks(name, pid):
    # Everything a process of the same uid may do to another one, tried on pid.
    return {
        f"signal_{name}": _try(lambda: _signal(pid)),
        f"renice_{name}": _try(lambda: _renice(pid)),
        f"prlimit_{name}": _try(lambda: _prlimit(pid)),
        f"pidfd_signal_{name}": _try(lambda: _pidfd_signal(pid)),
        f"ptrace_{name}": _try(lambda: _ptrace(pid)),
    }


def attack(targets):
    t = json.loads(targets)
    ppid = _host_ppid() or os.getppid()
    out = {
        "read_vault": _try(lambda: _read(t["vault"])),
        "read_database": _try(lambda: _read(t["database"])),
        "read_ssh_key": _try(lambda: _read(t["ssh_key"])),
        "read_shadow": _try(lambda: _read("/etc/shadow")),
        "write_outside": _try(lambda: _write(t["outside"])),
        "ptrace_parent": _try(lambda: _ptrace(ppid)),
        "open_parent_mem": _try(lambda: _open(f"/proc/{ppid}/mem")),
        "read_parent_environ": _try(lambda: _read(f"/proc/{ppid}/environ")),
        "write_inside": _try(lambda: _write(t["inside"])),
        "read_inside": _try(lambda: _read(t["inside"])),
    }
    for port in t["ports"]:
        out[f"connect_{port}"] = _try(lambda port=port: _connect(port))
    for name, path in t.get("reads", {}).items():
        out[name] = _try(lambda path=path: _read(path))
    for name, path in t.get("writes", {}).items():
        out[name] = _try(lambda path=path: _open_for_writing(path))
    for name, (source, target) in t.get("links", {}).items():
        out[name] = _try(lambda source=source, target=target: os.link(source, target))
    for name, pid in t.get("processes", {}).items():
        out.update(process_attacks(name, pid))
    return out
"""

PROBE_TOOL = (
    ATTACKS
    + """

DESCRIPTION = "Try what a hostile tool would and report each errno."
PARAMS_SCHEMA = {"type": "object", "properties": {"targets": {"type": "string"}}}


def run(targets):
    return json.dumps(attack(targets))
"""
)

USER_HOME_KEY = ".ssh/id_rsa"


def targets(
    settings: Settings,
    user_home: Path,
    outside: Path,
    ports: list[int],
    inside: str,
    toolbox: dict[str, Any] | None = None,
    processes: dict[str, int] | None = None,
) -> str:
    """The JSON argument of the probe: what to attack and where it may write; ``toolbox``
    adds named ``reads``, ``writes`` and ``links`` (see ``toolbox_attacks``); ``processes``
    names processes outside the turn to signal, renice, prlimit and ptrace."""
    return json.dumps(
        {
            "vault": str(settings.vault / "x"),
            "database": str(settings.database),
            "ssh_key": str(user_home / USER_HOME_KEY),
            "outside": str(outside),
            "inside": inside,
            "ports": ports,
            "processes": processes or {},
            **(toolbox or {}),
        }
    )


def toolbox_attacks(settings: Settings, live_tool: str, link_to: str) -> dict[str, Any]:
    """What a tool that wants to change what runs later tries on the toolbox: plant a module and
    a manifest in the live tools, write a live tool, read or write the rest of the toolbox, and
    hard-link a live tool to somewhere it can write."""
    live = settings.live_tools
    return {
        "reads": {
            "read_live_tool": str(live / f"{live_tool}.py"),
            "read_kept_test": str(settings.toolbox / "tests" / f"test_{live_tool}.py"),
        },
        "writes": {
            "plant_live_module": str(live / "planted.py"),
            "write_live_manifest": str(live / "manifest.json"),
            "write_live_tool": str(live / f"{live_tool}.py"),
            "plant_in_staging": str(settings.toolbox / "staging" / "planted.py"),
        },
        "links": {"link_live_tool": [str(live / f"{live_tool}.py"), link_to]},
    }


def plant_secrets(settings: Settings, user_home: Path) -> None:
    """A vault secret, a database and a fake ~/.ssh/id_rsa, all readable to this (root) user."""
    settings.vault.mkdir(parents=True, exist_ok=True)
    (settings.vault / "x").write_text("the-vault-secret\n")
    with Store(settings.database) as store:  # a real one: the toolbox keeps approvals there
        store.conversation.remember("the-database-secret", 0.0)
    key = user_home / USER_HOME_KEY
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY----- fake\n")


def promote(settings: Settings, name: str, code: str) -> None:
    """Make ``code`` a live self-coded tool the owner approved, with a kept test (the gate is
    not the point here)."""
    with Store(settings.database) as store:
        sc = Toolbox.from_settings(settings, store)
        test = f"from {name} import run\n"
        sc.promote(name, code, test, expected_hash=code_hash(code), replace=name in sc.live())


def calls(*tool_calls: ToolCall) -> Completion:
    """A completion asking for ``tool_calls``."""
    return Completion(text="", tool_calls=tool_calls, usage=Usage(1, 1))


def say(text: str) -> Completion:
    """A final completion."""
    return Completion(text=text, usage=Usage(1, 1))


def converse(
    handle: WorkerHandle,
    answers: list[Completion],
    timeout: float = 10.0,
    *,
    mid_turn: Callable[[Job], None] | None = None,
) -> tuple[list[Job], Result]:
    """Play the TurnActor: answer each Job with the next completion until the Result;
    ``mid_turn`` sees each Job before it is answered (the turn still running)."""
    jobs: list[Job] = []
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        ready, _, _ = select.select([handle.sock], [], [], max(0.0, until - time.monotonic()))
        if not ready:
            break
        for frame in handle.read_frames():
            if isinstance(frame, Result):
                return jobs, frame
            if not isinstance(frame, Job):
                continue  # ToolStarted announcements need no answer
            jobs.append(frame)
            if mid_turn is not None:
                mid_turn(frame)
            handle.send(answers.pop(0))
        if handle.eof:
            break
    raise AssertionError(f"no Result from worker {handle.pid} (jobs={len(jobs)})")


def outputs(job: Job) -> dict[str, tuple[bool, str]]:
    """Each tool result in ``job`` by call id: (ok, the payload inside its framing)."""
    found: dict[str, tuple[bool, str]] = {}
    for message in job.messages:
        if message.role is Role.TOOL and message.tool_call_id:
            content = message.content
            inner = content.split("\n", 1)[1].rsplit("\n", 1)[0] if "\n" in content else content
            found[message.tool_call_id] = (not message.is_error, inner)
    return found


def finish(handle: WorkerHandle) -> int | None:
    """Wait (bounded) for the worker's exit, then close its handle."""
    until = time.monotonic() + 5
    code = handle.reap(block=False)
    while code is None and time.monotonic() < until:
        time.sleep(0.005)
        code = handle.reap(block=False)
    handle.kill()
    handle.reap(block=True)
    with contextlib.suppress(OSError):
        handle.close()
    return code


def load(payload: str) -> dict[str, Any]:
    """The probe's JSON report."""
    data = json.loads(payload)
    assert isinstance(data, dict), payload
    return data


def pid_alive(pid: int) -> bool:
    """Is ``pid`` running (a zombie counts as gone)?"""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pid: int, timeout: float = 3.0) -> bool:
    """True once ``pid`` has gone within ``timeout``."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if not pid_alive(pid):
            return True
        time.sleep(0.01)
    return not pid_alive(pid)


def reap_quietly(pid: int) -> None:
    """Reap ``pid`` if it is our child (it usually is not)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def wait_none_running(*argv: str, timeout: float = 3.0) -> bool:
    """True once no process runs ``argv`` (within ``timeout``); zombies count as gone."""
    until = time.monotonic() + timeout
    while True:
        alive = [p for p in running(*argv) if pid_alive(p)]
        if not alive:
            return True
        if time.monotonic() > until:
            return False
        time.sleep(0.01)
