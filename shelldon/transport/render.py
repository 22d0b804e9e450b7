"""Telegram HTML: escaping, ``<pre>`` blocks, and splitting long texts into valid messages.

Telegram's HTML knows a few tags and four entities; every ``<``, ``>`` and ``&`` that is not
markup must be escaped. A message holds at most 4096 characters, counted in UTF-16 code
units; ``split_message`` cuts on line boundaries so that each chunk is valid HTML on its own
(a tag open across a cut is closed before it and reopened after it).
"""

from __future__ import annotations

import html
import re

MAX_MESSAGE_CHARS = 4096
"""Telegram's limit on one message's text (UTF-16 code units)."""

_ATOM = re.compile(r"<[^<>]*>|&#?[0-9A-Za-z]+;|\n|[^<&\n]+|[<&]")
_OPEN_TAG = re.compile(r"<([A-Za-z][A-Za-z0-9-]*)(?:\s[^<>]*)?>")
_CLOSE_TAG = re.compile(r"</([A-Za-z][A-Za-z0-9-]*)\s*>")
_TAG = re.compile(r"<[^<>]*>")


def utf16_len(text: str) -> int:
    """How long Telegram thinks ``text`` is (characters beyond the BMP count twice)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def escape(text: str) -> str:
    """``text`` safe to put inside Telegram HTML: ``<``, ``>``, ``&`` become entities."""
    # A lone surrogate (from a \udXXX JSON escape) cannot be encoded: Telegram refuses it.
    return html.escape(text.encode("utf-8", "replace").decode("utf-8"), quote=False)


def pre(text: str) -> str:
    """``text`` as a preformatted block (tool output, code), escaped."""
    return f"<pre>{escape(text)}</pre>"


def code(text: str) -> str:
    """``text`` as inline code, escaped."""
    return f"<code>{escape(text)}</code>"


def bold(text: str) -> str:
    """``text`` in bold, escaped."""
    return f"<b>{escape(text)}</b>"


def to_plain(text: str) -> str:
    """The text a reader would see of HTML ``text``: tags dropped, entities decoded."""
    return html.unescape(_TAG.sub("", text))


def _closers(stack: list[tuple[str, str]]) -> str:
    return "".join(f"</{name}>" for name, _ in reversed(stack))


def _openers(stack: list[tuple[str, str]]) -> str:
    return "".join(tag for _, tag in stack)


def _apply(atom: str, stack: list[tuple[str, str]]) -> None:
    if not atom.startswith("<"):
        return
    closing = _CLOSE_TAG.fullmatch(atom)
    if closing:
        name = closing.group(1).lower()
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][0] == name:
                del stack[i:]
                break
        return
    opening = _OPEN_TAG.fullmatch(atom)
    if opening:
        stack.append((opening.group(1).lower(), atom))


def _cut_text(text: str, room: int) -> tuple[str, str]:
    """Cut plain text so the head fits ``room`` UTF-16 units (the head may be empty)."""
    used = 0
    for cut, ch in enumerate(text):
        used += 2 if ord(ch) > 0xFFFF else 1
        if used > room:
            return text[:cut], text[cut:]
    return text, ""


class _Chunker:
    """Greedy packer: appends atoms, cutting a chunk whenever the next would overflow."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: list[str] = []
        self.stack: list[tuple[str, str]] = []
        self.parts: list[str] = [""]
        self.size = 0
        self.fresh = True  # no visible text in this chunk yet
        self.empty = True  # nothing at all after the reopened tags

    def flush(self) -> None:
        body = "".join(self.parts) + _closers(self.stack)
        if to_plain(body).strip():
            self.chunks.append(body)
        self.parts = [_openers(self.stack)]
        self.size = utf16_len(self.parts[0])
        self.fresh = True
        self.empty = True

    def fits(self, text: str, stack_after: list[tuple[str, str]]) -> bool:
        return self.size + utf16_len(text) + utf16_len(_closers(stack_after)) <= self.limit

    def add(self, text: str, stack_after: list[tuple[str, str]]) -> None:
        if not text:
            return
        self.parts.append(text)
        self.size += utf16_len(text)
        self.stack = stack_after
        self.empty = False
        if self.fresh and to_plain(text).strip():
            self.fresh = False

    def add_line(self, atoms: list[str]) -> None:
        """Add one line (its atoms), preferring to start a new chunk over cutting the line."""
        after = list(self.stack)
        for atom in atoms:
            _apply(atom, after)
        line = "".join(atoms)
        separator = "" if self.empty else "\n"
        if self.fits(separator + line, after):
            self.add(separator + line, after)
            return
        if not self.fresh:
            self.flush()
            if self.fits(line, after):
                self.add(line, after)
                return
        elif separator:
            self.add(separator, list(self.stack))
        self.add_hard(atoms)

    def add_hard(self, atoms: list[str]) -> None:
        """Add an over-long line atom by atom, cutting text runs where the chunk is full."""
        queue = list(atoms)
        while queue:
            atom = queue.pop(0)
            after = list(self.stack)
            _apply(atom, after)
            if self.fits(atom, after):
                self.add(atom, after)
                continue
            if not atom.startswith(("<", "&")):
                room = self.limit - self.size - utf16_len(_closers(after))
                head, tail = _cut_text(atom, room)
                if head:
                    self.add(head, after)
                    queue.insert(0, tail)
                    self.flush()
                    continue
            if self.fresh:
                # Nothing fits even in an empty chunk: take it whole rather than loop forever.
                self.add(atom, after)
            else:
                self.flush()
                queue.insert(0, atom)


def split_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """Cut HTML ``text`` into chunks of at most ``limit`` UTF-16 units, each valid on its own
    (see the module docstring). A line longer than a chunk is cut inside its text, never inside
    a tag or an entity; chunks with no visible text are dropped, so "" yields none."""
    chunker = _Chunker(limit)
    line: list[str] = []
    for atom in _ATOM.findall(text):
        if atom == "\n":
            chunker.add_line(line)
            line = []
        else:
            line.append(atom)
    chunker.add_line(line)
    chunker.flush()
    return chunker.chunks
