"""git: the everyday commands work in the workspace, with an environment git cannot be steered by.

Sources of inspiration: git's own t/t0033-safe-directory and t/t0035-safe-bare-repository tests,
the GIT_CONFIG_COUNT documentation (git-config(1), "ENVIRONMENT"), and the environment variables
GTFOBins lists for git (GIT_EXTERNAL_DIFF, GIT_SSH_COMMAND, GIT_PAGER, GIT_EDITOR).

Each test runs the tool in a forked child (``run_in_fork``), as the worker does.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shelldon.contracts import Tier, ToolCall
from shelldon.worker.tools.git import ALLOWED_SUBCOMMANDS, git_env, specs
from shelldon.worker.tools.registry import Registry, ToolContext, execute_tool
from tests.unit.risky.forking import run_in_fork


@pytest.fixture
def ctx(home: Path) -> ToolContext:
    return ToolContext(workspace=home / "workspace", vault=home / "vault")


def _git_calls(ctx: ToolContext, calls: list[str]) -> list[tuple[bool, str]]:
    registry = Registry(ctx)
    registry.add_all(specs())
    results = []
    for n, args in enumerate(calls):
        call = ToolCall(f"c{n}", "git", {"args": args})
        result = execute_tool(registry, call, approved=True)
        results.append((result.ok, result.content))
    return results


def _run(ctx: ToolContext, *calls: str) -> list[tuple[bool, str]]:
    results: list[tuple[bool, str]] = run_in_fork(_git_calls, ctx, list(calls))
    return results


def _all_ok(results: list[tuple[bool, str]]) -> None:
    for ok, content in results:
        assert ok, content


def test_git_is_risky_with_a_closed_schema_and_refused_unapproved(ctx: ToolContext) -> None:
    (spec,) = specs()
    assert spec.definition.tier is Tier.RISKY
    assert spec.definition.params_schema["additionalProperties"] is False
    registry = Registry(ctx)
    registry.add_all(specs())
    assert not execute_tool(registry, ToolCall("c", "git", {"args": "init"})).ok
    assert not (ctx.workspace / ".git").exists()


def test_init_add_commit_log_status_in_the_workspace(ctx: ToolContext) -> None:
    (ctx.workspace / "hello.txt").write_text("hi\n")
    results = _run(
        ctx,
        "init",
        "add hello.txt",
        "commit -m 'first commit'",
        "log --oneline",
        "status --short",
        "rev-parse --abbrev-ref HEAD",
        "log --format='%an <%ae> %s'",
        "show --stat HEAD",
    )
    _all_ok(results)
    assert "first commit" in results[3][1]
    assert results[4][1] == "(no output)"
    assert results[5][1].strip() == "main"
    assert results[6][1].strip() == "shelldon <shelldon@localhost> first commit"
    assert "hello.txt" in results[7][1]


@pytest.mark.slow
def test_branches_tags_diff_stash_mv_rm_restore_reset(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("one\n")
    results = _run(
        ctx,
        "init",
        "add a.txt",
        "commit -m one",
        "branch feature",
        "switch feature",
        "tag -a v1 -m 'release one'",
        "mv a.txt b.txt",
        "commit -m renamed",
        "checkout main",
        "diff main feature --stat",
        "stash list",
        "rm a.txt",
        "restore --staged a.txt",
        "restore a.txt",
        "reset --hard HEAD",
        "tag",
        "branch --list",
    )
    _all_ok(results)
    assert "b.txt" in results[9][1]
    assert results[15][1].strip() == "v1"
    assert "feature" in results[16][1]


def test_commit_message_from_a_file_in_the_workspace(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("x")
    (ctx.workspace / "msg.txt").write_text("from a file\n")
    results = _run(ctx, "init", "add a.txt", "commit -F msg.txt", "log -1 --format=%s")
    _all_ok(results)
    assert results[-1][1].strip() == "from a file"


def test_push_and_fetch_between_repositories_in_the_workspace(ctx: ToolContext) -> None:
    ws = ctx.workspace
    (ws / "f.txt").write_text("v1\n")
    _all_ok(_run(ctx, "init", "add f.txt", "commit -m v1"))
    # A second repository inside the workspace, made by git itself.
    _all_ok(_run(ctx, "init other"))
    results = _run(
        ctx, "push other main:incoming", "fetch other incoming", "log -1 FETCH_HEAD --format=%s"
    )
    _all_ok(results)
    assert results[-1][1].strip() == "v1"


def test_add_chmod_and_rev_parse_git_dir_run(ctx: ToolContext) -> None:
    # Both were refused (false alarms): an executable bit arms nothing the pinned git runs,
    # and rev-parse --git-dir only prints.
    (ctx.workspace / "run.sh").write_text("#!/bin/sh\necho hi\n")
    results = _run(
        ctx, "init", "add --chmod=+x run.sh", "diff --cached --summary", "rev-parse --git-dir"
    )
    _all_ok(results)
    assert "create mode 100755 run.sh" in results[2][1]
    assert results[3][1].strip() == ".git"


def _poisoned_env_then_git(ctx: ToolContext, canary: str) -> list[tuple[bool, str]]:
    # Everything a hostile parent environment could say to git; none of it may be honoured.
    script = ctx.workspace / "evil.sh"
    script.write_text(f"#!/bin/sh\ntouch {canary}\n")
    script.chmod(0o755)
    for name in ("GIT_EXTERNAL_DIFF", "GIT_PAGER", "GIT_EDITOR", "GIT_SSH_COMMAND", "GIT_ASKPASS"):
        os.environ[name] = str(script)
    os.environ["GIT_CONFIG_PARAMETERS"] = f"'core.fsmonitor'='{script}'"
    os.environ["GIT_DIR"] = "/nonexistent"
    os.environ["GIT_CONFIG_GLOBAL"] = str(ctx.workspace / "evil.gitconfig")
    (ctx.workspace / "evil.gitconfig").write_text(f"[core]\n\tfsmonitor = {script}\n")
    (ctx.workspace / "a.txt").write_text("one\n")
    results = _git_calls(ctx, ["init", "add a.txt", "commit -m one"])
    (ctx.workspace / "a.txt").write_text("two\n")
    results += _git_calls(ctx, ["diff", "status", "commit -am two", "log -p -1"])
    return results


def test_a_hostile_parent_environment_does_not_reach_git(ctx: ToolContext, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    results = run_in_fork(_poisoned_env_then_git, ctx, str(canary))
    _all_ok(results)
    assert "+two" in results[3][1]
    assert not canary.exists()


def test_dotfiles_in_the_workspace_home_are_not_read(ctx: ToolContext) -> None:
    # HOME was the workspace once; a written ~/.gitconfig or ~/.config/git/* must change nothing.
    hostile = "[status]\n\tshowUntrackedFiles = no\n[core]\n\tfsmonitor = touch pwned\n"
    (ctx.workspace / ".gitconfig").write_text(hostile)
    (ctx.workspace / ".config" / "git").mkdir(parents=True)
    (ctx.workspace / ".config" / "git" / "config").write_text(hostile)
    (ctx.workspace / ".config" / "git" / "attributes").write_text("* filter=evil\n")
    (ctx.workspace / "untracked.txt").write_text("x")
    results = _run(ctx, "init", "status --short")
    _all_ok(results)
    assert "?? untracked.txt" in results[1][1]
    assert not (ctx.workspace / "pwned").exists()


def test_git_env_pins_hooks_fsmonitor_protocols_and_drops_outside_variables(tmp_path: Path) -> None:
    env = git_env(tmp_path / "workspace", tmp_path / "home")
    pinned = {
        env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"]
        for i in range(int(env["GIT_CONFIG_COUNT"]))
    }
    assert pinned["core.hooksPath"] == "/dev/null"
    assert pinned["core.fsmonitor"] == "false"
    assert pinned["protocol.allow"] == "never"
    assert pinned["protocol.https.allow"] == "always"
    assert pinned["safe.bareRepository"] == "explicit"
    assert pinned["protocol.ext.allow"] == "never"
    assert env["GIT_CONFIG_GLOBAL"] == str(tmp_path / "home" / "gitconfig")
    assert env["GIT_CONFIG_NOSYSTEM"] == "1"
    assert env["HOME"] == str(tmp_path / "home")
    assert env["PYTHONNOUSERSITE"] == "1"
    allowed_git_vars = {
        "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_GLOBAL", "GIT_CEILING_DIRECTORIES",
        "GIT_TERMINAL_PROMPT", "GIT_PROTOCOL_FROM_USER", "GIT_EDITOR", "GIT_PAGER",
        "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
        "GIT_CONFIG_COUNT",
    }  # fmt: skip
    for name in env:
        if name.startswith("GIT_") and not name.startswith(
            ("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")
        ):
            assert name in allowed_git_vars, name


def test_the_allowlist_is_the_seeds_and_excludes_config() -> None:
    assert "config" not in ALLOWED_SUBCOMMANDS
    assert len(ALLOWED_SUBCOMMANDS) == 21
