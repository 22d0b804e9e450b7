"""The cards of the toolbox's lifecycle (issue 20): a replacement says what it replaces and
since when, and shows the diff against the live version (whole as a document when it does not
fit); a failed gate's card offers "🔧 Try to fix" and "Drop" with the same MAC-checked callback
data as every other card, and shows the gate's model-made output only as marked, escaped data.
"""

from __future__ import annotations

from shelldon.toolbox.diff import replacement_diff
from shelldon.transport.approvals import (
    REPAIR_LABELS,
    CallbackChoice,
    approval_keyboard,
    callback_key,
    parse_callback_data,
    render_failed_gate,
    render_promotion,
)
from shelldon.transport.render import MAX_MESSAGE_CHARS, utf16_len
from tests.fakes.fake_telegram import TEST_TOKEN, parse_html

KEY = callback_key(TEST_TOKEN)
OLD = "def run(a):\n    return str(a + 1)\n"
NEW = "def run(a):\n    return str(a + 2)\n"
TEST = "from adder import run\n\ndef test_it():\n    assert run(1) == '3'\n"


def test_a_replacement_card_names_what_it_replaces_and_shows_the_diff() -> None:
    diff = replacement_diff("adder", OLD, TEST, NEW, TEST)
    line = "replaces adder (live since 2026-12-01 09:30 UTC)"
    view = render_promotion("adder", "Adds", NEW, TEST, "1 passed", line, diff)
    visible = parse_html(view.text)
    assert "Replace it?" in visible and line in visible
    assert "-    return str(a + 1)\n+    return str(a + 2)" in visible
    assert "(no change to test_adder.py)" in visible
    assert view.documents == ()


def test_a_long_replacement_sends_the_diff_and_the_whole_new_version() -> None:
    big = "\n".join(f"X{i} = '<{i}>'" for i in range(2000)) + "\n"
    diff = replacement_diff("adder", OLD, TEST, big, TEST)
    view = render_promotion("adder", "Adds", big, TEST, "1 passed", "replaces adder (…)", diff)
    assert utf16_len(view.text) <= MAX_MESSAGE_CHARS
    assert [d.filename for d in view.documents] == ["adder.diff", "adder.py", "test_adder.py"]
    assert view.documents[0].content.decode() == diff
    assert "replaces adder" in parse_html(view.text)


def test_a_failed_gate_card_offers_try_to_fix_and_drop_on_checked_buttons() -> None:
    keyboard = approval_keyboard("p" * 17, KEY, REPAIR_LABELS)
    fix, drop = keyboard["inline_keyboard"][0]
    assert (fix["text"], drop["text"]) == ("🔧 Try to fix", "Drop")
    assert parse_callback_data(fix["callback_data"], KEY) == CallbackChoice("p" * 17, True)
    assert parse_callback_data(drop["callback_data"], KEY) == CallbackChoice("p" * 17, False)


def test_a_failed_gate_card_shows_hostile_output_as_marked_data() -> None:
    output = (
        "x" * 20_000 + "\n<b>approve</b> & \u202eevil\nE   assert 'v1 length 3' == 'v1 length 4'"
    )
    view = render_failed_gate("echo_len", "failed after 0.4 s\nfindings: <script>", output)
    assert utf16_len(view.text) <= MAX_MESSAGE_CHARS
    visible = parse_html(view.text)  # escaped: Telegram parses it, and no tag of theirs is live
    assert "<b>approve</b> & ⟦U+202E⟧evil" in visible
    assert "assert 'v1 length 3' == 'v1 length 4'" in visible
    assert "findings: <script>" in visible and "counts against today's budget" in visible
    assert "\u202e" not in visible


def test_a_failed_fix_says_which_round_it_was() -> None:
    view = render_failed_gate("echo_len", "failed", "", "My fix of echo_len (repair round 1 of 2)")
    visible = parse_html(view.text)
    assert visible.startswith("🛠 My fix of echo_len (repair round 1 of 2)")
    assert "Test output" not in visible  # nothing printed, nothing shown
