"""Setting ``[telegram] allowed_users`` in the config file the owner wrote, every other byte kept
(comments, order, spacing, line endings), and writing it back atomically with its owner, group
and mode: what ``shelldon pair`` does to the file.

Each place the value could go (a line that looks like the key, then a line that looks like the
``[telegram]`` header, then the file's end) is tried in turn, and an edit is kept only if
``tomllib`` reads it as the original with just that one value changed. So a look-alike inside a
string, or in another table (``[telegram.x]``, ``[[telegram]]``, ``brain.telegram``), is never
the one changed: changing it would change some other value too.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path

from shelldon.toolbox.atomic import write_atomic


class ConfigEditError(ValueError):
    """The config file cannot be edited safely; the message says what to do instead."""


def _key(bare: str) -> str:
    """``bare`` as TOML may write it: bare or in either quotes."""
    return f"""(?:{bare}|"{bare}"|'{bare}')"""


# The value: the empty list the installed config has (comments and line breaks inside it
# included), or another empty value (0, false, "").
_KEY = re.compile(
    rf"^[ \t]*(?:{_key('telegram')}[ \t]*\.[ \t]*)?{_key('allowed_users')}[ \t]*=[ \t]*"
    r"(\[(?:\s|#.*)*\]|[^\s#]+)",
    re.M,
)
_HEADER = re.compile(rf"^[ \t]*\[[ \t]*{_key('telegram')}[ \t]*\][ \t]*(?:#.*)?\r?(?:\n|\Z)", re.M)


def _by_hand(user_id: int) -> ConfigEditError:
    return ConfigEditError(
        "the config's [telegram] table is written in a way this command does not edit "
        f"(an inline table, dotted keys, an array of tables): set allowed_users = [{user_id}] "
        "under [telegram] by hand"
    )


def _edits(text: str, user_id: int) -> Iterator[str]:
    """``text`` with the value set at each place it could go, the likeliest first."""
    for match in _KEY.finditer(text):
        yield f"{text[: match.start(1)]}[{user_id}]{text[match.end(1) :]}"
    newline = "\r\n" if "\r\n" in text else "\n"
    line = f"allowed_users = [{user_id}]{newline}"
    for match in _HEADER.finditer(text):
        at = match.end()
        sep = "" if text[:at].endswith("\n") else newline
        yield text[:at] + sep + line + text[at:]
    sep = "" if not text or text.endswith("\n") else newline
    blank = newline if text.strip() else ""
    yield f"{text}{sep}{blank}[telegram]{newline}{line}"


def with_owner(text: str, user_id: int) -> str:
    """``text`` (a config file) with ``[telegram] allowed_users = [user_id]``; every other byte as
    it was. Refused (``ConfigEditError``) when ``allowed_users`` already names anyone, or when
    no edit reads back as exactly that one change."""
    if type(user_id) is not int or user_id <= 0:
        raise ConfigEditError(f"{user_id!r} is not a Telegram user id")
    try:
        before = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigEditError(f"the config is not valid TOML: {exc}") from None
    table = before.get("telegram", {})
    if not isinstance(table, dict):
        raise _by_hand(user_id)
    current = table.get("allowed_users", [])
    if current:
        raise ConfigEditError(
            f"allowed_users already names {current!r}: pairing is for the first owner; "
            "edit the file to change who the owner is"
        )
    expected = {**before, "telegram": {**table, "allowed_users": [user_id]}}
    for edited in _edits(text, user_id):
        with contextlib.suppress(tomllib.TOMLDecodeError):
            if tomllib.loads(edited) == expected:
                return edited
    raise _by_hand(user_id)


def _read(path: Path) -> tuple[str, os.stat_result]:
    """The file's text and its stat, refusing a symlink: root would write where it points."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if path.is_symlink():
            raise ConfigEditError(
                f"{path} is a symlink: name the file itself with --config {os.path.realpath(path)}"
            ) from None
        raise ConfigEditError(f"cannot read {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ConfigEditError(f"{path} is not a regular file")
        data = f.read()
    try:
        return data.decode("utf-8"), st
    except UnicodeDecodeError:
        raise ConfigEditError(f"{path} is not UTF-8 text") from None


def add_owner(path: Path, user_id: int) -> None:
    """Make ``user_id`` the owner in the config file at ``path``, keeping every other byte and
    the file's owner, group and mode. A missing file is created 0600, owned like its
    directory (the home's owner, when root pairs a pet that runs on defaults)."""
    if path.exists() or path.is_symlink():
        text, st = _read(path)
        mode, uid, gid = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
    else:
        text = ""
        try:
            home = path.parent.stat()
        except OSError as exc:
            raise ConfigEditError(f"cannot write {path}: {exc.strerror}") from None
        mode, uid, gid = 0o600, home.st_uid, home.st_gid
    edited = with_owner(text, user_id)
    try:
        write_atomic(path, edited.encode("utf-8"), mode=mode, owner=(uid, gid))
    except OSError as exc:
        raise ConfigEditError(f"cannot write {path}: {exc.strerror or exc}") from None
