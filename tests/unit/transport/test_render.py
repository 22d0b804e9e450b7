"""Telegram HTML rendering: escaping, <pre> blocks, splitting into valid messages."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from shelldon.transport.render import (
    MAX_MESSAGE_CHARS,
    escape,
    pre,
    split_message,
    to_plain,
    utf16_len,
)
from tests.fakes.fake_telegram import parse_html


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _assert_valid_chunks(chunks: list[str], limit: int = MAX_MESSAGE_CHARS) -> None:
    for chunk in chunks:
        assert utf16_len(chunk) <= limit
        assert parse_html(chunk).strip()


def test_tool_output_full_of_script_tags_reads_verbatim() -> None:
    output = '<script>alert("x")</script> & <b>not bold</b> &amp; 1 < 2 > 0'
    html = pre(output)
    assert "<script>" not in html
    assert parse_html(html) == output


def test_escape_touches_only_markup_characters() -> None:
    assert escape("a<b>&c \"'") == "a&lt;b&gt;&amp;c \"'"


def test_lone_surrogate_is_replaced_not_sent() -> None:
    assert escape("ok \ud800 end").encode("utf-8")


def test_ten_thousand_character_reply_is_split_into_valid_messages() -> None:
    reply = "\n".join(f"line {i:04d} " + "x" * 60 for i in range(150))
    assert len(reply) > 10_000
    chunks = split_message(escape(reply))
    assert len(chunks) == 3
    _assert_valid_chunks(chunks)
    assert _squash("".join(parse_html(c) for c in chunks)) == _squash(reply)
    # Cuts fall between lines, never inside one.
    for chunk in chunks:
        assert all(re.fullmatch(r"line \d{4} x{60}", line) for line in chunk.split("\n"))


def test_pre_block_cut_across_messages_is_closed_and_reopened() -> None:
    output = "\n".join(f"{i}: <tag> & more" for i in range(600))
    chunks = split_message("Output:\n" + pre(output))
    assert len(chunks) > 1
    _assert_valid_chunks(chunks)
    assert all(c.endswith("</pre>") for c in chunks)
    assert all(c.startswith("<pre>") for c in chunks[1:])
    assert _squash("".join(parse_html(c) for c in chunks)) == _squash("Output:" + output)


def test_single_overlong_line_is_hard_split_without_cutting_entities() -> None:
    line = "&<>" * 3000
    chunks = split_message(pre(line))
    assert len(chunks) > 1
    _assert_valid_chunks(chunks)
    assert "".join(parse_html(c) for c in chunks) == line


def test_astral_characters_count_twice_against_the_limit() -> None:
    text = "🐢" * 3000
    chunks = split_message(text)
    assert [utf16_len(c) for c in chunks] == [4096, 1904]
    assert "".join(chunks) == text


def test_empty_or_blank_text_yields_no_messages() -> None:
    assert split_message("") == []
    assert split_message("  \n\n ") == []
    assert split_message("<pre></pre>") == []


def test_short_text_is_one_message_unchanged() -> None:
    assert split_message("<b>hi</b>\nthere") == ["<b>hi</b>\nthere"]


def test_to_plain_drops_tags_and_decodes_entities() -> None:
    assert to_plain("<pre>a &lt;b&gt; &amp;</pre>") == "a <b> &"


@settings(max_examples=100, deadline=None)
@given(
    text=st.text(st.characters(exclude_categories=["Cs"]), max_size=3000),
    limit=st.integers(min_value=40, max_value=500),
    wrap=st.booleans(),
)
def test_any_text_splits_into_valid_chunks_that_keep_every_character(
    text: str, limit: int, wrap: bool
) -> None:
    html = pre(text) if wrap else escape(text)
    chunks = split_message(html, limit)
    _assert_valid_chunks(chunks, limit)
    assert _squash("".join(parse_html(c) for c in chunks)) == _squash(text)
