"""write_file: jailed, deny-listed, atomic, and never into git's control files.

Sources of inspiration: git CVE-2022-24765 (a planted repository's config runs fsmonitor),
CVE-2024-32002 (hooks written through a clone), CVE-2018-11235 (.gitmodules abuse),
CVE-2014-9390 (.GIT / git~1 on case-folding filesystems), Justin Steven's "embedded bare repo"
note, and the classic symlink-swap TOCTOU against atomic writers.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from shelldon.contracts import Tier, ToolCall
from shelldon.proc.beneath import make_dirs_beneath
from shelldon.worker.tools.registry import Registry, ToolContext, ToolError, execute_tool
from shelldon.worker.tools.write import WRITE_CAP_BYTES, git_control_reason, specs, write_file


@pytest.fixture
def ctx(home: Path) -> ToolContext:
    return ToolContext(workspace=home / "workspace", vault=home / "vault")


def _ws(ctx: ToolContext) -> Path:
    return ctx.workspace


def _leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


# --- benign cases that must keep working -------------------------------------------------------


def test_a_new_file_is_written_with_its_parents(ctx: ToolContext) -> None:
    message = write_file(ctx, "notes/2026/todo.txt", "feed the cat\n")
    assert (_ws(ctx) / "notes/2026/todo.txt").read_text() == "feed the cat\n"
    assert "13 bytes" in message
    assert _leftovers(_ws(ctx) / "notes/2026") == []


def test_an_existing_file_is_replaced_keeping_its_mode(ctx: ToolContext) -> None:
    target = _ws(ctx) / "run.sh"
    target.write_text("old")
    target.chmod(0o750)
    write_file(ctx, "run.sh", "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750


def test_unicode_and_a_file_named_like_git_but_not_git_are_fine(ctx: ToolContext) -> None:
    write_file(ctx, "gitnotes/.github/workflow.yml", "name: ç\n")
    write_file(ctx, "my.git.txt", "ok")
    assert (_ws(ctx) / "gitnotes/.github/workflow.yml").read_text() == "name: ç\n"


def test_a_symlinked_directory_inside_the_workspace_still_works(ctx: ToolContext) -> None:
    (_ws(ctx) / "real").mkdir()
    (_ws(ctx) / "alias").symlink_to("real")
    write_file(ctx, "alias/file.txt", "x")
    assert (_ws(ctx) / "real/file.txt").read_text() == "x"


def test_write_file_is_risky_with_a_closed_schema(ctx: ToolContext) -> None:
    (spec,) = specs()
    assert spec.definition.tier is Tier.RISKY
    assert spec.definition.params_schema["additionalProperties"] is False
    registry = Registry(ctx)
    registry.add_all(specs())
    call = ToolCall("c", "write_file", {"path": "a.txt", "content": "x"})
    assert not execute_tool(registry, call).ok
    assert not (_ws(ctx) / "a.txt").exists()
    assert execute_tool(registry, call, approved=True).ok


# --- git control files --------------------------------------------------------------------------

GIT_CONTROL_PATHS = [
    ".git/config",
    ".git/hooks/pre-commit",
    ".git/hooks/post-checkout",
    ".git/info/attributes",
    ".git/info/exclude",
    ".git/HEAD",
    ".git",  # a .git *file* ("gitdir: /elsewhere") re-points the repository
    "sub/.git/config",
    "sub/.git",
    ".GIT/config",
    ".Git/hooks/pre-commit",
    ".git./config",
    ".git /config",
    "GIT~1/config",
    ".gitmodules",
    "vendor/lib/.gitmodules",
    "\uff0egit/config",  # fullwidth full stop folds to '.' under NFKC
]


@pytest.mark.parametrize("path", GIT_CONTROL_PATHS)
def test_git_control_files_are_refused(ctx: ToolContext, path: str) -> None:
    (_ws(ctx) / ".git" / "hooks").mkdir(parents=True)
    with pytest.raises(ToolError, match="controls what git runs"):
        write_file(ctx, path, "[core]\n\tfsmonitor = touch /tmp/pwned\n")
    assert not (_ws(ctx) / ".git/config").exists()
    assert list((_ws(ctx) / ".git/hooks").iterdir()) == []


def test_a_symlink_into_dot_git_is_refused_by_where_it_resolves(ctx: ToolContext) -> None:
    (_ws(ctx) / ".git" / "hooks").mkdir(parents=True)
    (_ws(ctx) / "hooks").symlink_to(".git/hooks")
    with pytest.raises(ToolError):
        write_file(ctx, "hooks/pre-commit", "#!/bin/sh\ntouch /tmp/pwned\n")
    assert list((_ws(ctx) / ".git/hooks").iterdir()) == []


def test_git_control_reason_allows_ordinary_names() -> None:
    for ok in ("src/app.py", ".github/ci.yml", "git/readme", "x.gitignore", ".gitignore"):
        assert git_control_reason(ok) is None, ok


# --- jail, deny list, symlinks, size ------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "../outside.txt",
        "a/../../outside.txt",
        "~/.bashrc",
        "nul\x00byte",
        "vault/token",
        ".env",
        "config/.env.local",
        "keys/server.pem",
        "id_ed25519",
    ],
)
def test_paths_outside_the_jail_or_on_the_deny_list_are_refused(
    ctx: ToolContext, path: str
) -> None:
    with pytest.raises(ToolError):
        write_file(ctx, path, "x")


def test_writing_through_a_symlink_that_stays_inside_writes_its_target(ctx: ToolContext) -> None:
    # Relaxed: the jail resolves the link first and judges the target, and the write renames
    # over the resolved target in a directory opened without following links; the link stays.
    inside = _ws(ctx) / "target.txt"
    inside.write_text("old")
    (_ws(ctx) / "link.txt").symlink_to("target.txt")
    write_file(ctx, "link.txt", "changed")
    assert inside.read_text() == "changed"
    assert (_ws(ctx) / "link.txt").is_symlink()


def test_writing_through_a_symlink_to_a_refused_file_is_refused(ctx: ToolContext) -> None:
    secret = _ws(ctx) / ".env"
    secret.write_text("API_KEY=old")
    (_ws(ctx) / "settings.txt").symlink_to(".env")
    with pytest.raises(ToolError, match="env-file"):
        write_file(ctx, "settings.txt", "API_KEY=planted")
    assert secret.read_text() == "API_KEY=old"


def test_a_symlink_out_of_the_workspace_is_refused(ctx: ToolContext, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (_ws(ctx) / "escape").symlink_to(outside)
    with pytest.raises(ToolError):
        write_file(ctx, "escape/evil.txt", "x")
    assert list(outside.iterdir()) == []


def test_a_hard_linked_file_is_refused(ctx: ToolContext, tmp_path: Path) -> None:
    outside = tmp_path / "shadow"
    outside.write_text("secret")
    os.link(outside, _ws(ctx) / "innocent.txt")
    with pytest.raises(ToolError, match="hard link"):
        write_file(ctx, "innocent.txt", "overwritten")
    assert outside.read_text() == "secret"


def test_a_directory_chain_with_a_swapped_in_symlink_is_refused(
    ctx: ToolContext, tmp_path: Path
) -> None:
    # The race: the jail resolved 'd/sub' as a directory, then something swapped in a symlink.
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (_ws(ctx) / "d").mkdir()
    (_ws(ctx) / "d" / "sub").symlink_to(outside)
    root_fd = os.open(_ws(ctx), os.O_PATH | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as info:
            make_dirs_beneath(root_fd, "d/sub")
    finally:
        os.close(root_fd)
    assert info.value.errno in (errno.ELOOP, errno.ENOTDIR)
    assert list(outside.iterdir()) == []


def test_content_over_the_cap_is_refused_and_the_old_file_survives(ctx: ToolContext) -> None:
    target = _ws(ctx) / "big.txt"
    target.write_text("old")
    with pytest.raises(ToolError, match="at most"):
        write_file(ctx, "big.txt", "x" * (WRITE_CAP_BYTES + 1))
    assert target.read_text() == "old"
    write_file(ctx, "big.txt", "x" * WRITE_CAP_BYTES)
    assert target.stat().st_size == WRITE_CAP_BYTES


def test_content_that_is_not_text_is_refused(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="not valid text"):
        write_file(ctx, "bad.txt", "half a pair \ud800")
    assert not (_ws(ctx) / "bad.txt").exists()


def test_a_directory_target_is_refused(ctx: ToolContext) -> None:
    (_ws(ctx) / "adir").mkdir()
    with pytest.raises(ToolError):
        write_file(ctx, "adir", "x")
    with pytest.raises(ToolError):
        write_file(ctx, ".", "x")
