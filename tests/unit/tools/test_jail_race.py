"""The jail against a symlink-swap race: what is opened is what was judged, on both open paths.

Sources of inspiration: CWE-367 (time-of-check time-of-use), CVE-2018-15664 (docker cp's
symlink-exchange race, the case that motivated openat2's RESOLVE_ flags), CVE-2021-30465 (runc
mount-destination swap), the openat2(2) man page and LWN "Restricting path name lookup with
openat2()" (2019), and Python's shutil.rmtree symlink-attack CVE-2008-4864.

The guard alone is tested: the tools run in the test process (no Landlock, no namespace), while
a forked process swaps ``d/`` for a symlink to a directory outside in a tight loop. The default
path is openat2; the fallback walk runs in a forked child whose seccomp filter answers openat2
with EPERM, as a container's profile may.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from shelldon.contracts import ToolCall
from shelldon.proc.beneath import SYS_OPENAT2, resolver_in_use
from shelldon.proc.sandbox import load_filter
from shelldon.worker.tools import Registry, ToolContext, execute_tool, files, write
from tests.unit.risky.forking import run_in_fork
from tests.unit.tools.races import swapping
from tests.unit.tools.seccomp_filters import refuse_syscall

pytestmark = pytest.mark.slow

SECRET = "OUTSIDE-SECRET"
TRIES = 3000
SECONDS = 2.0


def _rig(home: Path) -> tuple[Registry, Path, Path]:
    ws, outside = home / "workspace", home / "outside"
    (ws / "d").mkdir()
    outside.mkdir()
    (ws / "d" / "notes.txt").write_text("inside")
    (outside / "notes.txt").write_text(SECRET)
    (outside / "only-outside.txt").write_text(SECRET)
    registry = Registry(ToolContext(workspace=ws, vault=home / "vault"))
    registry.add_all([*files.specs(), *write.specs()])
    return registry, ws, outside


def _race(home: Path, tool: str, args: dict[str, str]) -> dict[str, int]:
    """Call ``tool`` up to TRIES times (or SECONDS) while ``d/`` is swapped; count outcomes."""
    registry, ws, outside = _rig(home)
    seen = {"tries": 0, "ok": 0, "refused": 0, "escapes": 0, "swaps": 0}
    with swapping(ws / "d", outside) as swaps:
        until = time.monotonic() + SECONDS
        while seen["tries"] < TRIES and time.monotonic() < until:
            seen["tries"] += 1
            call = ToolCall(str(seen["tries"]), tool, args)
            result = execute_tool(registry, call, approved=True)
            seen["ok" if result.ok else "refused"] += 1
            leaked = SECRET in result.content or "only-outside" in result.content
            landed = (outside / "new.txt").exists()
            if landed:
                (outside / "new.txt").unlink()
            seen["escapes"] += leaked or landed
        seen["swaps"] = swaps.count
    seen["resolver"] = resolver_in_use() == "walk"
    return seen


def _without_openat2(fn: Callable[..., dict[str, int]], *args: object) -> dict[str, int]:
    """``fn(*args)`` in a forked child where openat2 fails with EPERM."""

    def confined() -> dict[str, int]:
        load_filter(refuse_syscall(SYS_OPENAT2, errno.EPERM))
        return fn(*args)

    return run_in_fork(confined)


CASES = [
    ("read_file", {"path": "d/notes.txt"}),
    ("list_dir", {"path": "d"}),
    ("write_file", {"path": "d/new.txt", "content": "x"}),
]


def _check(seen: dict[str, int], walked: bool) -> None:
    assert seen["escapes"] == 0, seen
    assert seen["tries"] >= 500, seen  # the race really ran
    assert seen["swaps"] >= 100, seen
    assert seen["ok"] > 0, seen  # and the tool still works between swaps
    assert bool(seen["resolver"]) is walked


@pytest.mark.parametrize(("tool", "args"), CASES, ids=[c[0] for c in CASES])
def test_symlink_swap_race_never_escapes_with_openat2(
    home: Path, tool: str, args: dict[str, str]
) -> None:
    if not _openat2_works(home):
        pytest.skip("this kernel has no openat2")
    _check(_race(home, tool, args), walked=False)


@pytest.mark.parametrize(("tool", "args"), CASES, ids=[c[0] for c in CASES])
def test_symlink_swap_race_never_escapes_on_the_fallback_walk(
    home: Path, tool: str, args: dict[str, str]
) -> None:
    _check(_without_openat2(_race, home, tool, args), walked=True)


def _openat2_works(home: Path) -> bool:
    fd = os.open(home, os.O_PATH | os.O_DIRECTORY)
    try:
        from shelldon.proc.beneath import _openat2

        os.close(_openat2(fd, ".", os.O_PATH, 0))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
