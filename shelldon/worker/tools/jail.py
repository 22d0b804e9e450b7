"""The path jail and the deny list: every file tool resolves a model-supplied path through here.

``jail_path`` resolves a path the way the kernel would (relative to the workspace root, or an
absolute path; symlinks and ``..`` followed), then judges the result: it must lie inside the
workspace, outside the vault, not be credential-shaped, and not be a hard-linked file.
``open_jailed`` then opens exactly that resolved path beneath the workspace's descriptor with no
symlink followed (``beneath.open_beneath``), so a directory swapped for a symlink after the
judgement makes the open fail instead of escaping.

``is_denied`` says which of ``DENY_RULES`` (credential files, and backup or editor copies of
them) a path breaks, comparing names NFKC-normalized and case-folded. All are plain functions
so the RISKY tools reuse them unchanged.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import unicodedata
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath

from shelldon.proc.beneath import open_beneath
from shelldon.worker.tools.registry import ToolError

# Credential-shaped suffixes: keys, certificates, keystores, password files.
DENIED_SUFFIXES = (
    ".pem", ".key", ".crt", ".cer", ".p12", ".pfx", ".htpasswd", ".jks", ".ppk", ".keystore",
    ".kdbx",
)  # fmt: skip

# The secrets directory's name: refused by name too, in case the vault is not where config says.
VAULT_NAME = "vault"


@dataclass(frozen=True, slots=True)
class DenyRule:
    """One thing a credential file is, named in every refusal it causes.

    A path component matches when one of its forms (the name itself, or the name a backup or
    editor copy was made from) equals one of ``names``, matches ``pattern`` or ends with one of
    ``suffixes``, and the components just above it are ``parents``. A directory rule therefore
    refuses the directory and everything beneath it.
    """

    name: str
    why: str
    names: frozenset[str] = frozenset()
    pattern: re.Pattern[str] | None = None
    suffixes: tuple[str, ...] = ()
    parents: tuple[str, ...] = ()

    def reason(self, parts: tuple[str, ...], index: int, forms: frozenset[str]) -> str | None:
        """Why ``parts[index]`` (seen as ``forms``) breaks this rule, or None if it does not."""
        if self.parents:
            start = index - len(self.parents)
            if start < 0 or tuple(_fold(p) for p in parts[start:index]) != self.parents:
                return None
        for form in forms:
            if form in self.names or (self.pattern is not None and self.pattern.search(form)):
                return self.why
            for suffix in self.suffixes:
                if form.endswith(suffix):
                    return self.why.format(suffix=suffix)
        return None


def _rule(name: str, why: str, *names: str, parents: tuple[str, ...] = ()) -> DenyRule:
    return DenyRule(name, why, frozenset(names), parents=parents)


# Sources: the default rules of gitleaks and trufflehog, GitHub's secret-scanning file list,
# and where each tool documents that it keeps its credentials.
DENY_RULES: tuple[DenyRule, ...] = (
    _rule("vault", "the vault holds shelldon's secrets", VAULT_NAME),
    _rule("ssh-dir", "everything under .ssh/ is SSH keys, agent sockets and config", ".ssh"),
    _rule("gnupg-dir", "everything under .gnupg/ is GnuPG's private keyring", ".gnupg"),
    _rule("aws", "everything under .aws/ is AWS credentials and config", ".aws"),
    _rule("azure", "everything under .azure/ is Azure CLI tokens", ".azure"),
    _rule("gcloud", "everything under .config/gcloud/ is Google Cloud credentials", "gcloud",
          parents=(".config",)),
    _rule("gcloud", "Google Cloud's application default credentials",
          "application_default_credentials.json"),
    _rule("docker-config", ".docker/config.json holds registry logins", "config.json",
          parents=(".docker",)),
    _rule("docker-config", ".dockercfg holds registry logins", ".dockercfg"),
    _rule("kube-config", ".kube/config holds cluster credentials", "config", parents=(".kube",)),
    DenyRule("kube-config", "kubeconfig files hold cluster credentials",
             pattern=re.compile(r"(^|[._-])kubeconfig(\.ya?ml|\.json|[-_][\w-]+)?$")),
    _rule("cargo-credentials", "cargo's registry tokens", "credentials", "credentials.toml",
          parents=(".cargo",)),
    _rule("gem-credentials", "RubyGems' API key", "credentials", parents=(".gem",)),
    _rule("gh-hosts", "the GitHub CLI's tokens", "hosts.yml", parents=(".config", "gh")),
    _rule("netrc", "netrc files hold login passwords for hosts (curl, git, ftp)",
          ".netrc", "_netrc"),
    _rule("git-credentials", "git's credential store holds passwords and tokens in clear text",
          ".git-credentials"),
    _rule("npmrc", ".npmrc holds npm registry tokens", ".npmrc"),
    _rule("pypirc", ".pypirc holds PyPI upload tokens", ".pypirc"),
    _rule("database-passwords", "database client password files", ".pgpass", ".my.cnf"),
    _rule("token-file", "CLI token files (Vault, Terraform Cloud)",
          ".vault-token", "credentials.tfrc.json"),
    _rule("direnv", "direnv's .envrc exports secrets into the environment", ".envrc"),
    DenyRule("env-file", "environment files hold secrets",
             pattern=re.compile(r"^\.env$|\.env$|^\.env\.")),
    DenyRule("ssh-key", "SSH private keys (and their public halves) are never read or written",
             pattern=re.compile(r"^id_(rsa|dsa|ecdsa|ed25519|xmss)(_sk)?(-cert)?(\.pub)?$")),
    DenyRule("key-file", "{suffix} files hold keys, certificates or passwords",
             suffixes=DENIED_SUFFIXES),
)  # fmt: skip

# A backup or editor copy of a file is as secret as the file: ``id_rsa~``, ``id_rsa.bak``,
# ``.id_rsa.swp`` (vim), ``#id_rsa#`` and ``.#id_rsa`` (emacs), ``server.key.orig``,
# ``id_rsa (1)`` (a desktop's copy), ``.env.dpkg-old``.
_COPY_OF = (
    re.compile(r"^\.(.+)\.(?:sw[a-p]|un~)$"),
    re.compile(r"^#(.+)#$"),
    re.compile(r"^\.#(.+)$"),
    re.compile(
        r"^(.+?)(?:~|\.~\d+~|\.(?:bak|backup|old|orig|save|sav|copy|tmp|rej|sw[a-p]|dpkg-old"
        r"|dpkg-dist|dpkg-new|rpmsave|rpmnew|ucf-old|ucf-dist)\d*|[ _-](?:copy|backup|bak|old)"
        r"(?: ?\d+)?| \(\d+\))$"
    ),
)


def _fold(name: str) -> str:
    """The form names are compared in: compatibility-normalized and case-folded."""
    return unicodedata.normalize("NFKC", name).casefold()


@functools.lru_cache(maxsize=4096)
def _forms(name: str) -> frozenset[str]:
    """``name`` folded, plus every name it is a backup or editor copy of."""
    seen = {_fold(name)}
    todo = list(seen)
    while todo:
        current = todo.pop()
        for copy_of in _COPY_OF:
            match = copy_of.match(current)
            if match and match.group(1) not in seen:
                seen.add(match.group(1))
                todo.append(match.group(1))
    return frozenset(seen)


# Everything any rule looks for, so an ordinary name is passed by three checks, not by every
# rule (a list_dir of 500 entries judges each one).
_ANY_NAME = frozenset(name for rule in DENY_RULES for name in rule.names)
_ANY_SUFFIX = tuple(suffix for rule in DENY_RULES for suffix in rule.suffixes)
_ANY_PATTERN = re.compile("|".join(f"(?:{r.pattern.pattern})" for r in DENY_RULES if r.pattern))


def _may_be_denied(forms: frozenset[str]) -> bool:
    return any(
        form in _ANY_NAME or form.endswith(_ANY_SUFFIX) or _ANY_PATTERN.search(form)
        for form in forms
    )


def deny_reason(path: str | PurePath) -> tuple[DenyRule, str] | None:
    """The first deny rule ``path`` breaks and why, or None if every component is allowed."""
    parts = tuple(p for p in str(path).split("/") if p not in ("", "."))
    for index, part in enumerate(parts):
        forms = _forms(part)
        if not _may_be_denied(forms):
            continue
        for rule in DENY_RULES:
            why = rule.reason(parts, index, forms)
            if why is not None:
                return rule, why
    return None


def is_denied(path: str | PurePath) -> str | None:
    """Why ``path`` is on the deny list, naming the rule, or None if it is allowed."""
    found = deny_reason(path)
    if found is None:
        return None
    rule, why = found
    return f"'{path}' is refused by the deny rule '{rule.name}': {why}"


@dataclass(frozen=True, slots=True)
class Jailed:
    """A judged path: the workspace's real root and the resolved path beneath it (no symlink,
    no ``..``; ``.`` for the root itself)."""

    root: Path
    inside: PurePosixPath

    @property
    def real(self) -> Path:
        """The resolved location as one absolute path (for messages and for git's checks)."""
        return self.root / self.inside


def _refuse_request(path: str) -> None:
    """Refuse the shapes of request that cannot name a workspace file."""
    if "\x00" in path:
        raise ToolError("the path contains a NUL byte; give a plain path relative to the workspace")
    if path.startswith("~"):
        raise ToolError(
            f"paths are relative to the workspace; '~' is not expanded ({path!r}), "
            "give a path like 'notes/todo.txt'"
        )


def _beneath(path: str, base: str) -> str | None:
    """``path`` relative to ``base`` (both normalized absolute strings), or None if outside."""
    if path == base:
        return "."
    prefix = base if base.endswith("/") else base + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


def _relative_text(requested: str, workspace: Path, root: str) -> str | None:
    """``requested`` as a path relative to the workspace root, symlinks and ``..`` untouched;
    None for an absolute path that does not start at the workspace (as configured or real)."""
    if not requested.startswith("/"):
        return requested
    parts = [p for p in requested.split("/") if p not in ("", ".")]
    for base in (os.path.normpath(workspace), root):
        base_parts = [p for p in base.split("/") if p]
        if parts[: len(base_parts)] == base_parts:
            return "/".join(parts[len(base_parts) :]) or "."
    return None


def jail_path(workspace: Path, path: str, vault: Path) -> Jailed:
    """Resolve ``path`` (relative to ``workspace``, or absolute) and judge where it lands.

    Raises ``ToolError`` for NUL and ``~`` paths, for anything whose real location (after every
    symlink and ``..``) is outside the workspace or inside the vault, for deny-listed names
    (as written or as resolved), and for a regular file with more than one hard link (a hard
    link can smuggle an outside file past the realpath check).
    """
    requested = path if path.strip() else "."
    _refuse_request(requested)
    try:
        root = os.path.realpath(workspace, strict=True)
    except OSError as exc:
        raise ToolError(f"cannot resolve {requested!r} in the workspace: {exc.strerror}") from None
    # Text that leaves the workspace is refused before anything outside it is looked at.
    relative = _relative_text(requested, workspace, root)
    written = None
    if relative is not None:
        written = _beneath(os.path.normpath(os.path.join(root, relative)), root)
    if relative is None or written is None:
        if requested.startswith("/"):
            raise ToolError(
                f"{requested!r} is an absolute path outside the workspace; paths are relative "
                "to the workspace root (use '.' for the root, 'notes/todo.txt' for a file)"
            )
        raise ToolError(
            f"{requested!r} uses '..' to climb out of the workspace; paths are relative to the "
            "workspace root"
        )
    try:
        real = os.path.realpath(os.path.join(root, relative))
        vault_real = os.path.realpath(vault)
    except OSError as exc:
        raise ToolError(f"cannot resolve {requested!r} in the workspace: {exc.strerror}") from None
    inside = _beneath(real, root)
    if inside is None:
        raise ToolError(
            f"paths are relative to the workspace; {requested!r} resolves outside it "
            "(a symlink or link that leaves the workspace is refused)"
        )
    if _beneath(real, vault_real) is not None:
        raise ToolError(
            f"'{requested}' is refused by the deny rule 'vault': the vault holds shelldon's secrets"
        )
    found = deny_reason(written)
    if found is not None:
        raise ToolError(f"'{requested}' is refused by the deny rule '{found[0].name}': {found[1]}")
    reason = is_denied(inside)
    if reason is not None:
        raise ToolError(f"'{requested}' resolves to a refused file: {reason}")
    try:
        refuse_hard_link(requested, os.stat(real))
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ToolError(f"cannot inspect {requested!r}: {exc.strerror}") from None
    return Jailed(Path(root), PurePosixPath(inside))


def resolve_in_jail(workspace: Path, path: str, vault: Path) -> Path:
    """The real location of ``path`` if the jail allows it (see ``jail_path``)."""
    return jail_path(workspace, path, vault).real


def open_jailed(jailed: Jailed, flags: int, mode: int = 0o600) -> int:
    """Open the judged path with ``flags``, following no symlink on the way (OSError if one
    appeared since the judgement: ELOOP or ENOTDIR)."""
    root_fd = os.open(jailed.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_beneath(root_fd, jailed.inside, flags, mode)
    finally:
        os.close(root_fd)


def refuse_hard_link(requested: str, info: os.stat_result) -> None:
    """Refuse a regular file that has another name somewhere (``st_nlink > 1``)."""
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        raise ToolError(
            f"{requested!r} is refused: it has {info.st_nlink} hard links, and a hard link can "
            "point at a file outside the workspace"
        )
