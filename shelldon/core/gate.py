"""The gate: LLM-free checks a staged tool must pass before the owner is asked to promote it.

Three checks, every finding reported at once (smolagents' tool_validation style):

1. imports (AST, both files): no LLM SDK and no ``shelldon`` — ``import x``, ``from x import y``,
   ``__import__("x")``, ``importlib.import_module("x")``, ``importlib.__import__("x")``, also
   through aliases and literal ``exec``/``eval`` strings. A computed module name cannot be
   checked: it is listed in ``dynamic_imports`` for the owner to read, not refused.
2. convention (AST, the tool): ``def run``, ``DESCRIPTION`` a string literal, ``PARAMS_SCHEMA`` a
   JSON-schema object literal (``shelldon.core.manifest.read_declaration``).
3. pytest in a subprocess, only when 1 and 2 found nothing (a known-bad module is never run):
   ``python -S -m pytest`` (no site, so no ``.pth`` hooks) with cwd = the staging dir, plugin
   autoload off, an empty ini of our own (the project's addopts never leak in), no conftest, no
   cache, a sanitized environment with no secrets, its own session (process group),
   RLIMIT_AS/RLIMIT_CPU, a wall-clock timeout that kills the group, and the combined output
   captured and capped (head and tail kept). A probe plugin counts outcomes and watches (with
   ``sys.setprofile``) whether a passing test called the tool's module-level ``run``.

The probe runs inside the process it observes, so a hostile test could forge its report: the gate
catches mistakes, the owner's review of the code is the safety boundary. ``start_gate`` returns
a ``GateRun`` an actor can watch without blocking (``fd``, ``deadline``, ``poll()``);
``run_gate`` waits for it.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import functools
import importlib.util
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from shelldon.config import LimitsSettings, SandboxSettings
from shelldon.core import sandbox
from shelldon.core.limits import ProcessLimits, preexec_with_limits
from shelldon.core.manifest import code_hash, parse_module, read_declaration

log = structlog.get_logger(__name__)

FORBIDDEN_MODULES = ("openai", "anthropic", "google", "litellm", "zhipuai", "ollama", "shelldon")
"""Top-level modules a self-coded tool (or its test) may not import: LLM SDKs and shelldon."""

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

_LOADER_CALLS = frozenset(
    {
        "spec_from_file_location",
        "module_from_spec",
        "exec_module",
        "load_module",
        "SourceFileLoader",
        "run_path",
        "run_module",
        "find_spec",
    }
)


@dataclass(frozen=True, slots=True)
class GateLimits:
    """The bounds of one gate run: wall clock, address space, CPU time and output size."""

    timeout_s: float = 30.0
    address_space_mb: int = 1024
    cpu_s: int = 30
    max_output_chars: int = 16000
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)

    @classmethod
    def from_settings(
        cls, limits: LimitsSettings, sandbox_settings: SandboxSettings | None = None
    ) -> GateLimits:
        """The gate's bounds from ``[limits]``, confined as ``[sandbox]`` says."""
        return cls(
            timeout_s=limits.gate_timeout_s,
            address_space_mb=limits.rlimit_as_mb,
            cpu_s=limits.rlimit_cpu_s,
            max_output_chars=limits.max_tool_output_chars,
            sandbox=sandbox_settings or SandboxSettings(),
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


@dataclass(frozen=True, slots=True)
class StaticScan:
    """What the AST checks found: refusals (``findings``) and unverifiable dynamic imports."""

    findings: tuple[str, ...] = ()
    dynamic_imports: tuple[str, ...] = ()


def _forbidden(module: str) -> bool:
    return module.split(".", 1)[0] in FORBIDDEN_MODULES


def _refusal(where: str, module: str) -> str:
    return (
        f"{where}: imports {module!r}: self-coded tools may not import an LLM SDK "
        f"({', '.join(FORBIDDEN_MODULES[:-1])}) or shelldon; do the work with the standard "
        "library and return text"
    )


@dataclass(slots=True)
class _Aliases:
    """Names that, in this module, mean importlib, builtins or an import function."""

    importlib: set[str] = field(default_factory=lambda: {"importlib"})
    builtins: set[str] = field(default_factory=lambda: {"builtins", "__builtins__"})
    import_funcs: set[str] = field(default_factory=lambda: {"__import__"})


def _collect_aliases(tree: ast.AST) -> _Aliases:
    aliases = _Aliases()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                bound = a.asname or a.name.split(".", 1)[0]
                if a.name == "importlib" or (a.name.startswith("importlib.") and not a.asname):
                    aliases.importlib.add(bound)
                elif a.name == "builtins":
                    aliases.builtins.add(bound)
        elif isinstance(node, ast.ImportFrom) and node.module in ("importlib", "builtins"):
            for a in node.names:
                if a.name in ("import_module", "__import__"):
                    aliases.import_funcs.add(a.asname or a.name)
    return aliases


class _ImportScanner(ast.NodeVisitor):
    """Walks one module and records forbidden and unverifiable imports with line numbers."""

    def __init__(self, filename: str, aliases: _Aliases, depth: int = 0) -> None:
        self.filename = filename
        self.aliases = aliases
        self.depth = depth
        self.findings: list[str] = []
        self.dynamic: list[str] = []
        self._called: set[int] = set()

    def _where(self, node: ast.AST) -> str:
        return f"{self.filename}:{getattr(node, 'lineno', '?')}"

    def _unverifiable(self, node: ast.AST, why: str) -> None:
        snippet = ast.unparse(node)
        if len(snippet) > 80:
            snippet = snippet[:77] + "..."
        self.dynamic.append(f"{self._where(node)}: {snippet} — {why}")

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if _forbidden(a.name):
                self.findings.append(_refusal(self._where(node), a.name))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.findings.append(
                f"{self._where(node)}: relative import: a tool is a single module, import "
                "standard-library modules by their absolute name"
            )
        elif node.module and _forbidden(node.module):
            self.findings.append(_refusal(self._where(node), node.module))

    def _is_import_call(self, func: ast.expr) -> bool:
        if isinstance(func, ast.Name):
            return func.id in self.aliases.import_funcs
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            base = func.value.id
            return (
                base in self.aliases.importlib and func.attr in ("import_module", "__import__")
            ) or (base in self.aliases.builtins and func.attr == "__import__")
        return False

    def _check_dynamic_import(self, node: ast.Call) -> None:
        target: ast.expr | None = node.args[0] if node.args else None
        for kw in node.keywords:
            if kw.arg == "name":
                target = kw.value
        if isinstance(target, ast.Constant) and isinstance(target.value, str):
            name = target.value
            if name.startswith("."):
                self._unverifiable(node, "a relative dynamic import")
            elif _forbidden(name):
                self.findings.append(_refusal(self._where(node), name))
        else:
            self._unverifiable(node, "the module name is computed at run time")

    def _check_code_string(self, node: ast.Call, name: str) -> None:
        arg = node.args[0] if node.args else None
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)) or self.depth > 2:
            self._unverifiable(node, f"{name}() runs code the gate cannot read")
            return
        try:
            inner = ast.parse(arg.value, mode="exec")
        except (SyntaxError, ValueError):
            return  # exec of an unparsable literal raises at run time; nothing gets imported
        sub = _ImportScanner(f"{self._where(node)} ({name} string)", self.aliases, self.depth + 1)
        sub.visit(inner)
        self.findings.extend(sub.findings)
        self.dynamic.extend(sub.dynamic)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if self._is_import_call(func):
            self._called.add(id(func))
            self._check_dynamic_import(node)
        elif isinstance(func, ast.Name) and func.id in ("exec", "eval", "compile"):
            self._check_code_string(node, func.id)
        elif isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) >= 2:
            attr = node.args[1]
            if not isinstance(attr, ast.Constant) or attr.value in ("__import__", "import_module"):
                self._unverifiable(node, "getattr can reach an import function")
        else:
            last = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if last in _LOADER_CALLS:
                self._unverifiable(node, "loads a module by path, the gate cannot see which")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.aliases.import_funcs and id(node) not in self._called:
            self._unverifiable(node, "a reference to an import function")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in ("__import__", "import_module") and id(node) not in self._called:
            self._unverifiable(node, "a reference to an import function")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        key = node.slice
        if isinstance(key, ast.Constant) and key.value in ("__import__", "import_module"):
            self._unverifiable(node, "a lookup of an import function")
        self.generic_visit(node)


def scan_imports(tree: ast.Module, filename: str) -> StaticScan:
    """Forbidden imports (refused) and computed ones (listed) in one parsed module."""
    scanner = _ImportScanner(filename, _collect_aliases(tree))
    scanner.visit(tree)
    return StaticScan(tuple(scanner.findings), tuple(scanner.dynamic))


def static_checks(stem: str, code: str, test: str) -> StaticScan:
    """The AST half of the gate over the tool and its test: every finding at once."""
    findings: list[str] = []
    dynamic: list[str] = []
    for filename, source, is_tool in ((f"{stem}.py", code, True), (f"test_{stem}.py", test, False)):
        tree, error = parse_module(source, filename)
        if tree is None:
            findings.append(error)
            continue
        scan = scan_imports(tree, filename)
        findings.extend(scan.findings)
        dynamic.extend(scan.dynamic_imports)
        if is_tool:
            _decl, problems = read_declaration(tree)
            findings.extend(f"{filename}: {p}" for p in problems)
    return StaticScan(tuple(findings), tuple(dynamic))


_PROBE_SOURCE = '''\
"""shelldon gate probe: counts test outcomes and whether a passing test called the tool's run."""
import json
import os
import sys
import sysconfig
import threading

import pytest

_TOOL = os.path.realpath(os.environ["SHELLDON_GATE_TOOL"])
_REPORT = os.environ["SHELLDON_GATE_REPORT"]
_files = {}
_called = [False]
_counts = {
    "collected": 0,
    "collect_errors": 0,
    "passed": 0,
    "failed": 0,
    "skipped": 0,
    "passed_calling_run": 0,
}


def _profile(frame, event, arg):
    if event == "call":
        code = frame.f_code
        if code.co_qualname == "run":
            hit = _files.get(code.co_filename)
            if hit is None:
                hit = _files[code.co_filename] = os.path.realpath(code.co_filename) == _TOOL
            if hit:
                _called[0] = True


def pytest_collectreport(report):
    if report.failed:
        _counts["collect_errors"] += 1


def pytest_collection_finish(session):
    _counts["collected"] = len(session.items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _called[0] = False
    sys.setprofile(_profile)
    threading.setprofile(_profile)
    try:
        return (yield)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


def pytest_runtest_logreport(report):
    if report.failed:
        _counts["failed"] += 1
    elif report.skipped and report.when in ("setup", "call"):
        _counts["skipped"] += 1
    elif report.when == "call" and report.passed:
        _counts["passed"] += 1
        if _called[0]:
            _counts["passed_calling_run"] += 1


def pytest_sessionfinish(session, exitstatus):
    _counts["exitstatus"] = int(exitstatus)
    tmp = _REPORT + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(_counts, fh)
    os.replace(tmp, _REPORT)
'''


class _Output:
    """Combined output kept within a cap: the head and the tail, what was dropped counted."""

    def __init__(self, cap_chars: int) -> None:
        self.half = max(cap_chars // 2, 256)
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_len += len(chunk)
        while self.tail_len - len(self.tail[0]) >= self.half:
            self.dropped += len(self.tail[0])
            self.tail_len -= len(self.tail.popleft())

    def text(self) -> str:
        tail = b"".join(self.tail)
        dropped = self.dropped + max(len(tail) - self.half, 0)
        tail = tail[-self.half :]
        head = self.head.decode("utf-8", "replace")
        rest = tail.decode("utf-8", "replace")
        if dropped:
            return f"{head}\n…[{dropped} bytes of output dropped]…\n{rest}"
        return head + rest


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
    ) -> None:
        self.name = name
        self._static = static
        self._digest = digest
        self._limits = limits
        self._on_done = on_done
        self._started = time.monotonic()
        self.deadline = self._started + limits.timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._private: Path | None = None
        self._output = _Output(limits.max_output_chars)
        self._report: GateReport | None = None
        self.output_closed = False
        self._cgroup: sandbox.TurnCgroup | None = None
        self._unavailable = False

    @property
    def pid(self) -> int | None:
        """The pytest process (also its process group id), or None if none was started."""
        return self._proc.pid if self._proc else None

    @property
    def fd(self) -> int | None:
        """The read end of the combined-output pipe, or None once closed / never opened."""
        if self._proc is None or self._proc.stdout is None or self.output_closed:
            return None
        return self._proc.stdout.fileno()

    def _launch(self, staging: Path, tool: Path, test: Path) -> None:
        private = Path(tempfile.mkdtemp(prefix=".gate-", dir=staging))
        self._private = private
        (private / f"{PROBE_MODULE}.py").write_text(_PROBE_SOURCE, encoding="utf-8")
        ini = private / "gate.ini"
        ini.write_text("[pytest]\n", encoding="utf-8")
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(staging),
            "LANG": "C.UTF-8",
            "PYTHONUTF8": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": os.pathsep.join([str(private), *_package_dirs()]),
            "TMPDIR": str(private),
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            "SHELLDON_GATE_TOOL": str(tool),
            "SHELLDON_GATE_REPORT": str(private / "report.json"),
        }
        # -S: no site module, so no .pth files run (an editable install's finder alone cost
        # ~0.1 s of CPU); pytest's own directory is put on PYTHONPATH instead.
        argv = [sys.executable, "-S", "-m", "pytest", "-q", "-c", str(ini)]
        argv += ["--rootdir", str(staging)]
        argv += ["--noconftest", "-p", PROBE_MODULE]
        for plugin in _UNUSED_PLUGINS:
            argv += ["-p", f"no:{plugin}"]
        argv.append(test.name)
        limits = ProcessLimits(self._limits.address_space_mb, self._limits.cpu_s)
        # Kernel confinement in the child before exec: read-write only on the staging dir (its
        # private dir inside), no IP sockets, no ptrace; its own cgroup where one can be made.
        self._cgroup = sandbox.open_turn_cgroup(
            self._limits.sandbox, f"shelldon-gate-{os.getpid()}-{private.name.lstrip('.')}"
        )
        confined = sandbox.gate_preexec(
            self._limits.sandbox,
            staging,
            private,
            _package_dirs(),
            then=preexec_with_limits(limits),
            cgroup=self._cgroup,
        )
        self._proc = subprocess.Popen(
            argv,
            cwd=staging,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=confined,  # noqa: PLW1509 - RLIMITs and the sandbox need it
            close_fds=True,
        )
        assert self._proc.stdout is not None
        os.set_blocking(self._proc.stdout.fileno(), False)
        log.info("gate_started", tool=self.name, pid=self._proc.pid)

    def _read_available(self, max_chunks: int = 64) -> None:
        """Read what the pipe holds now; bounded, so a child that never stops writing (or one
        that escaped the group and keeps the pipe open) cannot hold ``poll`` hostage."""
        fd = self.fd
        for _ in range(max_chunks):
            if fd is None:
                return
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                chunk = b""
            if not chunk:
                self._close_output()
                return
            self._output.add(chunk)

    def _close_output(self) -> None:
        if self._proc is not None and self._proc.stdout is not None and not self.output_closed:
            self.output_closed = True
            self._proc.stdout.close()

    def _leader_exited(self) -> bool:
        """Has pytest exited? Checked without reaping, so its group id stays ours to kill."""
        assert self._proc is not None
        if self._proc.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self._proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def _kill_group(self) -> None:
        assert self._proc is not None
        if self._cgroup is not None:
            self._cgroup.kill()  # stragglers that left the process group die too
        if self._proc.returncode is None:
            # The leader is unreaped (maybe a zombie), so the group id cannot have been reused.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()

    def poll(self) -> GateReport | None:
        """The report once the gate is done, else None; never blocks."""
        if self._report is not None:
            return self._report
        if self._proc is None:
            return self._finish(None, timed_out=False, cancelled=False)
        self._read_available()
        exited = self._leader_exited()
        if not exited and time.monotonic() < self.deadline:
            return None
        self._kill_group()
        self._read_available()  # what the group wrote before it died
        self._close_output()
        return self._finish(self._proc.returncode, timed_out=not exited, cancelled=False)

    def kill(self) -> GateReport:
        """Stop the gate now (kills pytest's whole process group); the report says cancelled."""
        if self._report is not None:
            return self._report
        if self._proc is not None:
            self._kill_group()
            self._close_output()
        return self._finish(self._proc.returncode if self._proc else None, False, cancelled=True)

    def wait(self) -> GateReport:
        """Block until the gate is done (or timed out) and return its report."""
        while True:
            report = self.poll()
            if report is not None:
                return report
            remaining = max(self.deadline - time.monotonic(), 0.0)
            fd = self.fd
            if fd is None:
                time.sleep(min(remaining, 0.01))
            else:
                select.select([fd], [], [], min(remaining, 0.5))

    def __enter__(self) -> GateRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

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
        if counts is None and b"No module named pytest" in self._output.head:
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
        if self._proc is not None:
            more, passed_tests = self._verdict(returncode, timed_out, cancelled)
            findings += more
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)
        if self._cgroup is not None:
            self._cgroup.close()
        report = GateReport(
            name=self.name,
            passed=not findings,
            unavailable=self._unavailable,
            findings=tuple(findings),
            output=self._output.text(),
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
) -> GateRun:
    """Check ``<staging>/<name>.py`` and ``test_<name>.py``: run the static checks now and, if
    they found nothing, start pytest. ``on_done`` is called once with the report."""
    tool, test = staging / f"{name}.py", staging / f"test_{name}.py"
    try:
        code_bytes = tool.read_bytes()
        code, test_src = code_bytes.decode("utf-8"), test.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        unreadable = StaticScan((f"the staged pair cannot be read: {exc}",))
        return GateRun(name, unreadable, "", limits, on_done)
    static = static_checks(name, code, test_src)
    run = GateRun(name, static, code_hash(code_bytes), limits, on_done)
    if static.findings:
        return run
    missing = pytest_missing()
    if missing:
        run._static = StaticScan((missing,), static.dynamic_imports)
        run._unavailable = True
        return run
    try:
        run._launch(staging, tool, test)
    except OSError as exc:
        run._static = StaticScan((f"pytest could not be started: {exc}",), static.dynamic_imports)
        run._unavailable = True
    return run


def run_gate(staging: Path, name: str, limits: GateLimits) -> GateReport:
    """Gate the staged pair ``name`` and wait for the verdict."""
    return start_gate(staging, name, limits).wait()
