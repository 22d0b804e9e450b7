"""The model's Markdown as Telegram HTML: bold, italics, inline and fenced code, links, lists.

Model text is hostile, so the output is built, never passed through: every character of the
input is escaped, and the only markup is what this module writes — ``<b>``, ``<i>``,
``<code>``, ``<pre>`` (with ``<code class="language-…">`` inside for a named language) and
``<a href>`` for http, https and tg links. Every tag it opens it closes, in order: Markdown
that never closes (``**oops``) stays literal text. Inline formatting never crosses a line, so
only a ``<pre>`` block spans lines, which ``render.split_message`` closes and reopens across
a cut. Work is linear in the input (closers are found by bisection, not by rescanning).
"""

from __future__ import annotations

import bisect
import html
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from shelldon.transport.render import escape

LINK_SCHEMES = ("http://", "https://", "tg://")
"""The only link targets rendered as links; anything else stays visible as text."""

_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*?)[ \t]*$")
_LANGUAGE = re.compile(r"[A-Za-z0-9_+-]{1,32}")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(?P<text>.*?)(?:[ \t]+#+)?[ \t]*$")
_BULLET = re.compile(r"^(?P<indent>[ \t]*)[-*+][ \t]+(?P<text>.*)$")
_SPECIAL = re.compile(r"[`\[*_]")
# A link: [label](target), the label on one line without brackets, the target without
# spaces, quotes or angle brackets (one level of parentheses, as in Wikipedia's URLs).
_LINK = re.compile(r"\[(?P<label>[^\[\]\n]+)\]\((?P<url>(?:[^\s()<>\"'`]|\([^\s()<>\"'`]*\))+)\)")
_URL = re.compile(r"(?:https?://[A-Za-z0-9.\-\[\]:@]+|tg://)[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*")
_BARE_URL = re.compile(r"(?:https?|tg)://[^\s<>\"'`]+")
_MAX_URL = 2048
_KINDS = ("***", "**", "*", "___", "__", "_")


def _attribute(value: str) -> str:
    # Only the entities Telegram names (&lt; &gt; &amp; &quot;); a URL never holds < or >.
    return html.escape(value, quote=False).replace('"', "&quot;")


def safe_link(url: str) -> bool:
    """Whether ``url`` may become an ``<a href>``: http(s) with a host, or tg, in URL
    characters only (no quotes, spaces or brackets to break out of the attribute)."""
    return len(url) <= _MAX_URL and url.startswith(LINK_SCHEMES) and bool(_URL.fullmatch(url))


@dataclass(slots=True)
class _Line:
    """One line, with where its code spans and links are and where emphasis may close."""

    text: str
    # start: (end, body start, body end)
    code: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    # start: (end, label end, url)
    links: dict[int, tuple[int, int, str]] = field(default_factory=dict)
    closers: dict[str, list[int]] = field(default_factory=dict)
    bare: _Spans | None = None  # URLs written out: no emphasis inside them


def _run_length(text: str, i: int) -> int:
    char, n = text[i], 1
    while i + n < len(text) and text[i + n] == char:
        n += 1
    return n


def _code_spans(text: str) -> dict[int, tuple[int, int, int]]:
    """Code spans: a run of backticks up to the next run of the same length, as CommonMark."""
    runs = [(m.start(), m.end() - m.start()) for m in re.finditer(r"`+", text)]
    by_length: dict[int, list[int]] = {}
    for start, length in runs:
        by_length.setdefault(length, []).append(start)
    spans: dict[int, tuple[int, int, int]] = {}
    position = 0
    for start, length in runs:
        if start < position:
            continue
        starts = by_length[length]
        k = bisect.bisect_right(starts, start)
        if k < len(starts):
            close = starts[k]
            spans[start] = (close + length, start + length, close)
            position = close + length
    return spans


class _Spans:
    """Sorted, non-overlapping ``[start, end)`` ranges."""

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        ranges.sort()
        self.starts = [s for s, _ in ranges]
        self.ends = [e for _, e in ranges]

    def covers(self, i: int) -> bool:
        k = bisect.bisect_right(self.starts, i) - 1
        return k >= 0 and i < self.ends[k]

    def starts_within(self, a: int, b: int) -> bool:
        k = bisect.bisect_right(self.starts, a)
        return k < len(self.starts) and self.starts[k] < b


def _scan(text: str) -> _Line:
    line = _Line(text, code=_code_spans(text))
    code = _Spans([(start, end) for start, (end, _, _) in line.code.items()])
    targets = []
    for m in _LINK.finditer(text):
        if code.covers(m.start()) or code.starts_within(m.start(), m.end()):
            continue
        line.links[m.start()] = (m.end(), m.end("label"), m.group("url"))
        targets.append((m.end("label"), m.end()))
    bare = [(m.start(), m.end()) for m in _BARE_URL.finditer(text) if not code.covers(m.start())]
    line.bare = _Spans(list(bare))
    # Emphasis never opens or closes inside a code span or a URL (a URL's underscores).
    protected = _Spans([(s, e) for s, (e, _, _) in line.code.items()] + targets + bare)
    for kind in _KINDS:
        line.closers[kind] = [
            c
            for c in _delimiter_runs(text, kind)
            if _closes(text, c, kind) and not protected.covers(c)
        ]
    return line


def _delimiter_runs(text: str, kind: str) -> list[int]:
    """Starts of runs of exactly ``len(kind)`` of its character."""
    n = len(kind)
    return [
        m.start() for m in re.finditer(re.escape(kind[0]) + "+", text) if m.end() - m.start() == n
    ]


def _closes(text: str, c: int, kind: str) -> bool:
    if c == 0 or text[c - 1].isspace():
        return False
    # Never inside a word, for * as for _: "2**10 + 3**2" and "ls a*b*c" stay as written.
    after = c + len(kind)
    return not (after < len(text) and text[after].isalnum())


def _opens(text: str, i: int, kind: str) -> bool:
    after = i + len(kind)
    if after >= len(text) or text[after].isspace():
        return False
    return not (i > 0 and text[i - 1].isalnum())


def _tags(kind: str) -> tuple[str, ...]:
    return {1: ("i",), 2: ("b",), 3: ("b", "i")}.get(len(kind), ())


def _inline(line: _Line, start: int, end: int, inside: frozenset[str], in_link: bool) -> str:
    """HTML for ``line.text[start:end]``; ``inside`` holds the tags already open around it."""
    text, out, i = line.text, [], start
    while i < end:
        found = _SPECIAL.search(text, i, end)
        if found is None:
            out.append(escape(text[i:end]))
            break
        p = found.start()
        out.append(escape(text[i:p]))
        char = text[p]
        if char == "`":
            i = _code(line, p, end, in_link, out)
        elif char == "[":
            i = _link(line, p, end, inside, in_link, out)
        else:
            i = _emphasis(line, p, end, inside, in_link, out)
    return "".join(out)


def _code(line: _Line, p: int, end: int, in_link: bool, out: list[str]) -> int:
    text = line.text
    span = line.code.get(p)
    if span is None or span[0] > end or in_link:
        n = min(_run_length(text, p), end - p)
        out.append(escape(text[p : p + n]))
        return p + n
    close, a, b = span
    body = text[a:b]
    # CommonMark: one space each side is padding, so a span can start or end with a backtick.
    if len(body) > 2 and body[0] == body[-1] == " " and body.strip():
        body = body[1:-1]
    out.append(f"<code>{escape(body)}</code>" if body.strip() else escape(text[p:close]))
    return close


def _link(
    line: _Line, p: int, end: int, inside: frozenset[str], in_link: bool, out: list[str]
) -> int:
    text = line.text
    link = line.links.get(p)
    if link is None or link[0] > end or in_link:
        out.append("[")
        return p + 1
    close, label_end, url = link
    label = text[p + 1 : label_end]
    if not safe_link(url):
        out.append(escape(text[p:close]))
    elif misleading(label, url):
        # The label names another place than the link goes: show both, the real one linked.
        href = _attribute(url)
        out.append(f'{escape(label)} (<a href="{href}">{escape(url)}</a>)')
    else:
        href = _attribute(url)
        body = _inline(line, p + 1, label_end, inside, True)
        out.append(f'<a href="{href}">{body}</a>')
    return close


def _emphasis(
    line: _Line, p: int, end: int, inside: frozenset[str], in_link: bool, out: list[str]
) -> int:
    text = line.text
    n = _run_length(text, p)
    if p + n > end:
        out.append(escape(text[p:end]))
        return end
    kind = text[p] * n
    tags = _tags(kind)
    in_url = line.bare is not None and line.bare.covers(p)
    if tags and not in_url and not inside.intersection(tags) and _opens(text, p, kind):
        closers = line.closers[kind]
        k = bisect.bisect_left(closers, p + n + 1)
        if k < len(closers) and closers[k] + n <= end:
            close = closers[k]
            body = _inline(line, p + n, close, inside.union(tags), in_link)
            opening = "".join(f"<{t}>" for t in tags)
            closing = "".join(f"</{t}>" for t in reversed(tags))
            out.append(f"{opening}{body}{closing}")
            return close + n
    out.append(escape(text[p : p + n]))
    return p + n


_DOMAIN = re.compile(r"(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}")


def misleading(label: str, url: str) -> bool:
    """Whether a link's ``label`` names a host its ``url`` does not go to
    (``[mybank.com](https://evil.example)``)."""
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:  # a malformed IPv6 literal: nothing to compare, so say so
        return True
    for found in _DOMAIN.findall(label):
        name = found.lower()
        if host != name and not host.endswith("." + name):
            return True
    return False


def inline_html(text: str, inside: frozenset[str] = frozenset()) -> str:
    """One line of Markdown as Telegram HTML (no block structure), inside the tags ``inside``."""
    return _inline(_scan(text), 0, len(text), inside, False)


def _fenced(lines: list[str], i: int) -> tuple[str, int]:
    """The ``<pre>`` block opened at ``lines[i]`` and the index after it (an unclosed fence
    runs to the end of the text)."""
    opened = _FENCE.match(lines[i])
    assert opened is not None
    fence = opened.group("fence")
    words = opened.group("info").split()
    language = words[0] if words and _LANGUAGE.fullmatch(words[0]) else ""
    closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
    body: list[str] = []
    j = i + 1
    while j < len(lines) and not closing.match(lines[j]):
        body.append(lines[j])
        j += 1
    content = "\n".join(body)
    if not content.strip():
        return "", j + 1
    if language:
        return f'<pre><code class="language-{language}">{escape(content)}</code></pre>', j + 1
    return f"<pre>{escape(content)}</pre>", j + 1


def markdown_to_html(text: str) -> str:
    """``text`` (Markdown as a model writes it) as Telegram HTML; see the module docstring."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            block, i = _fenced(lines, i)
            if block:
                out.append(block)
            continue
        heading = _HEADING.match(line)
        bullet = _BULLET.match(line)
        if heading and heading.group("text"):
            out.append(f"<b>{_heading_inline(heading.group('text'))}</b>")
        elif bullet and bullet.group("text"):
            out.append(f"{escape(bullet.group('indent'))}• {inline_html(bullet.group('text'))}")
        else:
            out.append(inline_html(line))
        i += 1
    return "\n".join(out)


def _heading_inline(text: str) -> str:
    # "## **Title**" is a bold title already: the heading's own bold is enough.
    for strong in ("**", "__"):
        if len(text) > 4 and text.startswith(strong) and text.endswith(strong):
            text = text[2:-2]
    return inline_html(text, frozenset({"b"}))


def reply_html(text: str, markdown_chars: int) -> str:
    """A reply whose first ``markdown_chars`` characters are Markdown and the rest plain text,
    as Telegram HTML."""
    cut = max(0, min(markdown_chars, len(text)))
    return markdown_to_html(text[:cut]) + escape(text[cut:])
