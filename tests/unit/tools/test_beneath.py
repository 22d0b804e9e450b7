"""open_beneath on both of its paths: openat2 where the kernel allows it, the O_NOFOLLOW walk
where openat2 is missing (ENOSYS) or filtered (EPERM), and the worker's own seccomp filter.

Sources of inspiration: openat2(2) (RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS, RESOLVE_NO_MAGICLINKS
and the EXDEV/ELOOP they answer), Docker's default seccomp profile answering unknown syscalls
with ENOSYS (moby#42441) and older ones with EPERM, and the /proc/self/root magic-link escape.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shelldon.contracts import ToolCall
from shelldon.proc.beneath import (
    SYS_OPENAT2,
    open_beneath,
    resolver_in_use,
    walk_beneath,
)
from shelldon.proc.sandbox import SandboxError, build_filter, load_filter
from shelldon.worker.tools import Registry, ToolContext, execute_tool, files
from tests.unit.risky.forking import run_in_fork
from tests.unit.tools.seccomp_filters import refuse_syscall


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/d/f.txt, root/link -> d, root/d/flink -> f.txt, root/out -> outside, root/proc."""
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f.txt").write_text("inside")
    (root / "link").symlink_to("d", target_is_directory=True)
    (root / "d" / "flink").symlink_to("f.txt")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f.txt").write_text("OUTSIDE")
    (root / "out").symlink_to(tmp_path / "outside", target_is_directory=True)
    (root / "proc").symlink_to("/proc/self/root", target_is_directory=True)
    return root


@pytest.fixture
def root_fd(tree: Path) -> Iterator[int]:
    fd = os.open(tree, os.O_PATH | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def _read(root_fd: int, inside: str, opener: Callable[..., int] = open_beneath) -> str:
    fd = opener(root_fd, inside, os.O_RDONLY)
    try:
        return os.read(fd, 100).decode()
    finally:
        os.close(fd)


def _in_child_refusing_openat2(code: int, fn: Callable[[], Any]) -> Any:
    def confined() -> Any:
        load_filter(refuse_syscall(SYS_OPENAT2, code))
        return fn()

    return run_in_fork(confined)


def _openat2_available() -> bool:
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        os.close(open_beneath(fd, "tmp", os.O_PATH))
    finally:
        os.close(fd)
    return resolver_in_use() == "openat2"


OPENERS = [
    pytest.param(open_beneath, id="openat2"),
    pytest.param(walk_beneath, id="walk"),
]


@pytest.mark.parametrize("opener", OPENERS)
def test_a_resolved_path_opens(root_fd: int, opener: Callable[..., int]) -> None:
    assert _read(root_fd, "d/f.txt", opener) == "inside"
    os.close(opener(root_fd, ".", os.O_RDONLY | os.O_DIRECTORY))


@pytest.mark.parametrize("opener", OPENERS)
@pytest.mark.parametrize(
    ("inside", "codes"),
    [
        ("link/f.txt", (errno.ELOOP, errno.ENOTDIR)),  # a symlinked directory on the way
        ("d/flink", (errno.ELOOP,)),  # a final symlink, even one that stays inside
        ("out/f.txt", (errno.ELOOP, errno.ENOTDIR, errno.EXDEV)),  # a symlink out
        ("proc/etc/hostname", (errno.ELOOP, errno.ENOTDIR, errno.EXDEV)),  # a magic link
    ],
)
def test_no_symlink_is_followed(
    root_fd: int, opener: Callable[..., int], inside: str, codes: tuple[int, ...]
) -> None:
    with pytest.raises(OSError) as info:
        opener(root_fd, inside, os.O_RDONLY)
    assert info.value.errno in codes


@pytest.mark.parametrize("opener", OPENERS)
@pytest.mark.parametrize("inside", ["../root/d/f.txt", "d/../d/f.txt", "/etc/hostname"])
def test_only_resolved_relative_paths_are_taken(
    root_fd: int, opener: Callable[..., int], inside: str
) -> None:
    with pytest.raises(ValueError, match="resolved relative path"):
        opener(root_fd, inside, os.O_RDONLY)


def test_openat2_is_the_default_where_the_kernel_has_it(root_fd: int) -> None:
    if not _openat2_available():
        pytest.skip("this kernel has no openat2 (Linux < 5.6)")
    assert _read(root_fd, "d/f.txt") == "inside"
    assert resolver_in_use() == "openat2"


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.EPERM], ids=["ENOSYS", "EPERM"])
def test_refused_openat2_falls_back_to_the_walk_and_still_refuses_links(
    root_fd: int, code: int
) -> None:
    def probe() -> tuple[str, str, str]:
        text = _read(root_fd, "d/f.txt")
        try:
            _read(root_fd, "out/f.txt")
            escaped = "escaped"
        except OSError as exc:
            escaped = errno.errorcode[exc.errno or 0]
        return text, escaped, resolver_in_use()

    text, escaped, resolver = _in_child_refusing_openat2(code, probe)
    assert text == "inside"
    assert escaped in ("ELOOP", "ENOTDIR")
    assert resolver == "walk"


def test_read_file_works_through_execute_tool_on_the_walk(home: Path) -> None:
    (home / "workspace" / "notes").mkdir()
    (home / "workspace" / "notes" / "a.txt").write_text("hello")
    registry = Registry(ToolContext(workspace=home / "workspace", vault=home / "vault"))
    registry.add_all(files.specs())

    def read() -> tuple[bool, str, str]:
        result = execute_tool(registry, ToolCall("c", "read_file", {"path": "notes/a.txt"}))
        return result.ok, result.content, resolver_in_use()

    assert _in_child_refusing_openat2(errno.EPERM, read) == (True, "hello", "walk")


def test_the_workers_own_seccomp_filter_leaves_openat2_working(root_fd: int) -> None:
    if not _openat2_available():
        pytest.skip("this kernel has no openat2 (Linux < 5.6)")
    try:
        program = build_filter(network=False)
    except SandboxError as exc:
        pytest.skip(f"no seccomp here: {exc}")

    def confined() -> tuple[str, str]:
        load_filter(program)
        return _read(root_fd, "d/f.txt"), resolver_in_use()

    assert run_in_fork(confined) == ("inside", "openat2")
