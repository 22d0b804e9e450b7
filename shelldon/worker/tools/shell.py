"""RISKY ``run_shell``, and ``run_bounded``: the runner every spawned tool child goes through.

``run_bounded`` starts the child in its own session and process group with the RLIMIT preexec,
stdin on /dev/null, stdout and stderr into one pipe read with a byte cap. When the child exits
(or its deadline passes: TERM, a short grace, then KILL) the whole group is SIGKILLed, and then
every descendant that escaped the group (``setsid``, double forks, daemons) is found and killed
too: the caller is made a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so orphans are
re-parented to it instead of to init, and ``/proc/*/stat`` shows who they are. Everything it
started is reaped before it returns.

Descendants the caller already had when a run started are left alone; anything new is the
run's. So one process runs one ``run_bounded`` at a time, as the worker runs its tools.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from shelldon.contracts import Tier, ToolDefinition
from shelldon.core.limits import ProcessLimits, preexec_with_limits
from shelldon.worker.tools.registry import ToolContext, ToolError, ToolSpec

log = structlog.get_logger(__name__)

PR_SET_CHILD_SUBREAPER = 36
TERM_GRACE_S = 0.5
# A fork loop could keep adding children while the sweep kills them; give up after this many
# rounds (the RLIMITs and the turn watchdog remain) rather than spin forever.
SWEEP_ROUNDS = 50
_READ_SIZE = 64 * 1024
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How a bounded run ended: exit status (None if killed at the deadline), capped output."""

    returncode: int | None
    output: bytes
    truncated: bool
    timed_out: bool
    swept: int  # descendants killed after they left the process group


def become_subreaper() -> bool:
    """Make the calling process adopt its orphaned descendants; False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            log.warning("subreaper_not_set", errno=ctypes.get_errno())
            return False
    except (OSError, AttributeError) as exc:
        log.warning("subreaper_not_set", error=str(exc))
        return False
    return True


@dataclass(frozen=True, slots=True)
class ProcEntry:
    """One process: pid, parent, and start time (which tells a reused pid apart)."""

    pid: int
    ppid: int
    start: int


def _read_entry(pid: int) -> ProcEntry | None:
    """One process's line of the table, or None if it is gone."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        raw = os.read(fd, 4096)  # os.read, not open(): the table is read twice per run
    except OSError:
        return None
    finally:
        os.close(fd)
    # comm may hold spaces and parentheses: the fields start after the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    return ProcEntry(pid, int(fields[1]), int(fields[19]))


def process_table() -> dict[int, ProcEntry]:
    """Every visible process from ``/proc/*/stat``; processes that vanish mid-read are skipped."""
    table: dict[int, ProcEntry] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            entry = _read_entry(int(name))
            if entry is not None:
                table[entry.pid] = entry
    return table


def descendants(root: int, table: Mapping[int, ProcEntry]) -> list[ProcEntry]:
    """All processes below ``root`` in ``table``, parents before children."""
    children: dict[int, list[ProcEntry]] = {}
    for entry in table.values():
        children.setdefault(entry.ppid, []).append(entry)
    found: list[ProcEntry] = []
    queue = [root]
    while queue:
        for entry in children.get(queue.pop(0), []):
            found.append(entry)
            queue.append(entry.pid)
    return found


def sweep_descendants(before: frozenset[tuple[int, int]]) -> int:
    """SIGKILL and reap every descendant of this process not in ``before`` (pid, start pairs).

    Direct children are reaped by pid (never ``waitpid(-1)``, which would steal other owners'
    children); grandchildren become direct children as their parents die, so it loops.
    """
    me = os.getpid()
    killed: set[tuple[int, int]] = set()
    for _round in range(SWEEP_ROUNDS):
        table = process_table()
        strays = [e for e in descendants(me, table) if (e.pid, e.start) not in before]
        if not strays:
            return len(killed)
        for entry in strays:
            _kill_exactly(entry)
            killed.add((entry.pid, entry.start))
        for entry in strays:
            if entry.ppid == me:
                _reap(entry.pid, timeout_s=1.0)
    log.warning("sweep_gave_up", rounds=SWEEP_ROUNDS, killed=len(killed))
    return len(killed)


def _kill_exactly(entry: ProcEntry) -> None:
    """SIGKILL the process ``entry`` describes and no other, even if its pid was reused since the
    table was read: a pidfd pins one process, and its start time must still match."""
    try:
        pidfd = os.pidfd_open(entry.pid)
    except (ProcessLookupError, AttributeError, OSError):
        return
    try:
        current = _read_entry(entry.pid)
        if current is not None and current.start == entry.start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)


def _reap(pid: int, *, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done or time.monotonic() > deadline:
            return
        time.sleep(0.002)


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _snapshot() -> frozenset[tuple[int, int]]:
    me = os.getpid()
    return frozenset((e.pid, e.start) for e in descendants(me, process_table()))


def run_bounded(
    argv: Sequence[str],
    cwd: Path,
    timeout_s: float,
    limits: ProcessLimits,
    *,
    max_output_bytes: int = 16000,
    env: Mapping[str, str] | None = None,
    sweep: bool = True,
) -> RunOutcome:
    """Run ``argv`` to completion or deadline; return its status and capped output.

    With ``sweep`` (the default) the caller becomes a child subreaper and every descendant the
    run left behind is killed and reaped before returning. Raises ``OSError`` if the program
    cannot be started.
    """
    if sweep:
        become_subreaper()
    before = _snapshot() if sweep else frozenset()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=preexec_with_limits(limits),  # noqa: PLW1509 - only setrlimit, no locks
        close_fds=True,
    )
    assert proc.stdout is not None
    pgid = proc.pid  # a new session makes the child its own group leader
    capture = _Capture(proc.stdout.fileno(), max_output_bytes)
    swept = 0
    try:
        timed_out = not _pump(proc, capture, time.monotonic() + timeout_s)
        if timed_out:
            _kill_group(pgid, signal.SIGTERM)
            _wait(proc, TERM_GRACE_S)
        # Normal exit or not: nothing of the group may outlive the call.
        _kill_group(pgid, signal.SIGKILL)
        proc.wait()
        if sweep:
            swept = sweep_descendants(before)
        # Every writer is dead now, so the pipe reaches EOF promptly.
        end = time.monotonic() + 1.0
        while not capture.eof and time.monotonic() < end:
            if select_pipe(capture.pipe, 0.05):
                capture.drain()
    finally:
        if proc.returncode is None:  # only on an unexpected error above
            _kill_group(pgid, signal.SIGKILL)
            proc.kill()
            proc.wait()
        proc.stdout.close()
    if swept:
        log.info("shell_descendants_swept", count=swept, argv0=argv[0])
    code = None if timed_out else proc.returncode
    return RunOutcome(code, bytes(capture.data), capture.truncated, timed_out, swept)


@dataclass(slots=True)
class _Capture:
    """The child's output pipe, read without blocking into a buffer that stops at ``cap``."""

    pipe: int
    cap: int
    data: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    eof: bool = False

    def __post_init__(self) -> None:
        os.set_blocking(self.pipe, False)

    def drain(self) -> None:
        """Read what the pipe has now; keep up to ``cap`` bytes and discard the rest."""
        while True:
            try:
                chunk = os.read(self.pipe, _READ_SIZE)
            except BlockingIOError:
                return
            if not chunk:
                self.eof = True
                return
            room = self.cap - len(self.data)
            if len(chunk) > room:
                self.truncated = True
            self.data += chunk[: max(room, 0)]


def _pump(proc: subprocess.Popen[Any], capture: _Capture, deadline: float) -> bool:
    """Read output until the child exits (True) or the deadline passes (False)."""
    exited = _exit_watch(proc.pid)
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(capture.pipe, selectors.EVENT_READ, "pipe")
            if exited is not None:
                sel.register(exited, selectors.EVENT_READ, "exit")
            while proc.poll() is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                for key, _ in sel.select(timeout=min(left, 0.05)):
                    if key.data == "pipe":
                        capture.drain()
                        if capture.eof:
                            sel.unregister(capture.pipe)
    finally:
        if exited is not None:
            os.close(exited)
    return True


def _exit_watch(pid: int) -> int | None:
    """A pidfd that becomes readable when ``pid`` exits, so the loop wakes at once; None if the
    kernel has none (the loop then notices the exit within its 50 ms poll)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def select_pipe(pipe: int, timeout_s: float) -> bool:
    """Whether ``pipe`` is readable within ``timeout_s``."""
    with selectors.DefaultSelector() as sel:
        sel.register(pipe, selectors.EVENT_READ)
        return bool(sel.select(timeout=timeout_s))


def _wait(proc: subprocess.Popen[Any], seconds: float) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=seconds)


def child_env(workspace: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment a tool child sees: a PATH, HOME in the workspace, a UTF-8 locale."""
    # Only absolute PATH entries: an empty or relative one would run programs from the workspace.
    entries = [
        e for e in os.environ.get("PATH", DEFAULT_PATH).split(os.pathsep) if e.startswith("/")
    ]
    env = {
        "PATH": os.pathsep.join(entries) or DEFAULT_PATH,
        "HOME": str(workspace),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
    }
    env.update(extra or {})
    return env


def limits_of(ctx: ToolContext) -> ProcessLimits:
    """The RLIMITs a tool child runs under."""
    return ProcessLimits(address_space_mb=ctx.rlimit_as_mb, cpu_s=ctx.rlimit_cpu_s)


def render(outcome: RunOutcome, cap: int) -> str:
    """The child's output as text, at most ``cap`` characters, with a note when it was cut."""
    text = outcome.output.decode("utf-8", errors="replace")
    if outcome.truncated or len(text) > cap:
        note = f"\n…[output cut at {cap} characters]"
        text = text[: max(cap - len(note), 0)] + note
    return text


def run_shell(ctx: ToolContext, command: str) -> str:
    """Run ``command`` with ``/bin/sh -c`` in the workspace; its output, or ToolError on failure."""
    if not command.strip():
        raise ToolError("run_shell needs a command, e.g. 'ls -la'")
    return run_tool_process(ctx, ["/bin/sh", "-c", command], child_env(ctx.workspace), "command")


def run_tool_process(ctx: ToolContext, argv: list[str], env: dict[str, str], what: str) -> str:
    """Run a RISKY tool's process in the workspace under the caps; its output, or ToolError
    saying it could not start, timed out (output so far) or failed (exit status)."""
    try:
        outcome = run_bounded(
            argv,
            ctx.workspace,
            ctx.shell_timeout_s,
            limits_of(ctx),
            max_output_bytes=ctx.max_output_chars,
            env=env,
        )
    except OSError as exc:
        raise ToolError(f"could not start {argv[0]}: {exc.strerror or exc}") from None
    text = render(outcome, ctx.max_output_chars)
    if outcome.timed_out:
        raise ToolError(
            f"{what} timed out after {ctx.shell_timeout_s:g}s and was killed; output so far:\n"
            + text
        )
    if outcome.returncode != 0:
        raise ToolError(f"{what} exited with status {outcome.returncode}:\n{text}")
    return text or "(no output)"


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {
            "type": "string",
            "description": "a /bin/sh command line, run in the workspace",
        },
    },
    "required": ["command"],
    "additionalProperties": False,
}


def specs() -> list[ToolSpec]:
    """The shell family: ``run_shell`` (RISKY)."""
    definition = ToolDefinition(
        name="run_shell",
        description=(
            "Run a /bin/sh command line in the workspace (stdin empty, output capped, time-"
            "limited). Background processes are killed when the command returns."
        ),
        params_schema=SCHEMA,
        tier=Tier.RISKY,
    )
    return [ToolSpec(definition, run_shell)]
