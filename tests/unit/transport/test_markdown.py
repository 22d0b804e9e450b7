"""The model's Markdown as Telegram HTML: what reads well, and what hostile text cannot do.

Attack inspiration: HTML injection through Markdown renderers (markdown-it's and marked's
"unsafe link" and raw-HTML advisories), javascript:/data: links, attribute break-outs with
quotes, unclosed emphasis that leaves a tag open (Telegram then refuses the whole message),
homograph and label/target mismatch phishing links, and pathological inputs that make a
naive emphasis matcher quadratic.
"""

from __future__ import annotations

import html
import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from shelldon.transport.markdown import markdown_to_html, misleading, safe_link
from shelldon.transport.render import MAX_MESSAGE_CHARS, split_message, to_plain, utf16_len
from tests.fakes.fake_telegram import parse_html

_TOKEN = re.compile(r"<(/?)([a-z]+)((?: [a-z]+=\"[^\"<>]*\")*)>|&(lt|gt|amp|quot);|([^<>&]+)")
_CODE_CLASS = re.compile(r' class="language-[A-Za-z0-9_+-]{1,32}"')


def assert_telegram_accepts(text: str, *, fake_parser: bool = True) -> None:
    """Stricter than Telegram: only b, i, code, pre and a; a with one http(s)/tg href and
    never nested; nothing inside code or pre but a code of a language directly in pre;
    only the four entities; every tag closed in order."""
    stack: list[str] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        assert m is not None, f"stray markup at {pos}: {text[pos : pos + 40]!r}"
        pos = m.end()
        closing, name, attrs = m.group(1), m.group(2), m.group(3)
        if name is None:
            continue
        if closing:
            assert not attrs and stack and stack[-1] == name, (name, stack)
            stack.pop()
            continue
        assert name in {"b", "i", "code", "pre", "a"}, name
        assert not {"code", "pre"} & set(stack) or (name == "code" and stack[-1:] == ["pre"])
        if name == "a":
            assert "a" not in stack
            href = re.fullmatch(r' href="([^"]*)"', attrs)
            assert href is not None, attrs
            assert safe_link(html.unescape(href.group(1)))
        elif name == "code" and attrs:
            assert stack[-1:] == ["pre"] and _CODE_CLASS.fullmatch(attrs), attrs
        else:
            assert not attrs, attrs
        stack.append(name)
    assert not stack, stack
    if fake_parser:  # and the fake Bot API's parser agrees (it is quadratic: small texts only)
        parse_html(text)


def render(text: str) -> str:
    out = markdown_to_html(text)
    assert_telegram_accepts(out)
    return out


# ---------------------------------------------------------------- reads well


def test_bold_italics_and_inline_code_become_tags() -> None:
    assert render("**bold**, *italic*, _also_ and `x < y`") == (
        "<b>bold</b>, <i>italic</i>, <i>also</i> and <code>x &lt; y</code>"
    )


def test_fenced_code_keeps_every_character_and_names_its_language() -> None:
    text = "Try:\n```python\nif a < b and c > d:\n    print('**not bold**')\n```\nDone."
    out = render(text)
    assert '<pre><code class="language-python">' in out
    assert parse_html(out) == text.replace("```python\n", "").replace("\n```", "")


def test_links_to_the_web_are_links() -> None:
    out = render("See [the docs](https://example.com/a_b_(c)?q=1&r=2) now")
    assert out == ('See <a href="https://example.com/a_b_(c)?q=1&amp;r=2">the docs</a> now')


def test_lists_and_headings_read_as_lists_and_headings() -> None:
    out = render("## Plan\n- first *step*\n* second\n  + nested\n1. numbered stays")
    assert out.split("\n") == [
        "<b>Plan</b>",
        "• first <i>step</i>",
        "• second",
        "  • nested",
        "1. numbered stays",
    ]


def test_a_url_written_out_keeps_its_underscores_and_stars() -> None:
    out = render("see https://example.com/_private_/x*y* and _this_")
    assert out == "see https://example.com/_private_/x*y* and <i>this</i>"


def test_words_code_and_math_are_left_as_written() -> None:
    for text in ("snake_case_name", "2**10 + 3**2", "ls a*b*c", "a * b * c", "f(x)_1_2"):
        assert to_plain(render(text)) == text, text


def test_unclosed_markdown_stays_literal_and_balanced() -> None:
    for text in ("**oops", "*half", "`tick", "[label](https://x.example", "__x", "~~~"):
        assert to_plain(render(text)) == text.rstrip("~") or text == "~~~"
    assert render("```\nnever closed <b>") == "<pre>never closed &lt;b&gt;</pre>"


# ---------------------------------------------------------------- hostile text


def test_raw_html_from_the_model_is_shown_not_obeyed() -> None:
    text = '<b onclick="x">hi</b> <a href="javascript:alert(1)">x</a> &amp; <tg-spoiler>'
    assert to_plain(render(text)) == text


def test_only_web_and_tg_links_become_links() -> None:
    for url in (
        "javascript:alert(1)",
        "data:text/html,<script>",
        "file:///etc/passwd",
        'https://x.example/"onmouseover="x',
        "https://",
        "ftp://x.example",
    ):
        out = render(f"[click]({url})")
        assert "<a" not in out, url
        assert to_plain(out) == f"[click]({url})"


def test_a_quote_in_a_link_cannot_leave_the_attribute() -> None:
    out = render('[x](https://e.example/?a="><b>)')
    assert "<a" not in out
    out = render("[x](https://e.example/?s=1&more)")
    assert out == '<a href="https://e.example/?s=1&amp;more">x</a>'


def test_a_label_naming_another_site_shows_where_the_link_really_goes() -> None:
    out = render("[mybank.com](https://mybank.com.evil.example/login)")
    assert to_plain(out) == ("mybank.com (https://mybank.com.evil.example/login)")
    assert misleading("www.example.com", "https://evil.example")
    assert not misleading("example.com", "https://docs.example.com/x")
    assert not misleading("the docs", "https://docs.example.com/x")


def test_nothing_nests_inside_code_and_links_do_not_nest() -> None:
    out = render(
        "`**not bold** [x](https://a.example)` and [**b** [c](https://c.example)](https://d.example)"
    )
    assert "<code>**not bold** [x](https://a.example)</code>" in out


def test_a_pathological_line_renders_in_linear_time() -> None:
    text = "`" + ("*a _b [d](" * 20_000) + (" **x" * 20_000) + ("_" * 50_000)
    started = time.perf_counter()
    out = markdown_to_html(text)
    assert time.perf_counter() - started < 3.0  # 0.35 s on the dev box
    assert_telegram_accepts(out, fake_parser=False)
    assert to_plain(out) == text


_PIECES = [*"ab _*`[]()#-+~>\n<&\"'", "https://x.example", "tg://", "```py\n", "**", "](", "- "]
_MARKDOWNISH = st.lists(st.sampled_from(_PIECES), max_size=150).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.one_of(_MARKDOWNISH, st.text(max_size=300)))
def test_any_text_renders_to_html_telegram_accepts(text: str) -> None:
    out = render(text)
    for chunk in split_message(out):
        assert utf16_len(chunk) <= MAX_MESSAGE_CHARS
        assert_telegram_accepts(chunk)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=80).map(lambda p: "".join(p) * 60))
def test_long_text_splits_into_messages_telegram_accepts(text: str) -> None:
    chunks = split_message(render(text))
    for chunk in chunks:
        assert utf16_len(chunk) <= MAX_MESSAGE_CHARS
        assert_telegram_accepts(chunk)


@settings(max_examples=200, deadline=None)
@given(
    st.text(
        alphabet=st.characters(blacklist_characters="*_`[#-+~>\r", blacklist_categories=("Cs",))
    )
)
def test_text_without_markdown_reads_exactly_as_written(text: str) -> None:
    assert to_plain(render(text)) == text
