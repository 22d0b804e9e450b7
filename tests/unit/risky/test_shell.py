"""run_shell and run_bounded: nothing a command starts outlives the call.

Sources of inspiration for the escape attempts: GTFOBins (nohup, setsid, background shells),
the classic double-fork daemon (Stevens, APUE ch. 13), trio's test_subprocess.py (kill the
group, always reap), and systemd's KillMode=control-group rationale.

Every test that runs a command does it in a forked child (``run_in_fork``), as the worker does:
run_bounded makes its caller a child subreaper, which must never be the pytest process itself.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from shelldon.contracts import Tier, ToolCall
from shelldon.proc.limits import ProcessLimits
from shelldon.proc.sweep import ProcEntry, descendants
from shelldon.worker.tools.registry import Registry, ToolContext, execute_tool
from shelldon.worker.tools.shell import run_bounded, specs
from tests.unit.risky.forking import run_in_fork

LIMITS = ProcessLimits(address_space_mb=1024, cpu_s=30)


def _ctx(home: Path, **kw: object) -> ToolContext:
    return ToolContext(workspace=home / "workspace", vault=home / "vault", **kw)  # type: ignore[arg-type]


def _run_tool(ctx: ToolContext, command: str) -> tuple[bool, str]:
    registry = Registry(ctx)
    registry.add_all(specs())
    result = execute_tool(
        registry, ToolCall("c1", "run_shell", {"command": command}), approved=True
    )
    return result.ok, result.content


def _alive(pid: int) -> bool:
    """Whether ``pid`` exists at all (a zombie counts: it was not reaped)."""
    return Path(f"/proc/{pid}").exists()


def _run_then_check_pids(ctx: ToolContext, command: str) -> tuple[bool, str, list[int], list[bool]]:
    """Run the tool, read the pids it printed (one per line, prefixed 'PID '), check each."""
    ok, out = _run_tool(ctx, command)
    pids = [int(line.split()[1]) for line in out.splitlines() if line.startswith("PID ")]
    return ok, out, pids, [_alive(p) for p in pids]


@pytest.mark.parametrize(
    "command",
    [
        pytest.param("sleep 100 & echo PID $!", id="background-ampersand"),
        pytest.param("setsid sleep 100 & echo PID $!", id="setsid-new-session"),
        pytest.param("nohup sleep 100 >/dev/null 2>&1 & echo PID $!", id="nohup"),
        pytest.param("(sleep 100 & echo PID $!) ; true", id="subshell-orphan"),
        pytest.param(
            "(setsid sh -c 'sleep 100 & echo PID $!' &) ; sleep 0.2", id="setsid-then-orphan"
        ),
        pytest.param(
            "sh -c 'trap \"\" HUP TERM; sleep 100 & echo PID $!; wait' & sleep 0.1",
            id="ignores-hup-and-term",
        ),
    ],
)
def test_background_children_are_dead_when_run_shell_returns(home: Path, command: str) -> None:
    ok, out, pids, alive = run_in_fork(_run_then_check_pids, _ctx(home), command)
    assert ok, out
    assert pids, out
    assert alive == [False] * len(pids), out


DAEMON = """
import os, sys, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
print("PID", os.getpid(), flush=True)
os.closerange(0, 3)
time.sleep(100)
"""


def test_double_fork_daemon_is_dead_when_run_shell_returns(home: Path) -> None:
    script = home / "workspace" / "daemon.py"
    script.write_text(DAEMON)
    command = f"{sys.executable} daemon.py; sleep 0.2"
    ok, out, pids, alive = run_in_fork(_run_then_check_pids, _ctx(home), command)
    assert ok, out
    assert len(pids) == 1
    assert alive == [False]


def test_timeout_is_a_failed_result_and_kills_the_group(home: Path) -> None:
    ctx = _ctx(home, shell_timeout_s=0.5)
    started = time.monotonic()
    ok, out, pids, alive = run_in_fork(
        _run_then_check_pids, ctx, "setsid sleep 100 & echo PID $!; sleep 100"
    )
    assert time.monotonic() - started < 3
    assert not ok
    assert "timed out" in out
    assert pids and alive == [False]


def test_a_command_that_ignores_term_is_killed_at_the_deadline(home: Path) -> None:
    ctx = _ctx(home, shell_timeout_s=0.3)
    command = "trap '' TERM HUP INT; echo PID $$; while :; do sleep 0.05; done"
    ok, out, pids, alive = run_in_fork(_run_then_check_pids, ctx, command)
    assert not ok and "timed out" in out
    assert pids and alive == [False]


def test_a_shell_pipeline_works_in_the_workspace(home: Path) -> None:
    (home / "workspace" / "names.txt").write_text("b\na\nc\n")
    ok, out = run_in_fork(_run_tool, _ctx(home), "sort names.txt | head -2 && pwd")
    assert ok, out
    assert out.splitlines() == ["a", "b", str(home / "workspace")]


def test_stdin_is_empty(home: Path) -> None:
    ok, out = run_in_fork(_run_tool, _ctx(home), "cat; echo end")
    assert ok and out.strip() == "end"


def test_output_is_capped_while_reading(home: Path) -> None:
    ok, out = run_in_fork(_run_tool, _ctx(home, max_output_chars=1000), "yes | head -c 5000000")
    assert ok
    assert out.startswith("y\ny\n")
    assert out.endswith("…[output cut at 1000 characters]")
    assert len(out) <= 1000


def test_nonzero_exit_is_a_failed_result_with_the_output(home: Path) -> None:
    ok, out = run_in_fork(_run_tool, _ctx(home), "echo oops >&2; exit 3")
    assert not ok
    assert "status 3" in out and "oops" in out


def _env_seen(ctx: ToolContext) -> tuple[bool, str]:
    os.environ["ANTHROPIC_API_KEY"] = "sk-should-never-be-seen"
    os.environ["PATH"] = "relative/bin::" + os.environ.get("PATH", "")
    return _run_tool(ctx, "env")


def test_the_child_sees_no_inherited_secrets_and_no_relative_path(home: Path) -> None:
    ok, out = run_in_fork(_env_seen, _ctx(home))
    assert ok
    assert "sk-should-never-be-seen" not in out
    path = next(line for line in out.splitlines() if line.startswith("PATH="))
    assert all(entry.startswith("/") for entry in path[5:].split(":"))


def test_rlimits_apply_to_the_child(home: Path) -> None:
    ok, out = run_in_fork(
        _run_tool, _ctx(home, rlimit_as_mb=512, rlimit_cpu_s=7), "ulimit -v; ulimit -t"
    )
    assert ok, out
    assert out.split() == [str(512 * 1024), "7"]


def test_run_shell_is_risky_and_refused_unapproved(home: Path) -> None:
    registry = Registry(_ctx(home))
    registry.add_all(specs())
    assert registry.tier("run_shell") is Tier.RISKY
    assert specs()[0].definition.params_schema["additionalProperties"] is False
    result = execute_tool(registry, ToolCall("c1", "run_shell", {"command": "touch x"}))
    assert not result.ok
    assert not (home / "workspace" / "x").exists()


def _bounded_echo(cwd: Path) -> tuple[int | None, bytes, bool]:
    outcome = run_bounded(["/bin/sh", "-c", "echo $$; echo out; echo err >&2"], cwd, 5, LIMITS)
    return outcome.returncode, outcome.output, _alive(int(outcome.output.split()[0]))


def test_run_bounded_merges_stderr_and_reaps_the_child(tmp_path: Path) -> None:
    code, output, alive = run_in_fork(_bounded_echo, tmp_path)
    assert code == 0
    assert output.split()[1:] == [b"out", b"err"]
    assert not alive


def test_run_bounded_waits_for_a_child_that_closes_its_output(tmp_path: Path) -> None:
    outcome = run_in_fork(
        run_bounded, ["/bin/sh", "-c", "exec >&- 2>&-; sleep 0.3; exit 4"], tmp_path, 5, LIMITS
    )
    assert outcome.returncode == 4
    assert not outcome.timed_out


def test_descendants_walks_the_whole_tree_parents_first() -> None:
    table = {
        1: ProcEntry(1, 0, 1),
        10: ProcEntry(10, 1, 5),
        11: ProcEntry(11, 10, 6),
        12: ProcEntry(12, 11, 7),
        20: ProcEntry(20, 1, 8),
        30: ProcEntry(30, 99, 9),
    }
    assert [e.pid for e in descendants(10, table)] == [11, 12]
    assert {e.pid for e in descendants(1, table)} == {10, 11, 12, 20}
