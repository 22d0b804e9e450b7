"""The jail under a symlink-swap race, and what a jailed open costs: prints figures, no test.

Run: .venv/bin/python tests/bench/bench_jail.py [--tries N] [--seconds S] [--runs N]

1. escapes: a forked process exchanges ``d/`` (a real directory holding ``notes.txt``) with a
   symlink to a directory outside the workspace in a tight loop (``tests/unit/tools/races.py``)
   while this process calls ``read_file('d/notes.txt')``, ``list_dir('d')`` and
   ``write_file('d/new.txt')`` N times each; an escape is a read of the outside file, a listing
   of the outside directory, or a write that lands outside. The guard alone: no Landlock.
   The same again in a forked child whose seccomp filter refuses openat2 (the walk).
2. cost: ``read_file`` of a small file two directories deep, per call in µs (best batch), on the
   default path (openat2) and on the O_NOFOLLOW walk it falls back to where openat2 is refused
   (measured in a forked child whose seccomp filter answers openat2 with EPERM); and the open
   step alone, three components deep: by absolute path (the old way), openat2, the walk.

The script only uses the tools' public functions, so it also measures an older checkout: copy
it and ``tests/unit/tools/races.py`` into that tree and run it there.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import errno
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shelldon.worker.tools import ToolContext, ToolError  # noqa: E402
from shelldon.worker.tools.files import list_dir, read_file  # noqa: E402
from shelldon.worker.tools.write import write_file  # noqa: E402
from tests.unit.tools.races import swapping  # noqa: E402

SECRET = "OUTSIDE-SECRET"


def race(tries: int, seconds: float) -> dict[str, tuple[int, int]]:
    """Per tool, (tries, escapes) under the swap race."""
    found: dict[str, tuple[int, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        ws, outside = home / "workspace", home / "outside"
        (ws / "d").mkdir(parents=True)
        (home / "vault").mkdir()
        outside.mkdir()
        (ws / "d" / "notes.txt").write_text("inside")
        (outside / "notes.txt").write_text(SECRET)
        (outside / "only-outside.txt").write_text(SECRET)
        ctx = ToolContext(workspace=ws, vault=home / "vault")

        def wrote_outside() -> bool:
            landed = (outside / "new.txt").exists()
            with contextlib.suppress(FileNotFoundError):
                (outside / "new.txt").unlink()
            return landed

        calls: dict[str, Callable[[], bool]] = {
            "read_file": lambda: SECRET in read_file(ctx, "d/notes.txt"),
            "list_dir": lambda: "only-outside" in list_dir(ctx, "d"),
            "write_file": lambda: bool(write_file(ctx, "d/new.txt", "x")) and wrote_outside(),
        }
        with swapping(ws / "d", outside):
            for name, escaped in calls.items():
                done = escapes = 0
                until = time.monotonic() + seconds
                while done < tries and time.monotonic() < until:
                    done += 1
                    with contextlib.suppress(ToolError):
                        escapes += escaped()
                    escapes += name == "write_file" and wrote_outside()
                found[name] = (done, escapes)
    return found


def per_call_us(fn: Callable[[], object], runs: int) -> float:
    """Wall time of one call in µs: the best of 20 batches, so that other load on a shared
    machine (which only ever adds time) is left out."""
    fn()
    batch = max(runs // 20, 1)
    best = float("inf")
    for _ in range(20):
        started = time.perf_counter()
        for _ in range(batch):
            fn()
        best = min(best, (time.perf_counter() - started) / batch * 1e6)
    return best


def read_cost(runs: int) -> float:
    """µs per ``read_file`` of a small file two directories deep."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "workspace" / "notes" / "2026").mkdir(parents=True)
        (home / "vault").mkdir()
        (home / "workspace" / "notes" / "2026" / "todo.txt").write_text("feed the cat\n" * 20)
        ctx = ToolContext(workspace=home / "workspace", vault=home / "vault")
        return per_call_us(lambda: read_file(ctx, "notes/2026/todo.txt"), runs)


def open_costs(runs: int) -> dict[str, float] | None:
    """µs per open of ``notes/2026/todo.txt`` alone: by path (the old way), openat2, the walk."""
    try:
        from shelldon.proc.beneath import _openat2, walk_beneath
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "notes" / "2026").mkdir(parents=True)
        (root / "notes" / "2026" / "todo.txt").write_text("x")
        path = str(root / "notes" / "2026" / "todo.txt")
        fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
        flags = os.O_RDONLY | os.O_NOFOLLOW
        try:
            return {
                "os.open(realpath)": per_call_us(lambda: os.close(os.open(path, flags)), runs),
                "openat2": per_call_us(
                    lambda: os.close(_openat2(fd, "notes/2026/todo.txt", os.O_RDONLY, 0)), runs
                ),
                "walk": per_call_us(
                    lambda: os.close(walk_beneath(fd, "notes/2026/todo.txt", os.O_RDONLY)), runs
                ),
            }
        finally:
            os.close(fd)


def in_child_without_openat2(fn: Callable[[], object]) -> object | None:
    """``fn()`` in a forked child whose seccomp filter refuses openat2; None on a checkout
    that has no openat2 path to fall back from."""
    try:
        from shelldon.proc import beneath
        from shelldon.proc.sandbox import load_filter
        from tests.unit.tools.seccomp_filters import refuse_syscall
    except ImportError:
        return None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            load_filter(refuse_syscall(beneath.SYS_OPENAT2, errno.EPERM))
            value = fn()
            if beneath.resolver_in_use() == "walk":
                os.write(write_end, repr(value).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as src:
        text = src.read()
    os.waitpid(pid, 0)
    return ast.literal_eval(text) if text else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tries", type=int, default=20000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=5000)
    args = parser.parse_args()
    for name, (done, escapes) in race(args.tries, args.seconds).items():
        print(f"{name:10} under the swap race: {escapes} escapes in {done} tries (default path)")
    walked = in_child_without_openat2(lambda: race(args.tries, args.seconds))
    if isinstance(walked, dict):
        for name, (done, escapes) in walked.items():
            print(f"{name:10} under the swap race: {escapes} escapes in {done} tries (walk)")
    print(f"read_file per call: {read_cost(args.runs):.1f} µs (default path)")
    walk = in_child_without_openat2(lambda: read_cost(args.runs))
    if isinstance(walk, float):
        print(f"read_file per call: {walk:.1f} µs (openat2 refused: the O_NOFOLLOW walk)")
    for name, cost in (open_costs(args.runs) or {}).items():
        print(f"the open alone, {name}: {cost:.2f} µs")


if __name__ == "__main__":
    main()
