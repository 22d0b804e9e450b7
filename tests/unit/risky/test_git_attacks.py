"""git attacks: what an approved-looking git call must never do.

Sources of inspiration: CVE-2017-1000117 (ssh://-oProxyCommand URLs), CVE-2022-24765 (a planted
repository's core.fsmonitor), CVE-2024-32002 (hooks through a recursive clone), CVE-2018-11235
(.gitmodules), git-remote-ext(1) and git-remote-fd(1), GTFOBins "git" (-c core.pager, --exec,
diff --output, hooks), the "--upload-pack" abbreviation trick (git accepts any unambiguous
prefix), and the embedded-bare-repository technique (safe.bareRepository).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shelldon.contracts import ToolCall
from shelldon.worker.tools.git import REFUSED_LONG_OPTIONS, check_git_args, specs
from shelldon.worker.tools.registry import Registry, ToolContext, ToolError, execute_tool
from tests.unit.risky.forking import run_in_fork


@pytest.fixture
def ctx(home: Path) -> ToolContext:
    return ToolContext(workspace=home / "workspace", vault=home / "vault")


def _refused(ctx: ToolContext, argv: list[str]) -> str:
    with pytest.raises(ToolError) as info:
        check_git_args(argv, ctx.workspace, ctx.vault)
    return str(info.value)


def _every_prefix(option: str) -> list[str]:
    return [option[:n] for n in range(1, len(option) + 1)]


# --- refused specifiers, every abbreviation, with and without =value -------------------------

ABBREVIATION_CASES = sorted(
    {
        (sub, f"--{prefix}{suffix}")
        for name, sub in (
            ("upload-pack", "fetch"),
            ("receive-pack", "push"),
            ("exec", "push"),
            ("namespace", "log"),
            ("git-dir", "status"),
            ("work-tree", "status"),
            ("exec-path", "log"),
            ("config-env", "commit"),
            ("output", "diff"),
            ("template", "init"),
            ("no-index", "diff"),
            ("separate-git-dir", "init"),
            ("recurse-submodules", "checkout"),
        )
        for prefix in _every_prefix(name)
        for suffix in ("", "=sh -c 'touch /tmp/pwned'")
    }
)


@pytest.mark.parametrize(("sub", "arg"), ABBREVIATION_CASES)
def test_refused_specifiers_and_their_abbreviations(ctx: ToolContext, sub: str, arg: str) -> None:
    assert "refused" in _refused(ctx, [sub, arg, "x"])


@pytest.mark.parametrize("name", sorted(REFUSED_LONG_OPTIONS))
def test_refused_specifiers_are_refused_even_after_double_dash(ctx: ToolContext, name: str) -> None:
    _refused(ctx, ["log", "--", f"--{name}=x"])


def test_the_abbreviation_trick_is_refused_in_any_position(ctx: ToolContext) -> None:
    _refused(ctx, ["fetch", "origin", "--upload-pa=touch /tmp/pwned"])
    _refused(ctx, ["fetch", "--upload-pa", "touch /tmp/pwned", "origin"])
    _refused(ctx, ["pull", "--UPLOAD-PACK=x", "origin"])


# --- global flags and subcommands --------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["-c", "core.pager=sh -c 'touch /tmp/pwned'", "log"],
        ["-c", "alias.x=!touch /tmp/pwned", "x"],
        ["-C", "/etc", "status"],
        ["-C/", "status"],
        ["--git-dir=/home", "status"],
        ["--work-tree=/", "status"],
        ["--exec-path=/tmp", "status"],
        ["-p", "log"],
        ["--paginate", "log"],
        ["--config-env=core.pager=EVIL", "log"],
        ["--namespace=x", "log"],
    ],
    ids=lambda a: " ".join(a)[:30],
)
def test_global_flags_are_refused(ctx: ToolContext, argv: list[str]) -> None:
    assert "global options" in _refused(ctx, argv)


@pytest.mark.parametrize(
    "sub",
    ["config", "clone", "submodule", "daemon", "archive", "bisect", "filter-branch", "am",
     "apply", "difftool", "mergetool", "instaweb", "send-email", "upload-pack", "rebase",
     "gc", "worktree", "cat-file", "grep", "x", "!sh", "help"],
)  # fmt: skip
def test_subcommands_outside_the_allowlist_are_refused(ctx: ToolContext, sub: str) -> None:
    assert "not an allowed subcommand" in _refused(ctx, [sub])


# --- files outside the jail ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["diff", "--output=/tmp/pwned"],
        ["diff", "--output", "x"],
        ["log", "-p", "--output=.git/hooks/pre-commit"],
        ["show", "--output=hooks"],
        ["diff", "-o", "/tmp/pwned"],
        ["log", "-o/tmp/pwned"],
        ["diff", "-O/etc/passwd"],
        ["diff", "--orderfile=/etc/passwd"],
        ["diff", "--no-index", "/etc/passwd", "/dev/null"],
        ["diff", "/etc/passwd", "/dev/null"],
        ["diff", "../../vault/telegram_token", "x"],
        ["show", "HEAD", "--", "../outside"],
        ["commit", "-F", "/etc/passwd"],
        ["commit", "-F/etc/passwd"],
        ["commit", "-aF", "/etc/passwd"],
        ["commit", "-aF/etc/shadow"],
        ["commit", "--file=/etc/passwd"],
        ["commit", "--fi=/etc/passwd"],
        ["commit", "--file", "../../vault/telegram_token"],
        ["commit", "-t", "/etc/passwd"],
        ["commit", "--template=/etc/passwd"],
        ["commit", "-F"],
        ["tag", "-a", "v1", "-F", "/etc/passwd"],
        ["add", "--pathspec-from-file=/etc/passwd"],
        ["reset", "--pathspec-from-file", "/etc/passwd"],
        ["init", "--template=/tmp/evil-templates"],
        ["init", "--separate-git-dir=/tmp/x"],
        ["init", "--bare", "repo"],
        ["init", "/tmp/elsewhere"],
        ["mv", "a", "/tmp/b"],
        ["add", "/etc/passwd"],
    ],
    ids=lambda a: " ".join(a)[:40],
)
def test_files_outside_the_workspace_are_refused(ctx: ToolContext, argv: list[str]) -> None:
    _refused(ctx, argv)


def test_a_message_file_symlinked_out_of_the_workspace_is_refused(ctx: ToolContext) -> None:
    (ctx.workspace / "msg").symlink_to("/etc/passwd")
    _refused(ctx, ["commit", "-F", "msg"])
    _refused(ctx, ["commit", "-Fmsg"])
    _refused(ctx, ["commit", "--file=msg"])
    _refused(ctx, ["diff", "msg", "other"])  # outside a repository, git diff is --no-index


def test_a_symlink_into_dot_git_is_refused_as_a_destination(ctx: ToolContext) -> None:
    (ctx.workspace / ".git" / "hooks").mkdir(parents=True)
    (ctx.workspace / "hooks").symlink_to(".git/hooks")
    _refused(ctx, ["mv", "evil.sh", "hooks/pre-commit"])
    _refused(ctx, ["mv", "evil.sh", "hooks"])


def test_a_message_file_in_the_vault_is_refused(ctx: ToolContext) -> None:
    (ctx.workspace / "key").symlink_to(ctx.vault / "anthropic_api_key")
    _refused(ctx, ["commit", "-F", "key"])


# --- remote URLs and transport helpers ----------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["remote", "add", "x", "ext::sh -c touch% /tmp/pwned"],
        ["remote", "add", "x", "fd::17"],
        ["remote", "set-url", "origin", "ext::sh -c touch% /tmp/pwned"],
        ["fetch", "ext::sh -c id"],
        ["push", "fd::3,4", "main"],
        ["fetch", "evil::address"],
        ["fetch", "--repo=ext::sh"],
        ["remote", "add", "x", "ssh://-oProxyCommand=touch /tmp/pwned/x"],
        ["remote", "add", "x", "ssh://git@example.com/repo"],
        ["fetch", "git://example.com/repo"],
        ["fetch", "http://169.254.169.254/latest"],
        ["fetch", "https://169.254.169.254/latest"],
        ["remote", "add", "x", "https://[::ffff:127.0.0.1]/repo"],
        ["push", "--repo=https://2130706433/x", "main"],
        ["fetch", "file:///etc"],
        ["pull", "FILE:///home/owner/secret"],
        ["remote", "add", "x", "/home/owner/.ssh"],
        ["fetch", "../../other-repo"],
        ["pull", "-s", "evil", "origin"],
        ["pull", "--strategy=evil", "origin"],
        ["pull", "--strat=../../x", "origin"],
        ["checkout", "--recurse-submodules", "main"],
        ["pull", "--recurse", "origin"],
    ],
    ids=lambda a: " ".join(a)[:40],
)
def test_transport_helpers_and_non_https_remotes_are_refused(
    ctx: ToolContext, argv: list[str]
) -> None:
    _refused(ctx, argv)


# --- chains: each step harmless-looking, the sequence runs code --------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["mv", "-f", "evil.cfg", ".git/config"],
        ["mv", "hook.sh", ".git/hooks/pre-commit"],
        ["mv", "hook.sh", ".GIT/hooks/pre-commit"],
        ["mv", "mods", "sub/.gitmodules"],
        ["mv", "gitfile", "sub/.git"],
        ["checkout", "HEAD", "--", ".git/config"],
        ["restore", "--source=HEAD", ".git/hooks/post-checkout"],
        ["add", ".git/config"],
        ["commit", "-F", ".git/COMMIT_EDITMSG"],
        ["init", "--template=tpl"],
        ["init", "--templ", "tpl"],
        ["diff", "--ext-diff"],
        ["log", "-p", "--textconv"],
    ],
    ids=" ".join,
)
def test_chain_starters_are_refused(ctx: ToolContext, argv: list[str]) -> None:
    _refused(ctx, argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["rev-parse", "--git-dir=/elsewhere"],
        ["rev-parse", "--git-d"],
        ["rev-parse", "--GIT-DIR"],
        ["rev-parse", "--work-tree=/"],
        ["status", "--git-dir"],
        ["log", "--git-dir"],
        ["log", "--", "--git-dir=/x"],
    ],
    ids=" ".join,
)
def test_git_dir_is_allowed_only_as_rev_parse_s_exact_query(
    ctx: ToolContext, argv: list[str]
) -> None:
    assert "--git-dir" in _refused(ctx, argv) or "--work-tree" in _refused(ctx, argv)


def test_benign_arguments_pass_the_policy(ctx: ToolContext) -> None:
    for argv in (
        ["status", "--short"],
        ["log", "--oneline", "-5", "--format=%h %s", "--author=/bob/"],
        ["log", "HEAD~3..HEAD", "--", "src"],
        ["diff", "--stat", "HEAD~1", "--output-indicator-new=+"],
        ["show", "HEAD:README.md"],
        ["commit", "-am", "fix: use https://example.com/x"],
        ["commit", "-m", "ext::sh is refused now; Foo::bar renamed"],
        ["tag", "-a", "v2", "-m", "http://old.example/ moved"],
        ["commit", "--signoff", "-m", "x"],
        ["add", "--chmod=-x", "script.sh"],
        # Relaxed: an executable bit arms nothing git runs (hooks and fsmonitor are pinned off,
        # drivers run through a shell without it), and fetch/checkout/run_shell set it anyway.
        ["add", "--chmod=+x", "run.sh"],
        ["add", "--chm=+x", "run.sh"],
        # Relaxed: rev-parse --git-dir prints where the repository is; it points git nowhere.
        ["rev-parse", "--git-dir"],
        ["rev-parse", "--git-common-dir"],
        ["rev-parse", "--show-toplevel"],
        ["add", ".gitattributes", ".gitignore"],
        # Relaxed: an attributes file arms nothing now; the next git call judges what it says.
        ["mv", "attrs", ".gitattributes"],
        ["log", "--", ".gitmodules"],
        ["show", "HEAD:.gitattributes"],
        ["remote", "add", "origin", "https://github.com/owner/repo.git"],
        ["push", "origin", "main:main"],
        ["pull", "--rebase", "--strategy=ort", "origin", "main"],
        ["checkout", "-b", "feature"],
        ["tag", "-a", "v1.0", "-m", "release"],
        ["stash", "push", "-m", "wip"],
        ["rev-parse", "--short", "HEAD"],
    ):
        assert check_git_args(argv, ctx.workspace, ctx.vault) == argv


def _chain(ctx: ToolContext, setup: str, calls: list[str], canary: str) -> list[tuple[bool, str]]:
    """Run git calls after a setup step that plants something by a route other than git."""
    registry = Registry(ctx)
    registry.add_all(specs())
    out = []
    for n, args in enumerate(calls):
        if n == 1:
            exec(setup, {"ws": ctx.workspace, "canary": canary})  # the planting step
        result = execute_tool(registry, ToolCall(f"c{n}", "git", {"args": args}), approved=True)
        out.append((result.ok, result.content))
    return out


EVIL = "#!/bin/sh\ntouch {canary}\n"

PLANTED_HOOK = """
import os
hook = ws / ".git" / "hooks" / "pre-commit"
hook.write_text("#!/bin/sh\\ntouch " + canary + "\\n")
os.chmod(hook, 0o755)
post = ws / ".git" / "hooks" / "post-commit"
post.write_text("#!/bin/sh\\ntouch " + canary + "\\n")
os.chmod(post, 0o755)
(ws / "a.txt").write_text("changed")
"""

PLANTED_FSMONITOR = """
import os
script = ws / "mon.sh"
script.write_text("#!/bin/sh\\ntouch " + canary + "\\n")
os.chmod(script, 0o755)
with open(ws / ".git" / "config", "a") as f:
    f.write("[core]\\n\\tfsmonitor = " + str(script) + "\\n\\tpager = " + str(script) + "\\n"
            "\\teditor = " + str(script) + "\\n\\tsshCommand = " + str(script) + "\\n"
            "[diff]\\n\\texternal = " + str(script) + "\\n")
(ws / "a.txt").write_text("changed")
"""

PLANTED_EXT_REMOTE = """
with open(ws / ".git" / "config", "a") as f:
    f.write('[remote "x"]\\n\\turl = ext::sh -c touch% ' + canary + '\\n')
    f.write('[remote "y"]\\n\\turl = fd::0\\n')
"""

PLANTED_BARE_REPO = """
import os, subprocess
# An embedded bare repository at the workspace root: config, hooks and all, as plain files.
subprocess.run(["git", "init", "-q", "--bare", str(ws / "inner")], check=True)
for name in os.listdir(ws / "inner"):
    os.rename(ws / "inner" / name, ws / name)
with open(ws / "config", "a") as f:
    f.write("[core]\\n\\tbare = false\\n\\tworktree = " + str(ws) + "\\n"
            "\\tfsmonitor = touch " + canary + "\\n")
"""


@pytest.mark.parametrize(
    ("setup", "calls", "must_fail"),
    [
        pytest.param(
            PLANTED_HOOK, ["init", "add a.txt", "commit -m x"], (), id="hooks-planted-in-dot-git"
        ),
        pytest.param(
            PLANTED_FSMONITOR,
            ["init", "status", "add a.txt", "diff --cached", "commit -m x", "log -p -1"],
            (1, 2, 3, 4, 5),
            id="fsmonitor-pager-editor-extdiff-in-repo-config",
        ),
        pytest.param(
            PLANTED_EXT_REMOTE,
            ["init", "fetch x", "fetch y", "pull x main"],
            (1, 2, 3),
            id="ext-and-fd-remotes-in-repo-config",
        ),
        pytest.param(
            PLANTED_BARE_REPO, ["status", "status", "log"], (1, 2), id="embedded-bare-repo"
        ),
    ],
)
def test_planted_git_machinery_never_runs(
    ctx: ToolContext, tmp_path: Path, setup: str, calls: list[str], must_fail: tuple[int, ...]
) -> None:
    (ctx.workspace / "a.txt").write_text("one")
    canary = tmp_path / "canary"
    results = run_in_fork(_chain, ctx, setup, calls, str(canary))
    assert not canary.exists()
    for n, (ok, content) in enumerate(results):
        if n in must_fail:
            assert not ok, content
        elif n:  # the first call only sets the scene (it may fail, e.g. outside a repo)
            assert ok, content


def test_refusals_reach_the_model_as_failed_results(ctx: ToolContext, tmp_path: Path) -> None:
    registry = Registry(ctx)
    registry.add_all(specs())
    call = ToolCall("c", "git", {"args": "fetch --upload-pa='touch /tmp/pwned' origin"})
    result = execute_tool(registry, call, approved=True)
    assert not result.ok
    assert "--upload-pack" in result.content
    bad_quote = execute_tool(registry, ToolCall("d", "git", {"args": "log 'x"}), approved=True)
    assert not bad_quote.ok and "cannot split" in bad_quote.content
