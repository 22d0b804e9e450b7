"""Text as it really is: hidden characters marked, hosts shown as they resolve, terminals safe.

What the owner approves must read exactly as it runs. A right-to-left override can make
``rm -rf ~`` look like something else (Trojan Source, CVE-2021-42574); a zero-width space, a
Hangul filler or a no-break space makes two different commands look the same; ``google.com``
spelled with Cyrillic o's (U+043E) is another host (a homoglyph): a fetch connects to its
ASCII (punycode) name.

``for_terminal``, for everything else the console prints (model replies, gate output), marks
only the controls a terminal obeys: ordinary text, emoji joiners included, is left alone.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

_MARK = "⟦U+{:04X}⟧"
_KEPT = frozenset("\n\t")  # shown for what they are: a line break, a tab

# Unicode's Default_Ignorable_Code_Point ranges (DerivedCoreProperties.txt): characters a
# renderer draws as nothing. Many are Cf and caught by category; the rest are letters and
# marks that look like nothing (Hangul fillers, variation selectors, the grapheme joiner).
_DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
    (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
    (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)  # fmt: skip
_ALSO_BLANK = frozenset({0x2800})  # BRAILLE PATTERN BLANK: prints as a space, is a "symbol"
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})

# What a terminal acts on: C0/C1 controls and DEL (escape sequences, CR, BS, BEL), and the
# bidi controls (terminals that do bidi reorder text around them).
_TERMINAL_CONTROLS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


@functools.lru_cache(maxsize=4096)
def is_hidden(ch: str) -> bool:
    """Whether ``ch`` prints as nothing, as something it is not, or steers text direction."""
    if ch in _KEPT or ch == " ":
        return False
    code = ord(ch)
    category = unicodedata.category(ch)
    if category in _HIDDEN_CATEGORIES or category == "Zs":  # every space but U+0020
        return True
    return code in _ALSO_BLANK or any(lo <= code <= hi for lo, hi in _DEFAULT_IGNORABLE)


@functools.cache
def _suspects() -> re.Pattern[str]:
    """A character class holding every hidden BMP character, and every astral one (those are
    checked one by one): scanning is then C speed for any script. Built at first use, in the
    transport only (~40 ms on the dev machine: one category lookup per BMP code point)."""
    category = unicodedata.category
    hidden_categories = _HIDDEN_CATEGORIES | {"Zs"}
    codes = {c for c in range(0x10000) if category(chr(c)) in hidden_categories}
    codes |= _ALSO_BLANK
    codes |= {c for lo, hi in _DEFAULT_IGNORABLE if hi < 0x10000 for c in range(lo, hi + 1)}
    codes -= {ord(ch) for ch in _KEPT} | {0x20}
    ranges: list[list[int]] = []
    for code in sorted(codes):
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    parts = "".join(f"\\u{lo:04x}-\\u{hi:04x}" for lo, hi in ranges)
    return re.compile(f"[{parts}\\U00010000-\\U0010ffff]")


def _mark(match: re.Match[str]) -> str:
    ch = match.group()
    return _MARK.format(ord(ch)) if is_hidden(ch) else ch


def reveal(text: str) -> str:
    """``text`` with every hidden character (``is_hidden``) shown as ``⟦U+XXXX⟧``."""
    if text.isascii() and text.isprintable():
        return text
    return _suspects().sub(_mark, text)


def for_terminal(text: str) -> str:
    """``text`` safe to write to a terminal: controls it would obey are shown as ``⟦U+XXXX⟧``;
    line breaks and tabs stay."""
    return _TERMINAL_CONTROLS.sub(lambda m: _MARK.format(ord(m.group())), text)


@dataclass(frozen=True, slots=True)
class HiddenCharacter:
    """One kind of hidden character in a text: which, how many, and where the first one is."""

    code: int
    count: int
    line: int
    column: int

    @property
    def name(self) -> str:
        """Its Unicode name, or a description where it has none (controls, private use)."""
        ch = chr(self.code)
        fallback = {"Cc": "control", "Co": "private use", "Cn": "unassigned", "Cs": "surrogate"}
        return unicodedata.name(ch, fallback.get(unicodedata.category(ch), "unnamed"))

    def __str__(self) -> str:
        times = f" ×{self.count}" if self.count > 1 else ""
        first = "first at " if self.count > 1 else ""
        where = f"{first}line {self.line}, column {self.column}"
        return f"U+{self.code:04X} {self.name}{times} ({where})"


def hidden_characters(text: str) -> tuple[HiddenCharacter, ...]:
    """Every kind of hidden character in ``text``, in order of first appearance."""
    found: dict[int, list[int]] = {}  # code -> [count, first index]
    for match in _suspects().finditer(text):
        ch = match.group()
        if is_hidden(ch):
            found.setdefault(ord(ch), [0, match.start()])[0] += 1
    kinds = []
    for code, (count, index) in found.items():
        line_start = text.rfind("\n", 0, index) + 1
        line = text.count("\n", 0, index) + 1
        kinds.append(HiddenCharacter(code, count, line, index - line_start + 1))
    return tuple(kinds)


@dataclass(frozen=True, slots=True)
class ForeignHost:
    """A host name that is not plain ASCII: as written, and as the ASCII name it resolves as
    (None if it is not a valid international name at all: fetching it fails)."""

    written: str
    ascii: str | None

    def __str__(self) -> str:
        written = reveal(self.written)
        if self.ascii is None:
            return f"host {written} is not ASCII and not a valid international name"
        return f"host {written} is not ASCII: it is {self.ascii}"


# A URL's authority (after "scheme://"), a user@host, or a bare dotted name
# (curl takes URLs without a scheme); only candidates with a non-ASCII character are kept.
_URL_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://([^/?#\s\"'<>\\]+)")
_AT_HOST = re.compile(r"@([^\s/:@\"'<>\\]+)")
_DOTS = ".。．｡"  # the label separators IDNA accepts
_DOTTED = re.compile(r"(?<![\w.\-])((?:[^\W_]|-)+(?:[.。．｡](?:[^\W_]|-)+)+)")


def _authority_host(authority: str) -> str:
    host = authority.rpartition("@")[2]
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.partition(":")[0]


def _candidates(text: str) -> Iterator[str]:
    for match in _URL_AUTHORITY.finditer(text):
        yield _authority_host(match.group(1))
    if "@" in text:
        for match in _AT_HOST.finditer(text):
            yield match.group(1)
    if any(dot in text for dot in _DOTS):
        for match in _DOTTED.finditer(text):
            yield match.group(1)


def ascii_host(host: str) -> str | None:
    """The name ``host`` resolves as, encoded the way yarl (under http_get's aiohttp) does:
    IDNA 2008 with UTS #46 mapping, else IDNA 2003 (libcurl with libidn2, under curl and git
    over https, agrees on IDNA 2008); None if neither accepts it."""
    import idna  # aiohttp's own dependency (through yarl); loaded only for a foreign host

    name = host.rstrip(_DOTS)
    try:
        return idna.encode(name, uts46=True).decode("ascii")
    except UnicodeError:  # idna.IDNAError is one
        pass
    try:
        return name.encode("idna").decode("ascii")
    except UnicodeError:
        return None


def foreign_hosts(text: str) -> tuple[ForeignHost, ...]:
    """Every host-like name in ``text`` that is not ASCII (URLs, ``user@host``, dotted names),
    each once, with the ASCII name it really is."""
    if text.isascii():
        return ()
    seen: dict[str, ForeignHost] = {}
    for candidate in _candidates(text):
        host = candidate.strip(".")
        if host.isascii() or host in seen:
            continue
        seen[host] = ForeignHost(host, ascii_host(host))
    return tuple(seen.values())
