"""RISKY ``git``: a closed allowlist of git subcommands, run without a shell in the workspace.

Three layers. ``check_git_args`` judges the argument list alone: an allowlisted subcommand
first (so no global option: ``-c``, ``-C``, ``--git-dir``, ``-p``...); no option that runs a
program, redirects the repository or reads or writes files outside the workspace, anywhere,
in any abbreviation git accepts (``--upload-pa``) or ``=value`` form; no transport-helper URL
(``ext::``, ``fd::``, any ``name::address``); no path-shaped argument outside the workspace.

``git_env`` gives git nothing from outside (``risky_env``: fresh HOME, no system config) plus
command-line-scope config (``GIT_CONFIG_COUNT`` outranks the repository's own ``.git/config``)
that turns off hooks and fsmonitor, pins editors, pagers, ssh and signing programs to harmless
ones, and allows only the https and file transports.

What env config cannot blank out (filter, diff and merge drivers, ``remote.*.uploadpack``, URL
rewrites, includes, aliases: ``gitconfig.PROGRAM_KEYS``) is looked for before the run in the
repository's config and attributes files, and in the config of any local repository a fetch or
push talks to (``planted_findings``); the call is refused naming each. ``prepare_git`` returns
the child to start, so whichever process runs the approved call starts exactly that.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from shelldon.contracts import Tier, ToolDefinition
from shelldon.worker.tools.gitconfig import (
    Finding,
    attribute_findings,
    config_findings,
    local_remote_findings,
    refusal,
    remote_urls,
    repository_config,
    workspace_git_dir,
)
from shelldon.worker.tools.jail import jail_path
from shelldon.worker.tools.registry import ToolContext, ToolError, ToolSpec, string_params
from shelldon.worker.tools.risky_env import (
    NO_GIT_PROGRAMS,
    ChildRun,
    fresh_home,
    git_config_env,
    risky_env,
)
from shelldon.worker.tools.shell import run_child
from shelldon.worker.tools.ssrf import DEFAULT_POLICY, HostRefused, normalize_host
from shelldon.worker.tools.write import GIT_CONTROL_NAMES, GIT_DIR_NAMES, git_control_reason

ALLOWED_SUBCOMMANDS = frozenset(
    {
        "status", "log", "diff", "show", "add", "commit", "branch", "checkout", "switch",
        "restore", "stash", "init", "fetch", "pull", "push", "remote", "tag", "rev-parse",
        "reset", "mv", "rm",
    }
)  # fmt: skip

# Long options refused wherever they appear, and every abbreviation of them (git's option
# parser accepts any unambiguous prefix). Why each one:
REFUSED_LONG_OPTIONS: dict[str, str] = {
    "upload-pack": "runs a program of the caller's choosing on fetch",
    "receive-pack": "runs a program of the caller's choosing on push",
    "exec": "runs a program of the caller's choosing on push",
    "namespace": "redirects which refs the repository serves",
    "git-dir": "points git at another repository",
    "work-tree": "points git at another working tree",
    "separate-git-dir": "puts the repository outside the workspace",
    "exec-path": "changes where git finds its own programs",
    "config-env": "injects configuration",
    "output": "writes a file anywhere",
    "template": "copies hooks into a repository, or reads a file as a message template",
    "no-index": "compares files outside the repository",
    "bare": "makes a bare repository whose config and hooks are plain files",
    "recurse-submodules": "fetches and checks out submodules (the usual road to git CVEs)",
    "ext-diff": "runs an external diff program",
    "textconv": "runs text-conversion programs",
    "orderfile": "reads a file outside the workspace",
}

# Options that read a file: allowed only for a path inside the workspace.
FILE_OPTIONS = ("file", "pathspec-from-file")

# Options that share a refused option's name but only print, allowed by their exact spelling
# (no value, no abbreviation) in the one subcommand where they mean that: ``rev-parse
# --git-dir`` prints where the repository is; it cannot point git anywhere (a global
# ``--git-dir`` would have to come before the subcommand, which is refused).
QUERY_OPTIONS: dict[str, frozenset[str]] = {"rev-parse": frozenset({"git-dir"})}

# Short options that take a value, per subcommand (a cluster like ``-aF msg`` ends at the first
# of them); the ones in ``files`` name a file to read.
SHORT_WITH_VALUE: dict[str, tuple[str, str]] = {
    # subcommand: (letters taking a value, of which these read a file)
    "commit": ("mFcCt", "Ft"),
    "tag": ("mFu", "F"),
}

# Short options refused where they write or read files (diff -O reads an order file) or pick a
# program (pull -s names a merge strategy, found as git-merge-<name> on PATH).
REFUSED_SHORT: dict[str, str] = {
    "diff": "oO",
    "log": "oO",
    "show": "oO",
    "stash": "oO",
    "pull": "s",
}

BUILTIN_STRATEGIES = frozenset({"ort", "recursive", "resolve", "octopus", "ours", "subtree"})

# A remote-helper address: "ext::sh -c ...", "fd::3", "transport::address".
_TRANSPORT_HELPER = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*::")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


def _refuse(arg: str, why: str) -> ToolError:
    return ToolError(f"git argument {arg!r} is refused: {why}")


def _long_name(arg: str) -> tuple[str, str | None]:
    """``--name=value`` split into the name and the value (None when there is no '=')."""
    name, eq, value = arg[2:].partition("=")
    return name.lower(), (value if eq else None)


def _check_long(arg: str, subcommand: str = "") -> str | None:
    """Refuse a dangerous long option; return the FILE_OPTIONS name it abbreviates, if any."""
    name, value = _long_name(arg)
    if not name:
        return None  # "--": end of options
    if value is None and arg[2:] in QUERY_OPTIONS.get(subcommand, ()):
        return None
    for refused, why in REFUSED_LONG_OPTIONS.items():
        if refused.startswith(name):
            raise _refuse(arg, f"--{refused} {why} (abbreviations count)")
    if len(name) >= 3 and "strategy".startswith(name) and value not in BUILTIN_STRATEGIES:
        raise _refuse(
            arg,
            "only a built-in merge strategy, as --strategy=NAME: "
            + ", ".join(sorted(BUILTIN_STRATEGIES)),
        )
    for option in FILE_OPTIONS:
        if len(name) >= 2 and option.startswith(name):
            return option
    return None


def _check_path(
    arg: str, workspace: Path, vault: Path, *, names: frozenset[str] = GIT_DIR_NAMES
) -> None:
    """A path-shaped argument must name something inside the workspace and outside ``.git``,
    both as written and where it resolves (so a symlink to ``.git/hooks`` or out of the
    workspace is refused). ``git mv -f x .git/config`` would otherwise replace the config."""
    if arg.startswith("/"):
        raise _refuse(arg, "absolute paths are not allowed; name files from the workspace")
    for candidate in (arg, jail_path(workspace, arg, vault).inside):
        reason = git_control_reason(candidate, names)
        if reason:
            raise ToolError(reason)


def _check_url(arg: str) -> None:
    """Refuse remote addresses git would hand to a program, and https URLs that name a host
    the SSRF guard never allows (git resolves names itself; literal addresses are checked)."""
    for candidate in (arg, arg.partition("=")[2]):
        if _TRANSPORT_HELPER.match(candidate):
            raise _refuse(arg, "transport-helper addresses (ext::, fd::, name::) run programs")
        match = _URL.match(candidate)
        if not match:
            continue
        if match.group(1).lower() != "https":
            raise _refuse(arg, "only https:// remote URLs are allowed (or a path in the workspace)")
        try:
            host = normalize_host(urlsplit(candidate).hostname or "")
            if not isinstance(host, str):
                DEFAULT_POLICY.check(host, 443, redirect=False)
        except (HostRefused, ValueError) as exc:
            raise _refuse(arg, str(exc)) from None


def check_git_args(argv: list[str], workspace: Path, vault: Path) -> list[str]:
    """Return ``argv`` if the git policy allows it; raise ``ToolError`` naming the first problem."""
    if not argv:
        raise ToolError("git needs a subcommand, e.g. 'status' or 'log --oneline -5'")
    subcommand = argv[0]
    if subcommand.startswith("-"):
        raise _refuse(
            subcommand,
            "global options (-c, -C, --git-dir, ...) are not allowed; start with the subcommand",
        )
    if subcommand not in ALLOWED_SUBCOMMANDS:
        allowed = " ".join(sorted(ALLOWED_SUBCOMMANDS))
        raise _refuse(subcommand, f"not an allowed subcommand (allowed: {allowed})")
    pending: str | None = None  # "file" or "value": what the next argument is
    options_done = False
    for arg in argv[1:]:
        if "\x00" in arg:
            raise _refuse(arg, "NUL bytes are not allowed")
        if pending is not None:
            # The value of an option like -m or -F: a message or a file, never a URL.
            if pending == "file":
                _check_path(arg, workspace, vault)
            pending = None
            continue
        _check_url(arg)
        if arg == "--":
            options_done = True
            continue
        if arg.startswith("--") and not options_done:
            if _check_long(arg, subcommand):
                value = _long_name(arg)[1]
                if value is None:
                    pending = "file"
                else:
                    _check_path(value, workspace, vault)
            continue
        if arg.startswith("-") and len(arg) > 1 and not options_done:
            pending = _check_short(arg, subcommand, workspace, vault)
            continue
        if arg.startswith("--"):
            _check_long(arg)  # even as a pathspec, never let these through
        # mv can create a submodule file; elsewhere naming it is harmless. (An attributes file
        # it creates is judged before the next git call, like any other: gitconfig.)
        names = GIT_CONTROL_NAMES if subcommand == "mv" else GIT_DIR_NAMES
        _check_path(arg, workspace, vault, names=names)
    if pending == "file":
        raise ToolError(f"git {subcommand}: an option that takes a file is missing its path")
    return argv


def _check_short(arg: str, subcommand: str, workspace: Path, vault: Path) -> str | None:
    """Check one short-option cluster; return what the next argument is, if it is a value."""
    cluster = arg[1:]
    refused = REFUSED_SHORT.get(subcommand, "")
    if cluster[0] in refused:
        raise _refuse(arg, f"-{cluster[0]} is not allowed for git {subcommand}")
    takes_value, reads_file = SHORT_WITH_VALUE.get(subcommand, ("", ""))
    for index, letter in enumerate(cluster):
        if letter in takes_value:
            attached = cluster[index + 1 :]
            kind = "file" if letter in reads_file else "value"
            if not attached:
                return kind
            if kind == "file":
                _check_path(attached, workspace, vault)
            return None
    return None


# Command-line-scope config: outranks system, global and the repository's own config.
PINNED_CONFIG: tuple[tuple[str, str], ...] = (
    *NO_GIT_PROGRAMS,  # hooks, fsmonitor, attributes file
    ("core.sshCommand", "false"),
    ("core.pager", "cat"),
    ("core.editor", ":"),
    ("core.askPass", ""),
    ("sequence.editor", ":"),
    ("credential.helper", ""),
    ("gpg.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.x509.program", "false"),
    ("protocol.allow", "never"),
    ("protocol.ext.allow", "never"),
    ("protocol.fd.allow", "never"),
    ("protocol.https.allow", "always"),
    ("protocol.file.allow", "always"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("transfer.fsckObjects", "true"),
    ("core.protectNTFS", "true"),
    ("core.protectHFS", "true"),
    ("log.showSignature", "false"),
    ("init.defaultBranch", "main"),
    ("advice.detachedHead", "false"),
)


# External diff and text-conversion programs come from repository config (diff.external,
# diff.<driver>.textconv), which env config cannot blank out; these flags switch both off.
_NO_DIFF_PROGRAMS = ("--no-ext-diff", "--no-textconv")


def with_safe_defaults(argv: list[str]) -> list[str]:
    """``argv`` with external diff and textconv programs switched off where git would run them."""
    if argv[0] in ("diff", "log", "show"):
        return [argv[0], *_NO_DIFF_PROGRAMS, *argv[1:]]
    return argv


def git_env(workspace: Path, home: Path) -> dict[str, str]:
    """The whole environment git runs with: the neutral one around ``home``, config pinned."""
    extra = {
        "GIT_PROTOCOL_FROM_USER": "0",
        "GIT_EDITOR": ":",
        "GIT_PAGER": "cat",
        "PAGER": "cat",
        "GIT_AUTHOR_NAME": "shelldon",
        "GIT_AUTHOR_EMAIL": "shelldon@localhost",
        "GIT_COMMITTER_NAME": "shelldon",
        "GIT_COMMITTER_EMAIL": "shelldon@localhost",
        **git_config_env(PINNED_CONFIG),
    }
    return risky_env(workspace, home, extra)


# Subcommands that talk to another repository: only these keep the network when approved, and
# a local one's upload-pack or receive-pack runs with its own config (git clears
# GIT_CONFIG_COUNT for a local transport).
REMOTE_SUBCOMMANDS = frozenset({"fetch", "pull", "push", "remote"})


def talks_to_a_remote(call_args: dict[str, Any]) -> bool:
    """Whether an approved ``git`` call with these arguments needs the network."""
    args = call_args.get("args")
    try:
        words = shlex.split(args) if isinstance(args, str) else []
    except ValueError:
        return False
    return bool(words) and words[0] in REMOTE_SUBCOMMANDS


def planted_findings(argv: list[str], workspace: Path, env: dict[str, str]) -> list[Finding]:
    """Everything the workspace's repository (and any local repository this call talks to)
    says that would make git run a program: its config, its attributes files."""
    entries = repository_config(workspace, env)
    found = config_findings(entries, workspace, workspace, scopes=("local", "worktree"))
    found += attribute_findings(workspace, workspace_git_dir(workspace))
    if argv[0] in REMOTE_SUBCOMMANDS:
        named = [arg for arg in argv[1:] if not arg.startswith("-")]
        found += local_remote_findings([*remote_urls(entries), *named], workspace, env)
    return found


def prepare_git(workspace: Path, vault: Path, args: str, home: Path) -> ChildRun:
    """The child an approved ``git <args>`` starts, or ``ToolError`` naming why it may not:
    the argument policy (``check_git_args``), then what the repository itself says."""
    try:
        argv = shlex.split(args)
    except ValueError as exc:
        raise ToolError(f"cannot split git arguments {args!r}: {exc}") from None
    check_git_args(argv, workspace, vault)
    env = git_env(workspace, home)
    findings = planted_findings(argv, workspace, env)
    if findings:
        raise refusal(findings, f"git {argv[0]}")
    return ChildRun(("git", *with_safe_defaults(argv)), env, f"git {argv[0]}")


def git(ctx: ToolContext, args: str) -> str:
    """Run ``git <args>`` (split like a shell would, but no shell) in the workspace."""
    with fresh_home() as home:
        return run_child(ctx, prepare_git(ctx.workspace, ctx.vault, args, home))


def specs() -> list[ToolSpec]:
    """The git family: ``git`` (RISKY)."""
    allowed = ", ".join(sorted(ALLOWED_SUBCOMMANDS))
    definition = ToolDefinition(
        name="git",
        description=f"Run git in the workspace. Allowed subcommands: {allowed}.",
        params_schema=string_params(args="arguments after 'git', e.g. \"commit -m 'fix typo'\""),
        tier=Tier.RISKY,
    )
    return [ToolSpec(definition, git, network=talks_to_a_remote)]
