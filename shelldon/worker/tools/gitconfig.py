"""What a repository may not say before an approved git call runs: no program for git to start.

git runs programs that its configuration names: filter drivers on ``add`` and ``checkout``,
diff and merge drivers, ``remote.<name>.uploadpack`` on ``fetch``, hooks, fsmonitor, pagers,
credential helpers, URL rewrites to ``ext::`` addresses, included files that say any of these.
The workspace is writable by every self-coded tool, so a tool can plant any of them in
``.git/config`` and turn a harmless-looking approved ``git add`` into code execution. The git
tool pins what it can at command-line scope (``GIT_CONFIG_COUNT`` outranks every file); what
it cannot blank out this module finds first and the call is refused, naming each file and key.

git itself reads the config (``git config --list --show-origin --show-scope -z --no-includes``
under the call's neutral environment), so subsections and continuation lines mean what they
mean to git, and ``include.path`` is a key to refuse rather than a file to follow. A local
repository that a fetch or push talks to is read the same way: its ``upload-pack`` or
``receive-pack`` runs with its own config. An attributes file that names a filter, or a diff or
merge driver git does not have built in, is refused too (the config half is refused above;
naming the attribute says where the trap was laid).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from shelldon.worker.tools.registry import ToolError

CONFIG_TIMEOUT_S = 5.0
_VALUE_CHARS = 120  # of a refused key's value, shown in the refusal
_ATTRIBUTES_CAP_BYTES = 256 * 1024  # git itself ignores attribute files over 100 MB; ours are small

# (section, subsection, name) -> why; "*" matches any subsection (or any name), None none.
# Keys are as git prints them: section and name lower-cased, the subsection as written.
PROGRAM_KEYS: dict[tuple[str, str | None, str], str] = {
    ("filter", "*", "clean"): "a clean filter runs a program on add",
    ("filter", "*", "smudge"): "a smudge filter runs a program on checkout",
    ("filter", "*", "process"): "a filter process runs a program on add and checkout",
    ("diff", "*", "command"): "an external diff driver runs a program on diff",
    ("diff", "*", "textconv"): "a textconv driver runs a program on diff and log",
    ("diff", None, "external"): "an external diff runs a program on diff",
    ("merge", "*", "driver"): "a merge driver runs a program on merge and pull",
    ("merge", "*", "recursive"): "names a merge driver for inner merges",
    ("core", None, "hookspath"): "points git at hooks to run",
    ("core", None, "fsmonitor"): "an fsmonitor runs a program on status, add, commit",
    ("core", None, "sshcommand"): "runs a program instead of ssh",
    ("core", None, "gitproxy"): "runs a program as a proxy for git://",
    ("core", None, "pager"): "runs a program as the pager",
    ("core", None, "editor"): "runs a program as the editor",
    ("core", None, "askpass"): "runs a program to ask for passwords",
    ("core", None, "alternaterefscommand"): "runs a program on fetch and push",
    ("core", None, "attributesfile"): "reads attributes (which name drivers) from another file",
    ("core", None, "worktree"): "points the working tree somewhere else",
    ("pager", None, "*"): "runs a program as a pager",
    ("sequence", None, "editor"): "runs a program as the editor",
    ("interactive", None, "difffilter"): "runs a program on interactive add",
    ("gpg", None, "program"): "runs a program to sign or verify",
    ("gpg", "*", "program"): "runs a program to sign or verify",
    ("credential", None, "helper"): "runs a credential helper program",
    ("credential", "*", "helper"): "runs a credential helper program",
    ("remote", "*", "uploadpack"): "runs a program on fetch and pull",
    ("remote", "*", "receivepack"): "runs a program on push",
    ("remote", "*", "vcs"): "runs a remote-helper program",
    ("url", "*", "insteadof"): "rewrites remote URLs (to ext:: or anywhere else)",
    ("url", "*", "pushinsteadof"): "rewrites push URLs (to ext:: or anywhere else)",
    ("include", None, "path"): "includes another file, which may say any of these",
    ("includeif", "*", "path"): "includes another file, which may say any of these",
    ("alias", None, "*"): "aliases can run shell commands",
    ("init", None, "templatedir"): "copies hooks from a template directory",
    ("tar", "*", "command"): "runs a program on archive",
    ("difftool", "*", "cmd"): "runs a program as a diff tool",
    ("mergetool", "*", "cmd"): "runs a program as a merge tool",
    ("uploadpack", None, "packobjectshook"): "runs a program on fetch",
}

# A remote-helper address: "ext::sh -c ...", "fd::3", "transport::address".
_TRANSPORT_HELPER = re.compile(r"^\s*[A-Za-z][A-Za-z0-9+.\-]*::")

# Drivers git has built in: naming them in .gitattributes runs nothing (their config is judged
# above); anything else is a driver that only configuration can define.
BUILTIN_DIFF_DRIVERS = frozenset(
    {
        "ada", "bash", "bibtex", "cpp", "csharp", "css", "dts", "elixir", "fortran", "fountain",
        "golang", "html", "java", "javascript", "kotlin", "markdown", "matlab", "objc",
        "pascal", "perl", "php", "python", "r", "ruby", "rust", "scheme", "tex",
    }
)  # fmt: skip
BUILTIN_MERGE_DRIVERS = frozenset({"text", "binary", "union"})


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One ``key = value`` as git read it: its scope, the file it came from, key and value."""

    scope: str
    origin: str
    key: str
    value: str | None


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a repository says that would run a program: where, what, and why."""

    where: str
    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what} ({self.why})"


def _split_key(key: str) -> tuple[str, str | None, str]:
    section, _, rest = key.partition(".")
    subsection, dot, name = rest.rpartition(".")
    return section.lower(), (subsection if dot else None), name.lower()


def program_key(key: str, value: str | None) -> str | None:
    """Why the config ``key`` (with ``value``) would make git run a program, or None."""
    section, subsection, name = _split_key(key)
    for (s, sub, n), why in PROGRAM_KEYS.items():
        if s != section or n not in ("*", name):
            continue
        if (sub is None) == (subsection is None):
            return why
    if section == "remote" and name in ("url", "pushurl") and _TRANSPORT_HELPER.match(value or ""):
        return "a transport-helper address (ext::, fd::, name::) runs a program on fetch and push"
    if section == "protocol" and name == "allow" and (value or "").strip().lower() != "never":
        return "allows transports (ext:: runs a program) that git is pinned to refuse"
    if section == "submodule" and name == "update" and (value or "").lstrip().startswith("!"):
        return "runs a shell command on submodule update"
    return None


def parse_config_list(raw: bytes) -> list[ConfigEntry]:
    """Entries from ``git config --list --show-scope --show-origin -z`` output."""
    fields = raw.decode("utf-8", "surrogateescape").split("\0")
    entries = []
    for i in range(0, len(fields) - 2, 3):
        scope, origin, item = fields[i], fields[i + 1], fields[i + 2]
        key, newline, value = item.partition("\n")
        entries.append(ConfigEntry(scope, origin, key, value if newline else None))
    return entries


def read_config(cwd: Path, env: Mapping[str, str], file: Path | None = None) -> list[ConfigEntry]:
    """The config git sees in ``cwd`` (or in ``file`` alone), without following includes.
    Raises ``ToolError`` when git cannot read it (a broken file is refused, not guessed at)."""
    argv = ["git", "config", "--no-includes", "--list", "--show-scope", "--show-origin", "-z"]
    if file is not None:
        argv += ["--file", str(file)]
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=CONFIG_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"could not read the repository's git config: {exc}") from None
    if done.returncode != 0:
        error = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["?"]
        where = str(file) if file is not None else "the workspace repository"
        raise ToolError(
            f"git cannot read the config of {where} ({error[0]}); refused until it is repaired"
        )
    return parse_config_list(done.stdout)


def _origin_path(origin: str, cwd: Path) -> Path | None:
    if not origin.startswith("file:"):
        return None
    path = origin[len("file:") :]
    return Path(os.path.normpath(cwd / path))


def _shown(path: Path, workspace: Path) -> str:
    try:
        return str(path.relative_to(workspace))
    except ValueError:
        return str(path)


def config_findings(
    entries: Iterable[ConfigEntry], cwd: Path, workspace: Path, *, scopes: Iterable[str]
) -> list[Finding]:
    """Every entry of ``scopes`` that names a program, and every config file of those scopes
    that lies outside the workspace (a ``.git`` file can point a repository anywhere)."""
    wanted = frozenset(scopes)
    found: list[Finding] = []
    outside_named: set[Path] = set()
    real_ws = Path(os.path.realpath(workspace))
    for entry in entries:
        if entry.scope not in wanted:
            continue
        path = _origin_path(entry.origin, cwd)
        where = _shown(path, workspace) if path is not None else entry.origin
        if path is not None and entry.scope != "command":
            real = Path(os.path.realpath(path))
            if real != real_ws and real_ws not in real.parents and path not in outside_named:
                outside_named.add(path)
                found.append(Finding(where, "the repository's config", "is outside the workspace"))
        why = program_key(entry.key, entry.value)
        if why:
            value = entry.value
            if value is not None and len(value) > _VALUE_CHARS:
                value = value[:_VALUE_CHARS] + "…"
            shown = entry.key if value is None else f"{entry.key} = {value}"
            found.append(Finding(where, shown, why))
    return found


# ---------------------------------------------------------------- local repositories


def git_dir_of(path: Path) -> Path | None:
    """The git directory that ``upload-pack``/``receive-pack`` would open for ``path`` (git's
    ``enter_repo`` tries ``path/.git``, ``path``, ``path.git/.git``, ``path.git``), or None."""
    for candidate in (path / ".git", path, Path(f"{path}.git") / ".git", Path(f"{path}.git")):
        try:
            info = os.stat(candidate)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            target = _read_gitfile(candidate)
            if target is not None:
                return target
            continue
        looks_like_repo = (candidate / "objects").is_dir() or (candidate / "commondir").exists()
        if stat.S_ISDIR(info.st_mode) and (candidate / "HEAD").exists() and looks_like_repo:
            return candidate
    return None


def workspace_git_dir(workspace: Path) -> Path | None:
    """The git directory of the workspace's own repository (``.git``, followed as git follows
    it, or where a ``.git`` file points), or None if there is none."""
    dot_git = workspace / ".git"
    if dot_git.is_file():
        return _read_gitfile(dot_git)
    return dot_git if dot_git.is_dir() else None


def repository_config(workspace: Path, env: Mapping[str, str]) -> list[ConfigEntry]:
    """The config of the workspace's repository as git reads it; empty (no ``git`` run) when
    the workspace has no ``.git`` at all. (Implicit bare repositories are pinned off:
    ``safe.bareRepository=explicit``; discovery above the workspace stops at its parent.)"""
    if not os.path.lexists(workspace / ".git"):
        return []
    return read_config(workspace, env)


def _read_gitfile(path: Path) -> Path | None:
    try:
        text = path.read_text(errors="replace")[:4096]
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    return path.parent / text[len("gitdir:") :].strip()  # an absolute target replaces the parent


def config_files_of(git_dir: Path) -> list[Path]:
    """The config files git reads for the repository at ``git_dir``: the common dir's
    ``config`` (a linked worktree's ``commondir`` says where that is) and ``config.worktree``."""
    try:
        # An absolute pointer replaces git_dir when joined; an empty one leaves it.
        common = git_dir / (git_dir / "commondir").read_text().strip()
    except OSError:
        common = git_dir
    files = [common / "config", git_dir / "config.worktree"]
    return [f for f in files if f.is_file()]


def is_local_address(url: str) -> bool:
    """Whether git would reach ``url`` as a local repository (a path or ``file://``)."""
    if url.lower().startswith("file://"):
        return True
    if "://" in url or _TRANSPORT_HELPER.match(url):
        return False
    # scp-like "host:path" is ssh unless a slash comes before the colon (git's own rule).
    colon, slash = url.find(":"), url.find("/")
    return colon < 0 or (0 <= slash < colon)


def local_path(url: str, workspace: Path) -> Path:
    """The filesystem path of a local address, relative ones from the workspace."""
    path = url[len("file://") :] if url.lower().startswith("file://") else url
    return Path(os.path.normpath(workspace / os.path.expanduser(path)))


def remote_urls(entries: Iterable[ConfigEntry]) -> list[str]:
    """Every ``remote.*.url`` and ``remote.*.pushurl`` of the repository's own config."""
    urls = []
    for entry in entries:
        section, subsection, name = _split_key(entry.key)
        own = entry.scope in ("local", "worktree") and section == "remote" and subsection
        if own and name in ("url", "pushurl") and entry.value:
            urls.append(entry.value)
    return urls


def local_remote_findings(
    urls: Iterable[str], workspace: Path, env: Mapping[str, str]
) -> list[Finding]:
    """What the config of each local repository in ``urls`` says that would run a program."""
    found: list[Finding] = []
    seen: set[Path] = set()
    for url in urls:
        if not is_local_address(url):
            continue
        git_dir = git_dir_of(local_path(url, workspace))
        if git_dir is None or git_dir in seen:
            continue
        seen.add(git_dir)
        for file in config_files_of(git_dir):
            entries = read_config(workspace, env, file)
            # ``--file`` entries are "command" scope; a remote may well live outside.
            found += config_findings(entries, workspace, workspace, scopes=("command",))
    return found


# ---------------------------------------------------------------- attributes


def attribute_line_findings(text: str, where: str) -> list[Finding]:
    """Every attribute in one attributes file that names a filter, or a diff or merge driver
    git does not have built in (macros ``[attr]name ...`` included)."""
    found = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        for token in _attribute_tokens(line):
            name, eq, value = token.partition("=")
            if not eq:
                continue
            why = None
            if name == "filter":
                why = "names a filter driver, which runs a program on add and checkout"
            elif name == "diff" and value not in BUILTIN_DIFF_DRIVERS:
                why = "names a diff driver that only config can define"
            elif name == "merge" and value not in BUILTIN_MERGE_DRIVERS:
                why = "names a merge driver that only config can define"
            if why:
                found.append(Finding(f"{where}:{number}", token, why))
    return found


def _attribute_tokens(line: str) -> list[str]:
    """The attribute tokens of a line (the pattern, quoted or not, dropped)."""
    if line.startswith('"'):
        end = 1
        while end < len(line) and line[end] != '"':
            end += 2 if line[end] == "\\" else 1
        rest = line[end + 1 :]
    else:
        parts = line.split(None, 1)
        rest = parts[1] if len(parts) > 1 else ""
    return rest.split()


def attribute_files(workspace: Path, git_dir: Path | None) -> list[Path]:
    """Every ``.gitattributes`` under the workspace (not inside ``.git`` directories, no
    symlinked directory followed) and the repository's ``info/attributes``."""
    files = []
    for directory, subdirs, names in os.walk(workspace):
        subdirs[:] = [name for name in subdirs if name != ".git"]
        if ".gitattributes" in names:
            files.append(Path(directory, ".gitattributes"))
    if git_dir is not None:
        files.append(git_dir / "info" / "attributes")
    return files


def attribute_findings(workspace: Path, git_dir: Path | None) -> list[Finding]:
    """What the workspace's attributes files say that would name a program for git."""
    found = []
    for path in attribute_files(workspace, git_dir):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue  # absent, or a symlink (git does not follow in-tree attribute symlinks)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            data = os.read(fd, _ATTRIBUTES_CAP_BYTES)
        finally:
            os.close(fd)
        found += attribute_line_findings(data.decode("utf-8", "replace"), _shown(path, workspace))
    return found


def refusal(findings: list[Finding], what: str) -> ToolError:
    """One refusal naming every finding, with what to do about it."""
    listed = "\n".join(f"- {finding}" for finding in findings)
    return ToolError(
        f"{what} is refused: the repository says git should run programs of its own, and an "
        f"approved call runs only what the owner saw:\n{listed}\n"
        "Remove these settings (the owner can run `git config --unset KEY` in the workspace, "
        "or edit the file) and ask again."
    )
