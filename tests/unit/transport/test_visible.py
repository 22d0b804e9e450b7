"""Hidden characters, foreign hosts and terminal controls: what ``visible`` makes readable.

Attack inspiration: Trojan Source (CVE-2021-42574, bidi overrides and isolates), the
"invisible characters" lists of Unicode TR #36 / UTS #39 (default-ignorable code points, Hangul
fillers used as invisible identifiers), IDN homoglyph phishing (Cyrillic look-alikes, fullwidth
forms, zero-width characters that IDNA maps away), and terminal escape injection through
program output (CVE-2021-25743-style ANSI/OSC sequences).
"""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shelldon.transport.visible import (
    ascii_host,
    for_terminal,
    foreign_hosts,
    hidden_characters,
    is_hidden,
    reveal,
)

HIDDEN = {
    # bidi embeddings, overrides, isolates, marks
    **{chr(c): "bidi" for c in range(0x202A, 0x202F)},
    **{chr(c): "bidi" for c in range(0x2066, 0x206A)},
    "\u200e": "bidi", "\u200f": "bidi", "\u061c": "bidi",
    # zero-width and joiners
    "\u200b": "zero width", "\u200c": "zero width", "\u200d": "zero width",
    "\u2060": "word joiner", "\ufeff": "BOM", "\u00ad": "soft hyphen", "\u034f": "CGJ",
    "\u180e": "Mongolian vowel separator", "\u2061": "function application",
    # blank letters and marks (default-ignorable, not Cf)
    "\u115f": "Hangul filler", "\u1160": "Hangul filler", "\u3164": "Hangul filler",
    "\uffa0": "halfwidth Hangul filler", "\u17b4": "Khmer inherent vowel",
    "\ufe0f": "variation selector", "\U000e0100": "variation selector",
    "\u2800": "braille blank",
    # tags, private use, unassigned, surrogates, controls
    "\U000e0041": "tag", "\ue000": "private use", "\U0010fffd": "private use",
    "\U000e0fff": "unassigned default-ignorable", "\u0378": "unassigned",
    "\ud800": "lone surrogate",
    "\x00": "NUL", "\x1b": "ESC", "\r": "CR", "\x08": "BS", "\x7f": "DEL", "\x85": "NEL",
    "\x9b": "CSI", "\u2028": "line separator", "\u2029": "paragraph separator",
    # spaces that are not U+0020
    "\u00a0": "no-break space", "\u2000": "en quad", "\u2007": "figure space",
    "\u200a": "hair space", "\u202f": "narrow no-break space", "\u205f": "math space",
    "\u3000": "ideographic space", "\u1680": "ogham space",
}  # fmt: skip


@pytest.mark.parametrize("ch", sorted(HIDDEN), ids=lambda c: f"U+{ord(c):04X}")
def test_every_invisible_or_direction_changing_character_is_marked(ch: str) -> None:
    shown = reveal(f"rm -rf x{ch}y")
    assert ch not in shown
    assert f"⟦U+{ord(ch):04X}⟧" in shown
    assert shown.startswith("rm -rf x") and shown.endswith("y")


def test_ordinary_text_is_left_as_it_is() -> None:
    for text in (
        "ls -la | grep '^d' > out.txt\n\tand a tab",
        "café naïve Ærøskøbing",
        "日本語のテキスト, 한국어, עברית, العربية",
        "emoji 😀 🐢",
    ):
        assert reveal(text) == text


@given(st.text())
def test_nothing_hidden_survives_reveal(text: str) -> None:
    assert not any(is_hidden(ch) for ch in reveal(text))


def test_hidden_characters_says_which_how_many_and_where() -> None:
    found = hidden_characters("echo ok\u202e\nsafe\u200b and \u200b\u00a0")
    assert [(f"U+{h.code:04X}", h.count, h.line, h.column) for h in found] == [
        ("U+202E", 1, 1, 8),
        ("U+200B", 2, 2, 5),
        ("U+00A0", 1, 2, 12),
    ]
    assert str(found[0]) == "U+202E RIGHT-TO-LEFT OVERRIDE (line 1, column 8)"
    assert str(found[1]) == "U+200B ZERO WIDTH SPACE ×2 (first at line 2, column 5)"
    assert hidden_characters("plain\ttext\n") == ()


def test_unnamed_characters_still_get_a_description() -> None:
    (control,) = hidden_characters("\x1b")
    (private,) = hidden_characters("\ue000")
    assert control.name == "control" and private.name == "private use"


CYRILLIC_GOOGLE = "g\u043e\u043egle.com"
CYRILLIC_GITHUB = "g\u0456thub.com"


@pytest.mark.parametrize(
    ("text", "written", "ascii"),
    [
        (f"https://{CYRILLIC_GOOGLE}/login", CYRILLIC_GOOGLE, "xn--ggle-55da.com"),
        (f"curl -s {CYRILLIC_GOOGLE}/x", CYRILLIC_GOOGLE, "xn--ggle-55da.com"),
        (f"remote add origin https://{CYRILLIC_GITHUB}/o/r.git", CYRILLIC_GITHUB,
         "xn--gthub-n2e.com"),
        (f"remote add origin git@{CYRILLIC_GITHUB}:o/r.git", CYRILLIC_GITHUB,
         "xn--gthub-n2e.com"),
        (f"https://user:pw@{CYRILLIC_GOOGLE}:8443/", CYRILLIC_GOOGLE, "xn--ggle-55da.com"),
        ("https://\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45\uff0ecom/", "\uff45\uff58\uff41"
         "\uff4d\uff50\uff4c\uff45\uff0ecom", "example.com"),
        ("https://goo\u200bgle.com/", "goo\u200bgle.com", "google.com"),
        ("https://fa\u00df.de/", "fa\u00df.de", "xn--fa-hia.de"),
    ],
)  # fmt: skip
def test_a_host_that_is_not_ascii_is_shown_with_the_name_it_resolves_as(
    text: str, written: str, ascii: str
) -> None:
    (host,) = foreign_hosts(text)
    assert (host.written, host.ascii) == (written, ascii)
    assert ascii in str(host)
    assert "\u200b" not in str(host)  # the written form is revealed too


def test_ascii_hosts_and_non_host_text_are_not_flagged() -> None:
    assert foreign_hosts("curl https://example.com/ and git@github.com:o/r") == ()
    assert foreign_hosts("echo café au lait; ls données") == ()


def test_an_invalid_international_host_says_so() -> None:
    assert ascii_host("a\u202eb.com") is None
    (host,) = foreign_hosts("https://xn--a\u0300\u202e.com/")
    assert host.ascii is None
    assert "not a valid international name" in str(host)


def test_terminal_controls_are_escaped_and_ordinary_text_kept() -> None:
    hostile = "\x1b]0;pwned\x07\x1b[2J\x9b31mred\rover\x08\u202edone"
    shown = for_terminal(hostile)
    for ch in "\x1b\x07\x9b\r\x08\u202e":
        assert ch not in shown
    assert "⟦U+001B⟧]0;pwned⟦U+0007⟧" in shown
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    kept = f"line one\n\tline two {family} caf\u00e9"
    assert for_terminal(kept) == kept


@given(st.text())
def test_no_terminal_control_survives(text: str) -> None:
    shown = for_terminal(text)
    assert not any(unicodedata.category(ch) == "Cc" and ch not in "\n\t" for ch in shown)
