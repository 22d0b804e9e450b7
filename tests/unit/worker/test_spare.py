"""The zygote's spare worker for real: forked ahead of its turn, confined and idle until a turn
is handed to it, then the same one-turn worker as ever.

As in test_zygote, every test forks a real zygote and plays the TurnActor; the spare is looked
at in /proc (status, descriptors, CPU ticks, wchan) while it waits.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from shelldon.config import Settings
from shelldon.contracts import (
    Job,
    Message,
    RequestToolApproval,
    ResumeRequest,
    Role,
    Tier,
    ToolCall,
    TurnRequest,
)
from shelldon.proc import sandbox
from shelldon.proc.child import SpawnError
from shelldon.store import Store
from shelldon.toolbox.toolbox import Toolbox
from shelldon.worker import spare as spares
from shelldon.worker import spawn
from shelldon.worker.handle import EXIT_OK
from shelldon.worker.spawn import CRASH_REPLY
from shelldon.worker.tools import Registry, context_from_settings
from shelldon.worker.tools.selfcoded import toolbox_fingerprint
from shelldon.worker.zygote import Zygote
from tests.pids import host_pid, inner
from tests.unit.selfcode.samples import ADDER, promote
from tests.unit.worker.brain import call, calls, catalogued, reachable, say
from tests.unit.worker.test_spawn import converse, registry_with, tool_output, wait_exit
from tests.unit.worker.test_zygote import (
    cgroup_settings,  # noqa: F401 - a fixture
    children_of,
    converse_until_jobs,
    fds_of,
    gone,
    proc_state,
)


def _context(ctx: Any, **_: Any) -> str:
    """What the worker logs under, and its pid."""
    return json.dumps({"log": structlog.contextvars.get_contextvars(), "pid": host_pid()})


def _spin(ctx: Any, **_: Any) -> str:
    while True:
        pass


def _deploy(ctx: Any, **_: Any) -> str:
    return "deployed"


FACTORY = registry_with(
    ("context", _context, Tier.FREE),
    ("spin", _spin, Tier.FREE),
    ("deploy", _deploy, Tier.RISKY),
)


@pytest.fixture
def zygote(settings: Settings) -> Iterator[Zygote]:
    z = Zygote.start(settings, registry_factory=FACTORY)
    try:
        yield z
    finally:
        z.stop()


def turn(turn_id: str = "t-spare", text: str = "hi") -> TurnRequest:
    return TurnRequest(turn_id, 7, text)


def status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def idle_spare(z: Zygote, timeout: float = 5.0) -> int:
    """The spare's pid once it is prepared and blocked waiting for its assignment."""
    pid = z.spare_pid()
    assert pid is not None, "the zygote has no spare"
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if "poll" in Path(f"/proc/{inner(pid)}/wchan").read_text():
            return pid
        time.sleep(0.005)
    raise AssertionError(f"spare {pid} never went idle")


# ------------------------------------------------------------------ turns through spares


def test_a_turn_through_the_spare_returns_its_result(zygote: Zygote) -> None:
    spare = zygote.spare_pid()
    assert spare is not None and spare in children_of(zygote.pid)
    worker = inner(spare)
    with zygote.spawn_turn(turn()) as handle:
        assert handle.pid == spare
        jobs, result = converse(handle, [calls(call("context")), say("Done.")])
        assert [j.turn_id for j in jobs] == ["t-spare", "t-spare"]
        assert result.turn_id == "t-spare" and result.reply == "Done."
        seen = json.loads(tool_output(jobs[1]))
        # The real turn id is bound in the worker's log context on assignment.
        assert seen == {"log": {"actor": "worker", "turn_id": "t-spare"}, "pid": worker}
        assert wait_exit(handle) == EXIT_OK
    assert gone(spare)  # one worker per turn: it served this one and died


def test_second_and_third_turns_use_spares_too(zygote: Zygote) -> None:
    used = []
    for n in range(3):
        spare = idle_spare(zygote)
        with zygote.spawn_turn(turn(f"t-{n}")) as handle:
            assert handle.pid == spare
            _, result = converse(handle, [say(f"reply {n}")])
            assert result.reply == f"reply {n}" and wait_exit(handle) == EXIT_OK
        used.append(spare)
    assert len(set(used)) == 3
    assert zygote.spare_pid() not in used  # a fresh one waits for the fourth


def test_the_deadline_is_fixed_at_assignment_not_at_the_spares_fork(
    zygote: Zygote, settings: Settings
) -> None:
    spare = idle_spare(zygote)
    time.sleep(0.3)
    before = time.monotonic()
    with zygote.spawn_turn(turn()) as handle:
        after = time.monotonic()
        timeout = settings.limits.turn_timeout_s
        assert handle.pid == spare
        assert before + timeout <= handle.deadline <= after + timeout
        jobs, _ = converse(handle, [say("ok")])
        assert jobs[0].deadline == handle.deadline


def test_spare_false_keeps_no_spare_and_forks_per_turn(settings: Settings) -> None:
    z = Zygote.start(settings, registry_factory=FACTORY, spare=False)
    try:
        assert z.spare_pid() is None and children_of(z.pid) == []
        with z.spawn_turn(turn()) as handle:
            converse(handle, [say("ok")])
        assert z.spare_pid() is None
    finally:
        z.stop()


# ------------------------------------------------------------------ the idle spare


def test_an_idle_spare_is_already_prepared_and_confined(zygote: Zygote, settings: Settings) -> None:
    stub = idle_spare(zygote)
    pid = inner(stub)
    assert Path(f"/proc/{pid}/cwd").resolve() == settings.workspace.resolve()
    assert f"{settings.limits.rlimit_cpu_s}" in next(
        line for line in Path(f"/proc/{pid}/limits").read_text().splitlines() if "cpu" in line
    )
    p = sandbox.plan(settings.sandbox)
    if p.seccomp:
        assert status(pid)["Seccomp"] == "2"
    if p.seccomp or p.fs == "landlock":
        assert status(pid)["NoNewPrivs"] == "1"
    fds = fds_of(pid)
    extra = {fd: t for fd, t in fds.items() if fd > 2}
    # Its channel, plus any landlock ruleset the zygote prebuilt (applied and closed by now).
    sockets = [t for t in extra.values() if t.startswith("socket:")]
    rulesets = [t for t in extra.values() if t.startswith("anon_inode:[landlock")]
    assert len(sockets) == 1 and len(sockets) + len(rulesets) == len(extra), fds
    assert set(fds) >= {0, 1, 2}
    if pid != stub:
        # The zygote's child is a stub outside the PID namespace that holds nothing.
        assert fds_of(stub) == {} and parent_of(pid) == stub
    assert parent_of(stub) == zygote.pid


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_an_idle_spare_blocks_without_spending_cpu(zygote: Zygote) -> None:
    stub = idle_spare(zygote)
    for pid in {stub, inner(stub)}:
        ticks = cpu_ticks(pid)
        time.sleep(0.3)
        assert cpu_ticks(pid) == ticks  # blocked in poll: no spin, no RLIMIT_CPU spent
        assert status(pid)["State"].startswith("S")


def test_a_spare_is_in_its_turns_cgroup_before_its_turn(
    cgroup_settings: Settings,  # noqa: F811 - the fixture imported above
) -> None:
    z = Zygote.start(cgroup_settings, registry_factory=FACTORY)
    try:
        pid = idle_spare(z)
        (turn_cgroup,) = [c for c in Path(cgroup_settings.sandbox.cgroup).iterdir() if c.is_dir()]
        assert sorted(sandbox.TurnCgroup(turn_cgroup).pids()) == sorted({pid, inner(pid)})
        with z.spawn_turn(turn()) as handle:
            assert handle.pid == pid and handle.cgroup_path == str(turn_cgroup)
            converse(handle, [say("ok")])
        assert not turn_cgroup.exists()
    finally:
        z.stop()


def test_a_spare_that_cannot_prepare_apologizes_for_the_turn_it_gets(settings: Settings) -> None:
    def broken(_: Settings) -> Registry:
        raise RuntimeError("no registry today")

    z = Zygote.start(settings, registry_factory=broken)
    try:
        spare = z.spare_pid()
        with z.spawn_turn(turn("t-sorry")) as handle:
            assert handle.pid == spare
            _, result = converse(handle, [])
            assert (result.turn_id, result.reply) == ("t-sorry", CRASH_REPLY)
    finally:
        z.stop()


# ------------------------------------------------------------------ when the spare cannot serve


def _promote_adder(settings: Settings) -> None:
    with Store(settings.database) as store:
        promote(Toolbox.from_settings(settings, store), "adder", ADDER)


def test_a_toolbox_change_after_the_spares_fork_gives_the_turn_the_new_tool(
    settings: Settings,
) -> None:
    z = Zygote.start(settings)  # the real build_registry, self-coded discovery included
    try:
        stale = idle_spare(z)
        before = toolbox_fingerprint(context_from_settings(settings))
        _promote_adder(settings)
        assert toolbox_fingerprint(context_from_settings(settings)) != before
        with z.spawn_turn(turn()) as handle:
            assert handle.pid != stale
            jobs, _ = converse(handle, [say("ok")])
            assert "adder" in catalogued(jobs[0])
        assert gone(stale)  # killed and reaped, never used
        # The next spare was forked after the change: it has the tool and is used.
        spare = idle_spare(z)
        with z.spawn_turn(turn("t-next")) as handle:
            assert handle.pid == spare
            jobs, _ = converse(handle, [say("ok")])
            assert "adder" in catalogued(jobs[0])
    finally:
        z.stop()


def test_live_modules_without_a_manifest_are_never_offered(settings: Settings) -> None:
    # No manifest, no self-coded tools: nothing on disk is offered for being there, so the
    # fingerprint (no manifest, these names) covers what discovery reads and a spare serves.
    settings.live_tools.mkdir(parents=True)
    (settings.live_tools / "adder.py").write_text(ADDER)
    z = Zygote.start(settings)
    try:
        spare = idle_spare(z)
        with z.spawn_turn(turn()) as handle:
            assert handle.pid == spare
            jobs, result = converse(handle, [say("fresh")])
            assert result.reply == "fresh"
            assert "adder" not in reachable(jobs[0])
    finally:
        z.stop()


def test_a_spare_killed_while_idle_is_replaced_and_the_turn_runs(zygote: Zygote) -> None:
    killed = idle_spare(zygote)
    # The process that would run the turn dies (an OOM kill, a crash); its stub, if it has one
    # outside its PID namespace, exits with it.
    os.kill(inner(killed), signal.SIGKILL)
    with zygote.spawn_turn(turn()) as handle:
        assert handle.pid != killed
        _, result = converse(handle, [say("still served")])
        assert result.reply == "still served" and wait_exit(handle) == EXIT_OK
    assert gone(killed)  # the zygote reaped it
    assert zygote.spare_pid() not in (None, killed, handle.pid)


def test_a_spare_killed_before_it_was_ready_is_replaced_too(zygote: Zygote) -> None:
    # Killed at once, possibly still preparing: nothing may reach a dead spare's turn.
    for n in range(3):
        pid = zygote.spare_pid()
        assert pid is not None
        os.kill(inner(pid), signal.SIGKILL)
        with zygote.spawn_turn(turn(f"t-{n}")) as handle:
            _, result = converse(handle, [say("ok")])
            assert result.reply == "ok"


def test_a_resume_never_uses_the_spare(zygote: Zygote) -> None:
    spare = idle_spare(zygote)
    risky = ToolCall("r1", "deploy", {})
    parked = RequestToolApproval(
        risky, "deploy()", (Message(Role.USER, "deploy"), Message(Role.ASSISTANT, "", (risky,)))
    )
    with zygote.spawn_turn(ResumeRequest("t-res", 7, parked, True)) as handle:
        assert handle.pid != spare
        jobs, result = converse(handle, [say("Deployed!")])
        assert tool_output(jobs[0]) == "deployed" and result.reply == "Deployed!"
    assert zygote.spare_pid() == spare and proc_state(spare) == "S"
    with zygote.spawn_turn(turn()) as handle:  # still there for the next plain turn
        assert handle.pid == spare


def test_stop_leaves_no_spare(settings: Settings) -> None:
    z = Zygote.start(settings, registry_factory=FACTORY)
    first = idle_spare(z)
    with z.spawn_turn(turn()) as handle:
        converse(handle, [say("ok")])
    second = z.spare_pid()
    assert second is not None and second != first
    busy = z.spawn_turn(turn("t-busy"))
    converse_until_jobs(busy, [calls(call("spin"))], 1)
    third = z.spare_pid()
    z.stop()
    for pid in (z.pid, first, second, third, busy.pid):
        assert pid is not None and proc_state(pid) is None, pid
    busy.close()


# ------------------------------------------------------------------ spawn's own API


def test_spawn_spare_and_assign_without_a_zygote(settings: Settings) -> None:
    with spawn.spawn_spare(settings, registry_factory=FACTORY) as handle:
        assert handle.turn_id == spares.SPARE_TURN_ID and handle.deadline == float("inf")
        time.sleep(0.05)
        deadline = time.monotonic() + 60
        spares.assign_spare(handle, turn("t-direct"), deadline)
        assert (handle.turn_id, handle.deadline) == ("t-direct", deadline)
        jobs, result = converse(handle, [say("direct")])
        assert isinstance(jobs[0], Job) and jobs[0].deadline == deadline
        assert result.reply == "direct" and wait_exit(handle) == EXIT_OK


def test_assign_to_a_dead_spare_raises_spawn_error(settings: Settings) -> None:
    with spawn.spawn_spare(settings, registry_factory=FACTORY) as handle:
        handle.kill()
        handle.reap(block=True)
        with pytest.raises(SpawnError, match="spare"):
            spares.assign_spare(handle, turn(), time.monotonic() + 60)


def test_assign_to_a_stopped_spare_times_out_into_spawn_error(settings: Settings) -> None:
    with spawn.spawn_spare(settings, registry_factory=FACTORY) as handle:
        os.kill(inner(handle.pid), signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(SpawnError, match="acknowledgement"):
            spares.assign_spare(handle, turn(), time.monotonic() + 60, wait_s=0.2)
        assert time.monotonic() - started < 1.0
        assert handle.turn_id == spares.SPARE_TURN_ID  # not assigned
