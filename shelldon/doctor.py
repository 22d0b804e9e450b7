"""``shelldon doctor``: checks a person can read, one line each, and an exit status.

It grows with each capability (sandbox layers, limits, systemd). Secrets are reported as found
or missing with where they came from — never their values. Checked "for run" (the default once
a config file exists, or ``--for run``), a missing bot token, a malformed one and an empty
``allowed_users`` are failures: the service could not do its job.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import resource
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from shelldon import __version__
from shelldon.config import Settings
from shelldon.preflight import token_shape_problem
from shelldon.proc import sandbox
from shelldon.proc.sandbox.memory import lists_memory, read_meminfo
from shelldon.secrets import SecretMissingError, fallback_key, find_secret, provider_key


@dataclass(frozen=True, slots=True)
class Check:
    """One finding: ``ok`` False means the service would not work as configured."""

    name: str
    ok: bool
    detail: str
    required: bool = True


UNIT_PATH = Path("/etc/systemd/system/shelldon.service")
"""Where ``deploy/install.sh`` puts the unit."""

SERVICE_TURNS = Path("/sys/fs/cgroup/system.slice/shelldon.service/turns")
"""Where the running unit keeps its per-turn cgroups (it creates the directory at start)."""

MAX_EXPOSURE = 2.0
"""The highest ``systemd-analyze security`` exposure the unit may have."""

DEFAULT_MEMORY_MAX_MB = 400
"""The unit's ``MemoryMax=`` when no unit is installed to read it from."""

PEAK_BUDGET_MB = 150
"""The service's peak PSS budget during a turn (the design's budget with the Anthropic
provider); less available memory than this is a warning."""


def _landlock_check() -> Check:
    abi = sandbox.landlock_abi()
    if abi:
        return Check("landlock", True, f"ABI {abi}", required=False)
    # Raspberry Pi OS's stock kernel has no Landlock; the sandbox falls back to other layers.
    return Check("landlock", False, "not available (other sandbox layers are used)", False)


def _sandbox_checks(settings: Settings) -> list[Check]:
    checks = []
    for name, active, detail in sandbox.describe(settings):
        check = Check(f"sandbox {name}", active, detail)
        # doctor runs outside the unit: what counts is the running service's subtree.
        if name == "cgroup per turn" and not active and SERVICE_TURNS.is_dir():
            check = Check(check.name, True, f"{SERVICE_TURNS} (the running service's)")
        if name == "memory cap" and not active and _service_turns_capped():
            check = Check(check.name, True, f"cgroup memory.max per turn under {SERVICE_TURNS}")
        # A layer is required only where [sandbox] mode = required demands it at start.
        checks.append(dataclasses.replace(check, required=sandbox.required_layer(settings, name)))
    return checks


def _service_turns_capped() -> bool:
    return lists_memory(SERVICE_TURNS / "cgroup.subtree_control")


def _memory_controller_check(settings: Settings) -> Check:
    """The kernel's memory cgroup controller: without it the unit's MemoryMax and MemoryHigh
    and every per-turn memory.max do nothing (a failure only where ``[sandbox] mode`` is
    ``required``: the owner asked for strict checks)."""
    if sandbox.kernel_memory_controller():
        return Check("memory controller", True, "on: MemoryMax and per-turn memory.max apply")
    return Check(
        "memory controller",
        False,
        "off in the kernel: the unit's MemoryMax/MemoryHigh and the per-turn memory cap do "
        f"nothing, only RLIMIT_AS bounds a turn; {sandbox.CMDLINE_FIX}",
        required=settings.sandbox.mode == "required",
    )


def _rlimit_check(settings: Settings) -> Check:
    wanted = {
        "RLIMIT_AS": (resource.RLIMIT_AS, settings.limits.rlimit_as_mb * 1024 * 1024),
        "RLIMIT_CPU": (resource.RLIMIT_CPU, settings.limits.rlimit_cpu_s),
    }
    refused = []
    for name, (which, value) in wanted.items():
        _soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY and value > hard:
            refused.append(f"{name} {value} above the hard limit {hard}")
    if refused:
        return Check("rlimits", False, "; ".join(refused))
    return Check(
        "rlimits",
        True,
        f"RLIMIT_AS {settings.limits.rlimit_as_mb} MB, RLIMIT_CPU {settings.limits.rlimit_cpu_s} s "
        "can be applied to workers",
    )


def unit_memory_max_mb(unit_text: str) -> int | None:
    """``MemoryMax=`` of a unit file in MiB (K/M/G suffixes), or None when it has none."""
    found = re.findall(r"^MemoryMax=([0-9]+)([KMG]?)\s*$", unit_text, re.MULTILINE)
    if not found:
        return None
    number, suffix = found[-1]
    scale = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024}[suffix]
    return int(int(number) * scale)


def _memory_check(unit_text: str | None, meminfo: dict[str, int]) -> Check:
    cap = (unit_memory_max_mb(unit_text) if unit_text else None) or DEFAULT_MEMORY_MAX_MB
    if "MemAvailable" not in meminfo:
        return Check("memory", False, "cannot read /proc/meminfo", required=False)
    available = meminfo["MemAvailable"] // 1024
    total = meminfo.get("MemTotal", 0) // 1024
    detail = f"{available} MB available of {total} MB; MemoryMax {cap} MB"
    if available < PEAK_BUDGET_MB:
        detail += f": below the {PEAK_BUDGET_MB} MB a turn may need"
        return Check("memory", False, detail, required=False)
    if total and total < cap:
        detail += " (above the RAM: the kernel's OOM killer acts before the cap)"
    return Check("memory", True, detail, required=False)


def exposure_score(unit: Path) -> tuple[float | None, str]:
    """``systemd-analyze security --offline=true`` overall exposure of ``unit``, or None and why."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return None, "systemd-analyze not found"
    try:
        proc = subprocess.run(
            [tool, "security", "--offline=true", "--no-pager", str(unit)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"systemd-analyze failed: {exc}"
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", proc.stdout)
    if match is None:
        return None, f"systemd-analyze gave no score: {(proc.stderr or proc.stdout)[-200:]}"
    return float(match.group(1)), ""


def _unit_state() -> str:
    """ ", enabled, active" as systemd sees the unit, when systemd runs this machine."""
    tool = shutil.which("systemctl")
    if tool is None or not Path("/run/systemd/system").is_dir():
        return ""
    states = []
    for verb in ("is-enabled", "is-active"):
        try:
            proc = subprocess.run(
                [tool, verb, "shelldon.service"], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        states.append(proc.stdout.strip() or "unknown")
    return "".join(f", {state}" for state in states)


def _systemd_checks(unit: Path) -> list[Check]:
    if not unit.exists():
        if shutil.which("systemctl") is None:
            return [Check("systemd unit", True, "no systemd here", required=False)]
        return [Check("systemd unit", False, f"not installed at {unit} (deploy/install.sh)", False)]
    checks = [Check("systemd unit", True, f"installed at {unit}{_unit_state()}", required=False)]
    score, why = exposure_score(unit)
    if score is None:
        checks.append(Check("unit exposure", False, why, required=False))
    else:
        ok = score <= MAX_EXPOSURE
        checks.append(Check("unit exposure", ok, f"{score} (limit {MAX_EXPOSURE})"))
    return checks


def _secret_file_mode_check(name: str, where: str) -> Check | None:
    """A secret file that others may read is a warning (its value is never shown)."""
    path = Path(where)
    try:
        mode = path.stat().st_mode
    except OSError:
        return None  # an environment variable, or gone since
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return Check(
            f"secret {name} mode",
            False,
            f"{path} is readable by others (mode {stat.S_IMODE(mode):04o}): chmod 600 {path}",
            required=False,
        )
    return None


def gate_check(settings: Settings) -> Check:
    """Gate a small built-in tool end to end (AST checks + sandboxed pytest), as a proposal
    would be, in a scratch toolbox: proof that this install can gate the model's tools."""
    import tempfile
    import time

    from shelldon.demo import WORD_COUNT_CODE, WORD_COUNT_TEST
    from shelldon.store import Store
    from shelldon.toolbox.policy import selfcoded_refusal
    from shelldon.toolbox.toolbox import Toolbox, ToolboxError

    off = selfcoded_refusal(settings.sandbox)
    if off:
        return Check("gate", False, f"not run: {off}", required=False)
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="shelldon-doctor-") as scratch,
        Store(Path(scratch) / "doctor.db") as store,
    ):
        selfcode = Toolbox(Path(scratch) / "toolbox", store, settings.limits, settings.sandbox)
        try:
            staged = selfcode.stage("word_count", WORD_COUNT_CODE, WORD_COUNT_TEST)
        except (ToolboxError, OSError) as exc:
            return Check("gate", False, f"could not stage a sample tool: {exc}")
        report = selfcode.run_gate(staged)
    took = time.monotonic() - started
    if report.passed:
        return Check(
            "gate",
            True,
            f"a sample tool passed (AST checks + sandboxed pytest, {report.tests_passed} tests) "
            f"in {took:.2f} s",
        )
    return Check("gate", False, "a sample tool failed: " + "; ".join(report.findings))


def selfcoded_check(settings: Settings) -> Check:
    """Whether self-coded tools can be used here: only under a filesystem layer."""
    from shelldon.toolbox.policy import selfcoded_refusal

    off = selfcoded_refusal(settings.sandbox)
    if off:
        return Check("self-coded tools", False, off, required=False)
    layer = sandbox.plan(settings.sandbox).fs
    return Check("self-coded tools", True, f"on: gated and run under {layer}", required=False)


def toolbox_check(settings: Settings) -> Check | None:
    """The toolbox as the service will find it: an old one still in the workspace (moved at the
    next start), or files that will not run because they are not what the owner approved."""
    from shelldon.toolbox.legacy import UNAPPROVED_DIR, legacy_dirs

    old = legacy_dirs(settings.workspace)
    if old:
        names = ", ".join(d.name for d in old)
        return Check(
            "toolbox",
            False,
            f"an old toolbox is in the workspace ({names}): the next start moves the tools "
            f"whose code matches your approvals in the audit log into {settings.toolbox}, and "
            f"the rest into {settings.workspace / UNAPPROVED_DIR} (never run)",
            required=False,
        )
    if not (settings.toolbox.is_dir() and settings.database.is_file()):
        return None
    from shelldon.store import Store, StoreError
    from shelldon.toolbox.toolbox import Toolbox

    try:
        with Store(settings.database) as store:
            tampered = Toolbox.from_settings(settings, store).tampered()
    except (StoreError, OSError) as exc:
        return Check("toolbox", False, f"cannot be checked: {exc}", required=False)
    if tampered:
        listed = ", ".join(f"{t.name} ({t.problem})" for t in tampered[:10])
        return Check(
            "toolbox", False, f"not run, not the code you approved: {listed}", required=False
        )
    return Check("toolbox", True, str(settings.toolbox), required=False)


def _fallback_check(settings: Settings) -> Check:
    """Which provider answers when the main one cannot (its key is a secret check below)."""
    fb = settings.brain.fallback
    if not fb.provider:
        return Check("fallback", True, "none ([brain.fallback] not set)", required=False)
    where = f", {fb.base_url}" if fb.base_url else ""
    return Check("fallback", True, f"{fb.provider} (model {fb.model}{where}, key {fb.key_name})")


def _secret_checks(settings: Settings, for_run: bool) -> list[Check]:
    """Each secret found (never its value) or missing, required when the configured provider,
    its fallback or ``run`` needs it; a bot token found is checked for its shape."""
    checks: list[Check] = []
    brain = settings.brain
    key, fb_key = provider_key(brain), fallback_key(brain)
    needed = {k[0] for k in (key, fb_key) if k and k[1]}
    # A key named but not needed: its server is local (the main's, else the fallback's).
    local = {
        k[0]: url for k, url in ((fb_key, brain.fallback.base_url), (key, brain.base_url)) if k
    }
    names = ["telegram_token", "anthropic_api_key", "openai_api_key"]
    if fb_key is not None and fb_key[0] not in names:
        names.append(fb_key[0])
    for name in names:
        try:
            found = find_secret(name, settings.vault)
        except SecretMissingError as exc:
            checks.append(Check(f"secret {name}", False, str(exc)))
            continue
        if found is not None:
            checks.append(Check(f"secret {name}", True, f"found in {found[1]}"))
            mode_check = _secret_file_mode_check(name, found[1])
            if mode_check is not None:
                checks.append(mode_check)
            if name == "telegram_token":
                problem = token_shape_problem(found)
                shape = problem or "looks like a bot token"
                checks.append(Check("telegram token shape", not problem, shape, required=for_run))
            continue
        if name in needed:
            user = "provider" if key == (name, True) else "fallback ([brain.fallback])"
            detail, ok = f"missing (needed by the configured {user})", False
        elif name in local:
            detail, ok = f"not needed: {local[name]} is on this machine or the LAN", True
        elif name == "telegram_token":
            detail, ok = "missing (needed by `shelldon run`)", False
        else:
            detail, ok = "not needed by the configured provider", True
        required = name in needed or (for_run and name == "telegram_token")
        checks.append(Check(f"secret {name}", ok, detail, required=required))
    return checks


def gather_checks(
    settings: Settings, *, for_run: bool = False, unit: Path = UNIT_PATH, gate: bool = True
) -> list[Check]:
    """Every check, in display order; ``for_run`` makes what ``shelldon run`` needs required;
    ``gate`` runs a sample tool through the gate (about a second on a Pi)."""
    checks = [
        Check("shelldon", True, __version__),
        Check(
            "python",
            sys.version_info >= (3, 11),
            f"{platform.python_version()} ({sys.executable})",
        ),
        Check(
            "config",
            True,
            str(settings.config_path) if settings.config_path else "none (defaults in use)",
        ),
        Check("home", True, str(settings.home), required=False),
        Check("provider", True, f"{settings.brain.provider} (model {settings.brain.model})"),
        _fallback_check(settings),
    ]
    if settings.home.exists():
        writable = os.access(settings.home, os.W_OK)
        checks.append(Check("home writable", writable, "yes" if writable else "no"))
    else:
        checks.append(Check("home writable", True, "will be created"))
    checks += _secret_checks(settings, for_run)
    users = ", ".join(map(str, settings.telegram.allowed_users))
    nobody = (
        "empty: nobody can talk to the pet yet; send the bot a message, then run "
        "sudo shelldon pair CODE with the code it answers"
    )
    checks.append(Check("telegram.allowed_users", bool(users), users or nobody, required=for_run))
    checks.append(_landlock_check())
    checks.extend(_sandbox_checks(settings))
    checks.append(_memory_controller_check(settings))
    # The cap the service gives its workers: the configured one where a cgroup caps turns.
    in_force = settings if _service_turns_capped() else sandbox.with_memory_fallback(settings)
    checks.append(_rlimit_check(in_force))
    checks.append(selfcoded_check(settings))
    toolbox = toolbox_check(settings)
    if toolbox is not None:
        checks.append(toolbox)
    if gate:
        checks.append(gate_check(settings))
    unit_text = unit.read_text(errors="replace") if unit.is_file() else None
    checks.append(_memory_check(unit_text, read_meminfo()))
    checks.extend(_systemd_checks(unit))
    return checks


def run_doctor(
    settings: Settings, out: TextIO, *, for_run: bool | None = None, unit: Path = UNIT_PATH
) -> int:
    """Print the checks; 0 when every required check passed, else 1. ``for_run`` defaults to
    whether a config file is in use (a configured machine is meant to run the service)."""
    if for_run is None:
        for_run = settings.config_path is not None
    checks = gather_checks(settings, for_run=for_run, unit=unit)
    width = max(len(c.name) for c in checks)
    for c in checks:
        mark = "ok " if c.ok else ("FAIL" if c.required else "warn")
        out.write(f"{mark:4} {c.name:<{width}}  {c.detail}\n")
    failed = [c for c in checks if not c.ok and c.required]
    out.write("all good\n" if not failed else f"{len(failed)} problem(s)\n")
    return 0 if not failed else 1
