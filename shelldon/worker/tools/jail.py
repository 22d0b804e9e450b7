"""The path jail and the deny list: every file tool resolves a model-supplied path through here.

``resolve_in_jail`` turns a path relative to the workspace root into the real file it names
(symlinks dereferenced first, then compared as paths), or raises ``ToolError`` saying what to do.
``is_denied`` says why a name is off limits (the vault, ``.env`` files, keys and certificates,
``id_*`` private keys), case-insensitively; the jail applies it to the requested name and to
the resolved file alike. Both are plain functions so the RISKY file tools reuse them unchanged.
"""

from __future__ import annotations

import os
import stat
import unicodedata
from pathlib import Path, PurePath, PurePosixPath

from shelldon.worker.tools.registry import ToolError

# Credential-shaped suffixes: keys, certificates, keystores, password files.
DENIED_SUFFIXES = (".pem", ".key", ".crt", ".cer", ".p12", ".pfx", ".htpasswd", ".jks", ".ppk")

# The secrets directory's name: refused by name too, in case the vault is not where config says.
VAULT_NAME = "vault"


def _fold(name: str) -> str:
    """The form names are compared in: compatibility-normalized and case-folded."""
    return unicodedata.normalize("NFKC", name).casefold()


def denied_name(name: str) -> str | None:
    """Why one path component is credential-shaped, or None if it is not."""
    folded = _fold(name)
    if folded == VAULT_NAME:
        return "the vault holds shelldon's secrets"
    if folded == ".env" or folded.endswith(".env") or folded.startswith(".env."):
        return "environment files hold secrets"
    for suffix in DENIED_SUFFIXES:
        if folded.endswith(suffix):
            return f"{suffix} files hold keys or certificates"
    if folded.startswith("id_"):
        return "id_* files are private keys"
    return None


def is_denied(path: str | PurePath) -> str | None:
    """Why ``path`` is on the deny list (any component credential-shaped), or None if allowed."""
    for part in PurePosixPath(path).parts:
        reason = denied_name(part)
        if reason is not None:
            return f"'{path}' is refused: {reason}"
    return None


def _refuse_request(path: str) -> None:
    """Refuse the shapes of request that can only mean escaping the jail."""
    if "\x00" in path:
        raise ToolError("the path contains a NUL byte; give a plain path relative to the workspace")
    if path.startswith("~"):
        raise ToolError(
            f"paths are relative to the workspace; '~' is not expanded ({path!r}), "
            "give a path like 'notes/todo.txt'"
        )
    if PurePosixPath(path).is_absolute():
        raise ToolError(
            f"paths are relative to the workspace; {path!r} is absolute, "
            "drop the leading '/' (use '.' for the workspace root)"
        )
    if ".." in PurePosixPath(path).parts:
        raise ToolError(
            f"paths are relative to the workspace; {path!r} uses '..', "
            "which is not allowed: name the file from the workspace root"
        )


def resolve_in_jail(workspace: Path, path: str, vault: Path) -> Path:
    """The real location of ``path`` (relative to ``workspace``) if it stays inside the jail.

    Raises ``ToolError`` for absolute, ``~``, NUL and ``..`` paths, for anything whose real
    location (after following every symlink) is outside the workspace or inside the vault, for
    deny-listed names (requested or resolved), and for a regular file with more than one hard
    link (a hard link can smuggle an outside file past the realpath check).
    """
    requested = path if path.strip() else "."
    _refuse_request(requested)
    reason = is_denied(requested)
    if reason is not None:
        raise ToolError(reason)
    try:
        root = Path(os.path.realpath(workspace, strict=True))
        real = Path(os.path.realpath(root / requested))
        vault_real = Path(os.path.realpath(vault))
    except OSError as exc:
        raise ToolError(f"cannot resolve {requested!r} in the workspace: {exc.strerror}") from None
    if not real.is_relative_to(root):
        raise ToolError(
            f"paths are relative to the workspace; {requested!r} resolves outside it "
            "(a symlink or link that leaves the workspace is refused)"
        )
    if real.is_relative_to(vault_real):
        raise ToolError(f"'{requested}' is refused: the vault holds shelldon's secrets")
    inside = real.relative_to(root)
    reason = is_denied(inside)
    if reason is not None:
        raise ToolError(f"'{requested}' resolves to a refused file: {reason}")
    try:
        info = os.stat(real)
    except FileNotFoundError:
        return real
    except OSError as exc:
        raise ToolError(f"cannot inspect {requested!r}: {exc.strerror}") from None
    refuse_hard_link(requested, info)
    return real


def refuse_hard_link(requested: str, info: os.stat_result) -> None:
    """Refuse a regular file that has another name somewhere (``st_nlink > 1``)."""
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        raise ToolError(
            f"{requested!r} is refused: it has {info.st_nlink} hard links, and a hard link can "
            "point at a file outside the workspace"
        )
