"""RISKY ``run_shell``, and ``run_bounded``: the runner every spawned tool child goes through.

``run_bounded`` runs the program as a ``Child`` in its own process group under RLIMITs, stdin
on /dev/null, stdout and stderr into one capped pipe. When it exits or its deadline passes
(TERM, a short grace, KILL), the whole group is killed, and so is every descendant that escaped
it (``setsid``, double forks, daemons): the caller is made a child subreaper, so orphans are
re-parented to it instead of to init, and ``/proc/*/stat`` shows who they are. Everything is
reaped before it returns. Descendants the caller had before the run are left alone and anything
new is the run's, so one process runs one ``run_bounded`` at a time, as the worker runs tools.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from shelldon.contracts import Tier, ToolDefinition
from shelldon.proc.child import Child, readable
from shelldon.proc.limits import ProcessLimits, preexec_with_limits
from shelldon.proc.sweep import snapshot, sweep_descendants
from shelldon.proc.ties import become_subreaper
from shelldon.worker.tools.gitconfig import config_findings, refusal, repository_config
from shelldon.worker.tools.registry import ToolContext, ToolError, ToolSpec, string_params
from shelldon.worker.tools.risky_env import ChildRun, fresh_home, risky_env

log = structlog.get_logger(__name__)

TERM_GRACE_S = 0.5


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How a bounded run ended: exit status (None if killed at the deadline), capped output."""

    returncode: int | None
    output: bytes
    truncated: bool
    timed_out: bool


def run_bounded(
    argv: Sequence[str],
    cwd: Path,
    timeout_s: float,
    limits: ProcessLimits,
    *,
    max_output_bytes: int = 16000,
    env: Mapping[str, str] | None = None,
) -> RunOutcome:
    """Run ``argv`` to completion or deadline; return its status and capped output. The caller
    becomes a child subreaper, and every descendant the run left behind is killed and reaped
    before returning. Raises ``OSError`` if the program cannot be started."""
    become_subreaper()
    before = snapshot()
    child = Child.spawn(
        argv,
        cwd=cwd,
        env=env if env is not None else os.environ,
        preexec=preexec_with_limits(limits),
        capture=max_output_bytes,
    )
    output = child.output
    assert output is not None
    with child:
        timed_out = not child.pump((output,), time.monotonic() + timeout_s)
        if timed_out:
            child.kill(signal.SIGTERM)
            child.wait_exit(TERM_GRACE_S)
        # Normal exit or not: nothing of the group may outlive the call.
        child.kill()
        child.reap(block=True)
        swept = sweep_descendants(before)
        # Every writer is dead now, so the pipe reaches EOF promptly.
        end = time.monotonic() + 1.0
        while not output.eof and time.monotonic() < end:
            if readable(output.fd, 0.05):
                output.drain()
    if swept:
        log.info("shell_descendants_swept", count=swept, argv0=argv[0])
    code = None if timed_out else child.exit_code
    return RunOutcome(code, output.data(), output.truncated, timed_out)


def render(outcome: RunOutcome, cap: int) -> str:
    """The child's output as text, at most ``cap`` characters, with a note when it was cut."""
    text = outcome.output.decode("utf-8", errors="replace")
    if outcome.truncated or len(text) > cap:
        note = f"\n…[output cut at {cap} characters]"
        text = text[: max(cap - len(note), 0)] + note
    return text


def prepare_shell(workspace: Path, command: str, home: Path) -> ChildRun:
    """The child an approved ``run_shell`` starts: ``/bin/sh -c command`` in the workspace with
    the neutral environment around ``home``. Raises ``ToolError`` for an empty command, or
    when the workspace's git repository names programs for git to run (the command may well
    run git: ``git add`` would start a planted filter)."""
    if not command.strip():
        raise ToolError("run_shell needs a command, e.g. 'ls -la'")
    env = risky_env(workspace, home)
    try:
        entries = repository_config(workspace, env)
    except ToolError as exc:
        # A config git cannot read makes every git in the command fail before it runs
        # anything; the command may be the repair (rm -rf .git), so it is not refused.
        log.info("run_shell_repository_config_unreadable", error=str(exc))
        entries = []
    findings = config_findings(entries, workspace, workspace, scopes=("local", "worktree"))
    if findings:
        raise refusal(findings, "run_shell")
    return ChildRun(("/bin/sh", "-c", command), env, "command")


def run_shell(ctx: ToolContext, command: str) -> str:
    """Run ``command`` with ``/bin/sh -c`` in the workspace; its output, or ToolError on failure."""
    with fresh_home() as home:
        return run_child(ctx, prepare_shell(ctx.workspace, command, home))


def run_child(ctx: ToolContext, run: ChildRun) -> str:
    """Run a prepared RISKY child in the workspace under the caps; its output, or ToolError
    saying it could not start, timed out (output so far) or failed (exit status)."""
    try:
        outcome = run_bounded(
            run.argv,
            ctx.workspace,
            ctx.shell_timeout_s,
            ProcessLimits(address_space_mb=ctx.rlimit_as_mb, cpu_s=ctx.rlimit_cpu_s),
            max_output_bytes=ctx.max_output_chars,
            env=run.env,
        )
    except OSError as exc:
        raise ToolError(f"could not start {run.argv[0]}: {exc.strerror or exc}") from None
    text = render(outcome, ctx.max_output_chars)
    if outcome.timed_out:
        raise ToolError(
            f"{run.what} timed out after {ctx.shell_timeout_s:g}s and was killed; output so "
            "far:\n" + text
        )
    if outcome.returncode != 0:
        raise ToolError(f"{run.what} exited with status {outcome.returncode}:\n{text}")
    return text or "(no output)"


def specs() -> list[ToolSpec]:
    """The shell family: ``run_shell`` (RISKY)."""
    definition = ToolDefinition(
        name="run_shell",
        description=(
            "Run a /bin/sh command line in the workspace (stdin empty, output capped, time-"
            "limited). Background processes are killed when the command returns."
        ),
        params_schema=string_params(command="a /bin/sh command line, run in the workspace"),
        tier=Tier.RISKY,
    )
    # An approved command line may fetch (the README says what run_shell may reach).
    return [ToolSpec(definition, run_shell, network=lambda _args: True)]
