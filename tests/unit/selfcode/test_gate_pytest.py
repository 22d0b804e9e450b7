"""The gate's pytest half, with real pytest subprocesses: a staged tool passes only when a test
that calls its ``run`` passes, inside a bounded, sanitized, killable process group.

Attack inspiration: the issue's gate cases (sleep forever, allocate 2 GB), trio's subprocess
tests (the whole process group is gone, nothing leaks), pytest's own "no tests ran" exit code 5,
and CI secret-leak write-ups (a child must not inherit API keys or the project's addopts).
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

from shelldon.config import Settings
from shelldon.contracts import ToolCall
from shelldon.proc import sandbox
from shelldon.store import Store
from shelldon.toolbox import gate as gate_module
from shelldon.toolbox.toolbox import Toolbox
from shelldon.worker.tools import context_from_settings
from shelldon.worker.tools.registry import Registry, execute_tool
from shelldon.worker.tools.selfcoded import discover
from tests.pids import running

from .samples import ADDER, ADDER_TEST, calling_test, tool

pytestmark = pytest.mark.slow


def group_alive(pgid: int) -> bool:
    """Does any process that is not a zombie still belong to process group ``pgid``?"""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def gone_soon(pgid: int) -> bool:
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def sc(settings: Settings, store: Store) -> Toolbox:
    """Default limits (30 s gate timeout): a loaded CI machine must not turn passes into fails."""
    return Toolbox(settings.toolbox, store, settings.limits)


@pytest.fixture
def quick(settings: Settings, store: Store) -> Toolbox:
    """A 3 s gate timeout, for the tests that are about the timeout."""
    limits = dataclasses.replace(settings.limits, gate_timeout_s=3.0)
    return Toolbox(settings.toolbox, store, limits)


def gate(sc: Toolbox, stem: str, code: str, test: str):
    return sc.run_gate(sc.stage(stem, code, test))


def test_passing_tool_passes_the_gate(sc: Toolbox) -> None:
    report = gate(sc, "adder", ADDER, ADDER_TEST)
    assert report.passed, report
    assert report.findings == ()
    assert report.tests_passed == 1
    assert "1 passed" in report.output
    assert report.duration_s < 5
    # The bytes the gate judged travel with the report's caller; its directory is gone.
    assert list(sc.staging_dir.iterdir()) == []


def test_failing_test_fails_the_gate_and_removes_its_directory(sc: Toolbox) -> None:
    report = gate(sc, "adder", ADDER, ADDER_TEST.replace('== "2"', '== "3"'))
    assert not report.passed
    assert any("failed in test_adder.py" in f for f in report.findings)
    assert "assert '2' == '3'" in report.output
    assert list(sc.staging_dir.iterdir()) == []


def test_test_that_sleeps_forever_is_killed_with_its_whole_group(
    quick: Toolbox, tmp_path: Path
) -> None:
    sc = quick
    # The sandboxed gate may write only in its own staging dir, which goes with the gate:
    # the grandchild is found as pytest's child while the gate runs.
    test = calling_test(
        "sleeper",
        body=(
            "assert run() == 'ok'\n"
            "    child = os.fork()\n"
            "    if child == 0:\n"
            "        time.sleep(1000)\n"
            "        os._exit(0)\n"
            "    time.sleep(1000)"
        ),
        head="import os, time",
    )
    staged = sc.stage("sleeper", tool(), test)
    started = time.monotonic()  # the deadline counts from the gate's start, launch included
    run = sc.start_gate(staged)
    assert run.pid is not None
    children = Path(f"/proc/{run.pid}/task/{run.pid}/children")
    grandchildren: list[str] = []
    while not grandchildren and time.monotonic() - started < 2.5:
        time.sleep(0.02)
        grandchildren = children.read_text().split()
    report = run.wait()
    assert report.timed_out
    assert 2.9 < time.monotonic() - started < 8.0
    assert any("longer than 3s" in f for f in report.findings)
    assert gone_soon(run.pid)
    assert grandchildren, report.output  # the grandchild had started
    grandchild = int(grandchildren[0])
    assert (
        not Path(f"/proc/{grandchild}").exists()
        or "Z" in (Path(f"/proc/{grandchild}/stat").read_text().rsplit(")", 1)[1].split()[0])
    )
    assert not staged.directory.exists()


def test_test_that_allocates_2_gb_fails_on_the_memory_limit(sc: Toolbox) -> None:
    code = tool(body="return str(len(bytearray(2 * 1024**3)))")
    report = gate(sc, "hog", code, calling_test("hog", "assert run() == str(2 * 1024**3)"))
    assert not report.passed
    assert "MemoryError" in report.output
    assert not report.timed_out


def test_test_file_with_no_tests_fails(sc: Toolbox) -> None:
    report = gate(sc, "adder", ADDER, "from adder import run\n")
    assert not report.passed
    assert any("collected no tests" in f for f in report.findings)


def test_only_skipped_tests_fail(sc: Toolbox) -> None:
    test = "import pytest\n" + ADDER_TEST.replace("def test", "@pytest.mark.skip\ndef test")
    report = gate(sc, "adder", ADDER, test)
    assert not report.passed
    assert any("was skipped" in f for f in report.findings)


def test_passing_test_that_never_calls_run_fails(sc: Toolbox) -> None:
    test = "import adder\n\n\ndef test_description():\n    assert adder.DESCRIPTION\n"
    report = gate(sc, "adder", ADDER, test)
    assert not report.passed
    assert any("called adder.run" in f for f in report.findings)


def test_nested_function_named_run_does_not_count_as_the_tool(sc: Toolbox) -> None:
    code = tool(head="def helper():\n    def run():\n        return 1\n    return run()\n")
    test = "import decoy\n\n\ndef test_helper():\n    assert decoy.helper() == 1\n"
    report = gate(sc, "decoy", code, test)
    assert any("called decoy.run" in f for f in report.findings)


def test_unittest_style_test_that_calls_run_passes(sc: Toolbox) -> None:
    test = (
        "import unittest\nfrom adder import run\n\n\n"
        "class AdderTest(unittest.TestCase):\n"
        "    def test_adds(self):\n        self.assertEqual(run(a=2), '3')\n"
    )
    assert gate(sc, "adder", ADDER, test).passed


def test_collection_error_is_explained(sc: Toolbox) -> None:
    report = gate(sc, "adder", ADDER, "import no_such_module_here\n" + ADDER_TEST)
    assert not report.passed
    assert any("could not be collected" in f for f in report.findings)
    assert "no_such_module_here" in report.output


def test_process_exit_from_the_test_fails(sc: Toolbox) -> None:
    report = gate(sc, "adder", ADDER, ADDER_TEST + "    import os\n    os._exit(0)\n")
    assert not report.passed
    assert any("without its summary" in f for f in report.findings)


def test_huge_output_is_capped(sc: Toolbox, settings: Settings) -> None:
    body = "print('x' * 2_000_000)\n    assert False"
    report = gate(sc, "adder", ADDER, calling_test("adder", body).replace("run()", "run(a=1)"))
    assert not report.passed
    assert len(report.output) < settings.limits.max_tool_output_chars + 200
    assert "bytes of output dropped" in report.output
    assert "1 failed" in report.output  # the tail with pytest's summary is kept


def test_gate_child_sees_no_secrets_and_runs_bounded(
    sc: Toolbox, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-real")
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:not-real")
    monkeypatch.setenv("PYTEST_ADDOPTS", "--definitely-not-an-option")
    as_bytes = settings.limits.rlimit_as_mb * 1024 * 1024
    test = calling_test(
        "probe",
        body=(
            "assert run() == 'ok'\n"
            "    assert 'ANTHROPIC_API_KEY' not in os.environ\n"
            "    assert 'TELEGRAM_BOT_TOKEN' not in os.environ\n"
            "    assert not any('SHELLDON' in k and 'GATE' not in k for k in os.environ)\n"
            "    assert os.environ['HOME'] == os.getcwd()\n"
            f"    assert resource.getrlimit(resource.RLIMIT_AS)[0] == {as_bytes}\n"
            # Its own session: led by itself, or (in a PID namespace of its own) from outside.
            "    assert os.getsid(0) == os.getpid() or (os.getpid() == 1 and os.getsid(0) == 0)\n"
            "    assert os.path.basename(os.getcwd()).startswith('probe-')\n"
            "    assert os.path.basename(os.path.dirname(os.getcwd())) == 'staging'"
        ),
        head="import os, resource",
    )
    report = gate(sc, "probe", tool(), test)
    assert report.passed, report.output


def test_project_config_and_conftests_do_not_leak_in(sc: Toolbox, settings: Settings) -> None:
    ws = settings.workspace
    for where in (sc.staging_dir, sc.toolbox):
        (where / "conftest.py").write_text("raise SystemExit('conftest must not load')\n")
    (ws / "pytest.ini").write_text("[pytest]\naddopts = --definitely-not-an-option\n")
    (ws / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "-x --nope"\n')
    (ws / "conftest.py").write_text("raise SystemExit('conftest must not load')\n")
    (ws.parent / "conftest.py").write_text("raise SystemExit('conftest must not load')\n")
    report = gate(sc, "adder", ADDER, ADDER_TEST)
    assert report.passed, report.output


def test_start_gate_does_not_block_and_kill_stops_the_group(sc: Toolbox) -> None:
    test = calling_test("slow", "import time\n    time.sleep(1000)")
    started = time.monotonic()
    run = sc.start_gate(sc.stage("slow", tool(), test))
    # The test sleeps forever and the gate timeout is 30 s: a blocking start would take 30 s.
    assert time.monotonic() - started < 5.0
    assert isinstance(run.pid, int) and isinstance(run.fd, int)
    assert run.poll() is None
    report = run.kill()
    assert not report.passed
    assert any("cancelled" in f for f in report.findings)
    assert run.poll() is report
    assert run.fd is None
    assert gone_soon(run.pid)
    assert list(sc.staging_dir.iterdir()) == []


def test_computed_import_is_shown_for_the_owner(sc: Toolbox) -> None:
    code = tool(body="return __import__(kwargs.get('m', 'json')).__name__")
    report = gate(sc, "dyn", code, calling_test("dyn", "assert run() == 'json'"))
    assert report.passed, report.output
    assert len(report.dynamic_imports) == 1
    assert "computed at run time" in report.dynamic_imports[0]


def test_child_that_escapes_the_group_does_not_hang_the_gate(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    limits = dataclasses.replace(settings.limits, gate_timeout_s=10.0)
    sc = Toolbox(settings.toolbox, store, limits)
    # The gate returns on time, and where the gate run has a PID namespace of its own (see
    # sandbox.pidns) the escapee ends with it, cgroup or not.
    seconds = f"{700 + time.time_ns() % 10**6 / 10**7:.7f}"  # finds it from outside
    test = calling_test(
        "escape",
        body=(
            "assert run() == 'ok'\n"
            "    if os.fork() == 0:\n"
            "        os.setsid()\n"
            f"        os.execvp('sleep', ['sleep', {seconds!r}])\n"
            "    time.sleep(0.2)"
        ),
        head="import os, time",
    )
    report = gate(sc, "escape", tool(), test)
    try:
        assert not report.timed_out  # the pipe the escapee holds did not keep the gate waiting
        assert report.passed, report.output
        if sandbox.plan(settings.sandbox).pidns:
            until = time.monotonic() + 3
            while running("sleep", seconds) and time.monotonic() < until:
                time.sleep(0.01)
            assert running("sleep", seconds) == []
    finally:
        for pid in running("sleep", seconds):
            os.kill(pid, 9)


def test_tests_may_use_tmp_path_and_tmpdir(sc: Toolbox) -> None:
    test = (
        "from files import run\n\n\n"
        "def test_a(tmp_path):\n    (tmp_path / 'x').write_text(run())\n"
        "    assert (tmp_path / 'x').read_text() == 'ok'\n\n\n"
        "def test_b(tmpdir):\n    assert tmpdir.check(dir=1) and run() == 'ok'\n"
    )
    report = gate(sc, "files", tool(), test)
    assert report.passed, report.output
    assert report.tests_passed == 2


def test_story_propose_gate_promote_call_quarantine_restore(
    sc: Toolbox, settings: Settings
) -> None:
    staged = sc.stage("adder", ADDER, ADDER_TEST)
    report = sc.run_gate(staged)
    assert report.passed, report.output
    sc.promote("adder", staged.code, staged.test, expected_hash=report.code_hash)

    # Called in this (unconfined) process: the worker's check of its own layer is off here.
    ctx = dataclasses.replace(context_from_settings(settings), require_fs_layer=False)
    registry = Registry(ctx)
    registry.add_all(discover(ctx))  # the next turn's worker
    result = execute_tool(registry, ToolCall("c1", "adder", {"a": 1}))
    assert (result.ok, result.content) == (True, "2")
    failed = execute_tool(registry, ToolCall("c2", "adder", {"a": "x"}))  # schema refuses
    assert not failed.ok and registry.failures == []  # a bad argument is not the tool's fault

    sc.quarantine("adder", "3 strikes: TypeError")
    assert discover(ctx) == []
    sc.restore("adder")
    assert [s.name for s in discover(ctx)] == ["adder"]


class Unkillable:
    """A gate process that outlives its kill (a stalled zygote has not reported it yet)."""

    pid, output, exit_code = 4242, None, None

    def __init__(self) -> None:
        self.kills = 0

    def exited(self) -> bool:
        return self.exit_code is not None

    def kill(self) -> None:
        self.kills += 1

    def reap(self, block: bool = False) -> int | None:
        return self.exit_code

    def close(self) -> None:
        pass


def test_a_gate_past_its_time_is_killed_once_and_its_exit_awaited_without_waiting(
    quick: Toolbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = Unkillable()
    run = quick.start_gate(
        quick.stage("slow", tool(), calling_test("slow", "pass")), lambda *a: proc
    )
    monkeypatch.setattr(run, "deadline", time.monotonic() - 0.01)
    for _ in range(3):
        started = time.monotonic()
        assert run.poll() is None  # killed, not yet reported gone: no report, and no wait
        assert time.monotonic() - started < 0.1
    assert proc.kills == 1
    proc.exit_code = -9  # the exit comes in
    report = run.poll()
    assert report is not None and not report.passed
    assert any("longer than 3s" in f for f in report.findings)


def test_waiting_on_a_killed_gate_that_has_not_exited_does_not_spin(
    quick: Toolbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = Unkillable()
    polls = 0

    def exited() -> bool:
        nonlocal polls
        polls += 1
        return False

    monkeypatch.setattr(proc, "exited", exited)
    monkeypatch.setattr(gate_module, "KILLED_EXIT_S", 0.3)
    run = quick.start_gate(
        quick.stage("slow", tool(), calling_test("slow", "pass")), lambda *a: proc
    )
    monkeypatch.setattr(run, "deadline", time.monotonic() - 0.01)
    report = run.wait()
    assert not report.passed and report.timed_out
    assert polls < 100, f"{polls} polls in 0.3 s: wait() spun instead of sleeping"
