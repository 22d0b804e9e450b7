"""The gate: LLM-free checks a staged tool must pass before the owner is asked to promote it.

1. the static half, by AST (``shelldon.toolbox.gate_scan``): no LLM SDK and no ``shelldon`` imported
   by the tool or its test, and the tool's convention (``run``, ``DESCRIPTION``,
   ``PARAMS_SCHEMA``); every finding at once;
2. pytest in a subprocess, only when 1 found nothing (a known-bad module is never run):
   ``python -S -m pytest`` (no site, so no ``.pth`` hooks) with cwd = the staging dir, plugin
   autoload off, an empty ini of our own (the project's addopts never leak in), no conftest, no
   cache, a sanitized environment with no secrets, its own session (process group),
   RLIMIT_AS/RLIMIT_CPU, the kernel sandbox, a wall-clock timeout that kills the group, and the
   combined output captured and capped (head and tail kept). The probe plugin
   (``shelldon.toolbox.gate_probe``, copied into the run) counts outcomes and whether a passing
   test called the tool's ``run``.

``start_gate`` returns a ``GateRun`` an actor watches without blocking (``fd``, ``poll()``);
``wait`` waits. No pytest here is ``GateReport.unavailable``, never a fault of the tool.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import select
import shutil
import signal
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import structlog

from shelldon.config import LimitsSettings, SandboxSettings
from shelldon.proc import sandbox
from shelldon.proc.child import Child, SpawnError
from shelldon.proc.limits import ProcessLimits, preexec_with_limits
from shelldon.proc.output import Output
from shelldon.toolbox.gate_scan import StaticScan, static_checks
from shelldon.toolbox.manifest import code_hash

log = structlog.get_logger(__name__)


PROBE_FILE = Path(__file__).with_name("gate_probe.py")
"""The pytest plugin the gate loads into each run (a copy, under ``PROBE_MODULE``)."""

PROBE_MODULE = "_shelldon_gate_probe"
# A leading underscore: no tool stem can take this module name (stems never start with "_").

# Built-in pytest plugins a gate run never uses; skipping them trims start-up a little.
# (legacypath stays: it provides the tmpdir fixture that model-written tests often use.)
_UNUSED_PLUGINS = (
    "cacheprovider",
    "pastebin",
    "junitxml",
    "doctest",
    "setuponly",
    "setupplan",
    "stepwise",
    "terminalprogress",
)


@dataclass(frozen=True, slots=True)
class GateLimits:
    """The bounds of one gate run: wall clock, address space, CPU time and output size."""

    timeout_s: float
    address_space_mb: int
    cpu_s: int
    max_output_chars: int
    sandbox: SandboxSettings

    @classmethod
    def from_settings(cls, limits: LimitsSettings, sandbox_settings: SandboxSettings) -> GateLimits:
        """The gate's bounds from ``[limits]``, confined as ``[sandbox]`` says."""
        return cls(
            timeout_s=limits.gate_timeout_s,
            address_space_mb=limits.rlimit_as_mb,
            cpu_s=limits.rlimit_cpu_s,
            max_output_chars=limits.max_tool_output_chars,
            sandbox=sandbox_settings,
        )


@dataclass(frozen=True, slots=True)
class GateReport:
    """The gate's verdict on one staged tool; ``findings`` says every reason it did not pass."""

    name: str
    passed: bool
    findings: tuple[str, ...]
    output: str
    duration_s: float
    dynamic_imports: tuple[str, ...]
    code_hash: str
    tests_passed: int = 0
    timed_out: bool = False
    # The gate could not judge the tool (its own install is broken): not the code's fault.
    unavailable: bool = False


@functools.cache
def _package_dirs() -> tuple[str, ...]:
    """Where pytest and its dependencies are installed (found without importing pytest)."""
    dirs: list[str] = []
    spec = importlib.util.find_spec("pytest")
    if spec is not None and spec.origin:
        dirs.append(str(Path(spec.origin).parent.parent))
    paths = sysconfig.get_paths()
    for key in ("purelib", "platlib"):
        if paths.get(key) and paths[key] not in dirs:
            dirs.append(paths[key])
    return tuple(dirs)


def pytest_missing() -> str:
    """Why this interpreter cannot run the gate's pytest ("" when it can)."""
    if importlib.util.find_spec("pytest") is not None:
        return ""
    return (
        f"pytest is not installed for {sys.executable}: the gate cannot run any tool's test "
        "(the tool was not at fault); reinstall shelldon into that environment, which brings "
        "pytest with it"
    )


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


KILLED_EXIT_S = 5.0
"""How long a gate killed at its deadline may take to be reported gone before ``poll`` waits."""


@runtime_checkable
class GateProcess(Protocol):
    """A running gate pytest as ``GateRun`` watches it: a local ``Child``, or one the zygote
    forked (``shelldon.worker.zygote``)."""

    pid: int
    output: Output | None
    exit_code: int | None

    def exited(self) -> bool: ...
    def kill(self) -> None: ...
    def reap(self, block: bool = False) -> int | None: ...
    def close(self) -> None: ...


class PendingGate(Protocol):
    """A gate's pytest asked of another process (the zygote), until it arrives: readable on
    ``fileno()`` then; ``poll`` never waits (SpawnError: it could not be started)."""

    def fileno(self) -> int: ...
    def poll(self) -> GateProcess | None: ...
    def close(self) -> None: ...


Launch = Callable[[Path, Path, str, GateLimits], GateProcess | PendingGate]
"""Starts the gate's pytest on ``(staging, private dir, tool name, limits)``."""


def launch_pytest(staging: Path, private: Path, name: str, limits: GateLimits) -> Child:
    """Start pytest on ``test_<name>.py`` in ``staging``, confined and bounded by ``limits``,
    as a child of the calling process. Raises ``OSError`` if it cannot be started."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(staging),
        "LANG": "C.UTF-8",
        "PYTHONUTF8": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join([str(private), *_package_dirs()]),
        "TMPDIR": str(private),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "SHELLDON_GATE_TOOL": str(staging / f"{name}.py"),
        "SHELLDON_GATE_REPORT": str(private / "report.json"),
    }
    # -S: no site module, so no .pth files run (an editable install's finder alone cost
    # ~0.1 s of CPU); pytest's own directory is put on PYTHONPATH instead.
    argv = [sys.executable, "-S", "-m", "pytest", "-q", "-c", str(private / "gate.ini")]
    argv += ["--rootdir", str(staging)]
    argv += ["--noconftest", "-p", PROBE_MODULE]
    for plugin in _UNUSED_PLUGINS:
        argv += ["-p", f"no:{plugin}"]
    argv.append(f"test_{name}.py")
    rlimits = ProcessLimits(limits.address_space_mb, limits.cpu_s)
    # Kernel confinement in the child before exec: read-write only on the staging dir (its
    # private dir inside), no IP sockets, no ptrace; its own cgroup where one can be made.
    cgroup = sandbox.open_turn_cgroup(
        limits.sandbox, f"shelldon-gate-{os.getpid()}-{private.name.lstrip('.')}"
    )
    confined = sandbox.gate_preexec(
        limits.sandbox,
        staging,
        private,
        _package_dirs(),
        then=preexec_with_limits(rlimits),
        cgroup=cgroup,
    )
    try:
        return Child.spawn(
            argv,
            cwd=staging,
            env=env,
            preexec=confined,
            capture=limits.max_output_chars,
            tail=True,
            cgroup=cgroup,
        )
    except BaseException:
        if cgroup is not None:
            cgroup.close()
        raise


class GateRun:
    """One gate in progress. Watch ``fd`` (readable on output and at EOF) and call ``poll()`` on
    each wake-up and once ``deadline`` (``time.monotonic()``) has passed; ``poll`` returns the
    report when done. ``fd`` and ``pid`` are None when the static checks already decided."""

    def __init__(
        self,
        name: str,
        static: StaticScan,
        digest: str,
        limits: GateLimits,
        on_done: Callable[[GateReport], None] | None = None,
        start: Launch | None = None,
    ) -> None:
        self.name = name
        self._start: Launch = start or launch_pytest
        self._static = static
        self._digest = digest
        self._limits = limits
        self._on_done = on_done
        self._started = time.monotonic()
        self.deadline = self._started + limits.timeout_s
        self._child: GateProcess | None = None
        self._waiting: GateProcess | PendingGate | None = None
        self._private: Path | None = None
        self._report: GateReport | None = None
        self._unavailable = False
        self._timed_out = False

    @property
    def pid(self) -> int | None:
        """The pytest process (also its process group id), or None if none was started."""
        return self._child.pid if self._child else None

    @property
    def fd(self) -> int | None:
        """What to watch: the pytest being started, then the read end of its combined-output
        pipe; None once closed / never opened."""
        if self._waiting is not None and not isinstance(self._waiting, GateProcess):
            return self._waiting.fileno()
        output = self._child.output if self._child is not None else None
        return output.fd if output is not None and not output.eof else None

    def _launch(self, staging: Path) -> None:
        private = Path(tempfile.mkdtemp(prefix=".gate-", dir=staging))
        self._private = private
        shutil.copyfile(PROBE_FILE, private / f"{PROBE_MODULE}.py")
        (private / "gate.ini").write_text("[pytest]\n", encoding="utf-8")
        self._waiting = self._start(staging, private, self.name, self._limits)
        self._arrived()

    def _cannot_start(self, why: object) -> None:
        findings = (f"pytest could not be started: {why}",)
        self._static, self._unavailable = StaticScan(findings, self._static.dynamic_imports), True

    def _arrived(self) -> bool:
        """Whether the pytest being started is there (or could not be); never waits."""
        waiting = self._waiting
        if waiting is None:
            return True
        try:
            child = waiting if isinstance(waiting, GateProcess) else waiting.poll()
        except SpawnError as exc:
            self._waiting = None
            self._cannot_start(exc)
            return True
        if child is not None:
            self._waiting, self._child = None, child
            log.info("gate_started", tool=self.name, pid=child.pid)
        return child is not None

    def _stop(self) -> None:
        """Kill pytest's cgroup and group, reap it, and read what it wrote before it died."""
        child = self._child
        assert child is not None
        child.kill()
        child.reap(block=True)
        if child.output is not None:
            child.output.drain()
            child.output.close()

    def poll(self) -> GateReport | None:
        """The report once the gate is done, else None; never blocks."""
        if self._report is not None:
            return self._report
        if not self._arrived():
            if time.monotonic() < self.deadline:
                return None
            self._cannot_start("it did not start in time")
            return self.kill()
        child = self._child
        if child is None:
            return self._finish(None, timed_out=False, cancelled=False)
        if child.output is not None:
            child.output.drain()
        exited, now = child.exited(), time.monotonic()
        if not exited and now < self.deadline:
            return None
        if not exited and now < self.deadline + KILLED_EXIT_S:
            if not self._timed_out:  # its exit is awaited on later polls, not here
                self._timed_out = True
                child.kill()
            return None
        self._stop()
        return self._finish(child.exit_code, self._timed_out or not exited, cancelled=False)

    def kill(self) -> GateReport:
        """Stop the gate now (kills pytest's whole process group); the report says cancelled."""
        if self._report is not None:
            return self._report
        if self._waiting is not None:
            self._waiting.close()
            self._waiting = None
        if self._child is not None:
            self._stop()
        return self._finish(self._child.exit_code if self._child else None, False, cancelled=True)

    def wait(self) -> GateReport:
        """Block until the gate is done (or timed out) and return its report."""
        while True:
            report = self.poll()
            if report is not None:
                return report
            # Past the deadline a killed gate's exit is awaited on later polls: never spin.
            remaining = max(self.deadline - time.monotonic(), 0.01)
            fd = self.fd
            if fd is None:
                time.sleep(min(remaining, 0.01))
            else:
                select.select([fd], [], [], min(remaining, 0.5))

    def _output_head(self) -> bytes:
        output = self._child.output if self._child is not None else None
        return bytes(output.head) if output is not None else b""

    def _probe_report(self) -> dict[str, Any] | None:
        if self._private is None:
            return None
        try:
            data = json.loads((self._private / "report.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _verdict(
        self, returncode: int | None, timed_out: bool, cancelled: bool
    ) -> tuple[list[str], int]:
        if cancelled:
            return ["the gate was cancelled before the tests finished"], 0
        if timed_out:
            return [
                f"the tests ran longer than {self._limits.timeout_s:g}s and were killed "
                "(an endless loop, a long sleep, or waiting for input?)"
            ], 0
        test = f"test_{self.name}.py"
        if returncode is not None and returncode < 0:
            return [
                f"pytest was killed by {_signal_name(returncode)} (the CPU-time limit of "
                f"{self._limits.cpu_s}s or memory limit of {self._limits.address_space_mb} MB?)"
            ], 0
        counts = self._probe_report()
        if counts is None and b"No module named pytest" in self._output_head():
            # This interpreter finds pytest but the confined run could not import it.
            self._unavailable = True
            return [
                f"pytest could not be imported by the gate run of {sys.executable} (its "
                "packages are outside what the sandbox lets it read?); the tool was not at fault"
            ], 0
        if counts is None:
            return [
                f"pytest ended (exit code {returncode}) without its summary: did the code exit "
                "the process or fail to start? See the output"
            ], 0
        passed = int(counts.get("passed", 0))
        findings: list[str] = []
        if counts.get("collect_errors", 0):
            findings.append(
                f"{test} could not be collected (an import error or an exception at module "
                "level?); see the output"
            )
        elif int(counts.get("collected", 0)) == 0:
            findings.append(
                f"{test} collected no tests: write at least one `def test_...():` that calls "
                f"run(...) from {self.name} and asserts on its result"
            )
        elif counts.get("failed", 0):
            findings.append(f"{counts['failed']} test step(s) failed in {test}; see the output")
        elif passed == 0:
            findings.append(f"every test in {test} was skipped: at least one must run and pass")
        elif int(counts.get("passed_calling_run", 0)) == 0:
            findings.append(
                f"no passing test in {test} called {self.name}.run(...): a test must call the "
                "tool's run and check what it returns"
            )
        if not findings and returncode != 0:
            findings.append(f"pytest exited with code {returncode}; see the output")
        return findings, passed

    def _finish(self, returncode: int | None, timed_out: bool, cancelled: bool) -> GateReport:
        findings = list(self._static.findings)
        passed_tests = 0
        output = ""
        if self._child is not None:
            more, passed_tests = self._verdict(returncode, timed_out, cancelled)
            findings += more
            if self._child.output is not None:
                output = self._child.output.text()
            self._child.close()  # its cgroup too: killed, removed
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)
        report = GateReport(
            name=self.name,
            passed=not findings,
            unavailable=self._unavailable,
            findings=tuple(findings),
            output=output,
            duration_s=time.monotonic() - self._started,
            dynamic_imports=self._static.dynamic_imports,
            code_hash=self._digest,
            tests_passed=passed_tests,
            timed_out=timed_out,
        )
        self._report = report
        log.info(
            "gate_finished",
            tool=self.name,
            passed=report.passed,
            findings=len(report.findings),
            duration_s=round(report.duration_s, 3),
            timed_out=timed_out,
            code_hash=self._digest,
        )
        if self._on_done is not None:
            self._on_done(report)
        return report


def start_gate(
    staging: Path,
    name: str,
    limits: GateLimits,
    on_done: Callable[[GateReport], None] | None = None,
    start: Launch | None = None,
) -> GateRun:
    """Check ``<staging>/<name>.py`` and ``test_<name>.py``: the static checks now, then, if they
    found nothing, pytest (``start``: here by default); ``on_done`` hears the report once."""
    tool, test = staging / f"{name}.py", staging / f"test_{name}.py"
    try:
        code_bytes = tool.read_bytes()
        code, test_src = code_bytes.decode("utf-8"), test.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        unreadable = StaticScan((f"the staged pair cannot be read: {exc}",))
        return GateRun(name, unreadable, "", limits, on_done)
    static = static_checks(name, code, test_src)
    run = GateRun(name, static, code_hash(code_bytes), limits, on_done, start)
    if static.findings:
        return run
    missing = pytest_missing()
    if missing:
        run._static = StaticScan((missing,), static.dynamic_imports)
        run._unavailable = True
        return run
    try:
        run._launch(staging)
    except (OSError, SpawnError) as exc:
        run._cannot_start(exc)
    return run
