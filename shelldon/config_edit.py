"""Setting ``[telegram] allowed_users`` in the config file the owner wrote, every other byte kept
(comments, order, spacing, line endings), and writing it back atomically with its owner, group
and mode: what ``shelldon pair`` does to the file.

The file is scanned as TOML, not searched as text: a table header or key is only taken where
TOML would take it, never inside a string, a comment or another table (``[telegram.x]``,
``[[telegram]]``, ``brain.telegram.allowed_users``). The result is then parsed with ``tomllib``
and must equal the original with just that one value changed, or nothing is written.
"""

from __future__ import annotations

import copy
import os
import re
import stat
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

TARGET = ("telegram", "allowed_users")


class ConfigEditError(ValueError):
    """The config file cannot be edited safely; the message says what to do instead."""


@dataclass(frozen=True, slots=True)
class _Found:
    """Where the scan found the key's value (``start:end``), or the ``[telegram]`` header's
    line end (``header_end``: where an absent key is added)."""

    start: int = -1
    end: int = -1
    header_end: int = -1


_BARE = re.compile(r"[A-Za-z0-9_-]+")
_BARE_VALUE = re.compile(r"[^\s,\]\}#]+")


class _Scanner:
    """Just enough of a TOML reader to know which bytes are which key's value."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _fail(self, what: str) -> ConfigEditError:
        line = self.text.count("\n", 0, self.pos) + 1
        return ConfigEditError(f"cannot read the config at line {line}: {what}")

    def _skip_blank(self, newlines: bool) -> None:
        """Skip spaces (and newlines and comments, where ``newlines``)."""
        text = self.text
        while self.pos < len(text):
            c = text[self.pos]
            if c in " \t" or (newlines and c in "\r\n"):
                self.pos += 1
            elif c == "#" and newlines:
                self._skip_comment()
            else:
                return

    def _skip_comment(self) -> None:
        end = self.text.find("\n", self.pos)
        self.pos = len(self.text) if end < 0 else end

    def _string(self) -> str:
        """Read one string at ``pos`` (any of TOML's four kinds); return its source text."""
        text, start = self.text, self.pos
        quote = text[start]
        triple = text.startswith(quote * 3, start)
        delim = quote * 3 if triple else quote
        i = start + len(delim)
        while i < len(text):
            if quote == '"' and text[i] == "\\":
                i += 2
                continue
            if not triple and text[i] == "\n":
                break
            if text.startswith(delim, i):
                end = i + len(delim)
                while triple and end < len(text) and text[end] == quote and end - i < 5:
                    end += 1  # up to two quotes may end the content itself: """a""""
                self.pos = end
                return text[start:end]
            i += 1
        raise self._fail("a string is not closed")

    def key(self) -> tuple[str, ...]:
        """A (dotted) key, its quoted parts decoded as TOML does."""
        parts: list[str] = []
        while True:
            self._skip_blank(newlines=False)
            if self.pos < len(self.text) and self.text[self.pos] in "\"'":
                source = self._string()
                parts.append(tomllib.loads(f"k = {source}")["k"])
            else:
                match = _BARE.match(self.text, self.pos)
                if match is None:
                    raise self._fail("a key was expected")
                parts.append(match.group())
                self.pos = match.end()
            self._skip_blank(newlines=False)
            if self.pos < len(self.text) and self.text[self.pos] == ".":
                self.pos += 1
                continue
            return tuple(parts)

    def value(self) -> None:
        """Skip one value: a string, an array or inline table (nested), or a bare value."""
        text = self.text
        if self.pos >= len(text):
            raise self._fail("a value was expected")
        c = text[self.pos]
        if c in "\"'":
            self._string()
        elif c in "[{":
            close = "]" if c == "[" else "}"
            self.pos += 1
            while True:
                self._skip_blank(newlines=True)
                if self.pos >= len(text):
                    raise self._fail(f"a {c} is not closed")
                if text[self.pos] == close:
                    self.pos += 1
                    return
                if text[self.pos] == ",":
                    self.pos += 1
                elif c == "{":
                    self.key()
                    if not text.startswith("=", self.pos):
                        raise self._fail("= was expected")
                    self.pos += 1
                    self._skip_blank(newlines=False)
                    self.value()
                else:
                    self.value()
        else:
            match = _BARE_VALUE.match(text, self.pos)
            if match is None:
                raise self._fail("a value was expected")
            self.pos = match.end()
            # A date and time may hold one space: 1979-05-27 07:32:00.
            if re.match(r" \d\d:\d\d", text[self.pos : self.pos + 6]):
                self.pos = _BARE_VALUE.match(text, self.pos + 1).end()  # type: ignore[union-attr]

    def find(self) -> _Found:
        """Scan the document for the target key's value and the ``[telegram]`` header."""
        text = self.text
        table: tuple[str, ...] = ()
        found = _Found()
        while True:
            self._skip_blank(newlines=True)
            if self.pos >= len(text):
                return found
            if text[self.pos] == "[":
                array = text.startswith("[[", self.pos)
                self.pos += 2 if array else 1
                name = self.key()
                closing = "]]" if array else "]"
                if not text.startswith(closing, self.pos):
                    raise self._fail(f"{closing} was expected")
                self.pos += len(closing)
                table = ("[[array]]", *name) if array else name
                self._end_of_line()
                if table == TARGET[:1]:
                    found = _Found(found.start, found.end, self.pos)
                continue
            key = self.key()
            if not text.startswith("=", self.pos):
                raise self._fail("= was expected")
            self.pos += 1
            self._skip_blank(newlines=False)
            start = self.pos
            self.value()
            if (*table, *key) == TARGET:
                if found.start >= 0:
                    raise self._fail("allowed_users is set twice")
                found = _Found(start, self.pos, found.header_end)
            self._end_of_line()

    def _end_of_line(self) -> None:
        """After a header or a key's value: spaces, a comment, then the line's end."""
        self._skip_blank(newlines=False)
        if self.pos < len(self.text) and self.text[self.pos] == "#":
            self._skip_comment()
        if self.pos < len(self.text) and self.text[self.pos] not in "\r\n":
            raise self._fail("unexpected text after a value")
        if self.text.startswith("\r\n", self.pos):
            self.pos += 2
        elif self.pos < len(self.text):
            self.pos += 1


def _by_hand(user_id: int) -> ConfigEditError:
    return ConfigEditError(
        "the config's [telegram] table is written in a way this command does not edit "
        f"(an inline table, dotted keys, an array of tables): set allowed_users = [{user_id}] "
        "under [telegram] by hand"
    )


def with_owner(text: str, user_id: int) -> str:
    """``text`` (a config file) with ``[telegram] allowed_users = [user_id]``; every other byte as
    it was. Refused (``ConfigEditError``) when ``allowed_users`` already names anyone, or when
    the result would not read back as exactly that one change."""
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
    found = _Scanner(text).find()
    newline = "\r\n" if "\r\n" in text else "\n"
    if found.start >= 0:
        edited = f"{text[: found.start]}[{user_id}]{text[found.end :]}"
    elif found.header_end >= 0:
        at = found.header_end
        line = f"allowed_users = [{user_id}]{newline}"
        if at == len(text) and not text.endswith("\n"):
            line = newline + line
        edited = text[:at] + line + text[at:]
    else:
        sep = "" if not text or text.endswith("\n") else newline
        blank = newline if text.strip() else ""
        edited = f"{text}{sep}{blank}[telegram]{newline}allowed_users = [{user_id}]{newline}"
    expected = copy.deepcopy(before)
    expected.setdefault("telegram", {})["allowed_users"] = [user_id]
    try:
        after = tomllib.loads(edited)
    except tomllib.TOMLDecodeError:
        after = None
    if after != expected:
        raise _by_hand(user_id)
    return edited


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


def write_atomically(path: Path, text: str, mode: int, uid: int, gid: int) -> None:
    """Replace ``path`` with ``text`` as one rename: a temporary file in the same directory
    with ``mode``, ``uid`` and ``gid``, synced, renamed over ``path``, the directory synced. A
    crash leaves the old file or the new one, never half of one; a symlink put at ``path``
    meanwhile is replaced, never followed."""
    directory = path.parent
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".pair", dir=directory)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            if (uid, gid) != (os.geteuid(), os.getegid()):
                os.fchown(f.fileno(), uid, gid)
            os.fchmod(f.fileno(), mode)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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
        write_atomically(path, edited, mode, uid, gid)
    except OSError as exc:
        raise ConfigEditError(f"cannot write {path}: {exc.strerror or exc}") from None
