"""What the owner sees and taps to decide: approval texts, the ✅/❌ keyboard, its callback data.

Values too long for one message travel whole as documents sent before it, so the message that
carries the keyboard always fits in one piece and can be edited when the owner decides.
Callback data is ``<a|d>:<turn id>:<mac>``, at most 64 bytes; the MAC (keyed by a secret the
transport derives from the bot token) makes a forged or altered tap an ``InvalidCallback``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from typing import Any

from shelldon.contracts import ToolCall
from shelldon.transport.card import PREVIEW_CHARS, ArgumentCard, describe_call
from shelldon.transport.render import MAX_MESSAGE_CHARS, bold, code, escape, pre, utf16_len
from shelldon.transport.visible import reveal

OUTCOME_CHARS = 300
"""Room kept free on every card for the outcome a decision adds to it."""
CARD_CHARS = MAX_MESSAGE_CHARS - OUTCOME_CHARS
"""The most a card's own text may hold, so the decided card still fits one message."""

MAX_CALLBACK_BYTES = 64
"""Telegram's limit on an inline button's callback_data."""

TURN_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,40}")
"""Turn ids that fit in callback data (uuid4().hex is 32 characters)."""

_MAC_CHARS = 16  # 96 bits of HMAC-SHA256, base64url
_CALLBACK = re.compile(r"([ad]):([A-Za-z0-9_-]{1,40}):([A-Za-z0-9_-]{16})")
_GATE_TAIL_CHARS = 1200
_DESCRIPTION_CHARS = 500


@dataclass(frozen=True, slots=True)
class CallbackChoice:
    """A valid tap: approve or deny the approval parked under ``turn_id``."""

    turn_id: str
    approved: bool


@dataclass(frozen=True, slots=True)
class InvalidCallback:
    """Callback data that is not one of our buttons (forged, altered, oversized, not UTF-8)."""

    reason: str


def callback_key(token: str) -> bytes:
    """The MAC key for callback data, derived from the bot token (stable across restarts)."""
    return hmac.new(token.encode(), b"shelldon approval keyboard v1", hashlib.sha256).digest()


def _mac(key: bytes, verdict: str, turn_id: str) -> str:
    digest = hmac.new(key, f"{verdict}:{turn_id}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode()[:_MAC_CHARS]


def approval_callback_data(turn_id: str, approved: bool, key: bytes) -> str:
    """The callback_data of the Approve (or Deny) button for ``turn_id``."""
    if not TURN_ID_PATTERN.fullmatch(turn_id):
        raise ValueError(f"turn id {turn_id!r} does not fit callback data ([A-Za-z0-9_-]{{1,40}})")
    verdict = "a" if approved else "d"
    return f"{verdict}:{turn_id}:{_mac(key, verdict, turn_id)}"


def parse_callback_data(data: object, key: bytes) -> CallbackChoice | InvalidCallback:
    """Read a tap's callback_data; anything but an intact button of ours is ``InvalidCallback``."""
    if not isinstance(data, str):
        return InvalidCallback(f"callback data is {type(data).__name__}, not text")
    try:
        raw = data.encode("utf-8")
    except UnicodeEncodeError:
        return InvalidCallback("callback data is not valid UTF-8")
    if len(raw) > MAX_CALLBACK_BYTES:
        return InvalidCallback(f"callback data is {len(raw)} bytes, over {MAX_CALLBACK_BYTES}")
    match = _CALLBACK.fullmatch(data)
    if match is None:
        return InvalidCallback("callback data is not an approval button")
    verdict, turn_id, mac = match.groups()
    if not hmac.compare_digest(mac, _mac(key, verdict, turn_id)):
        return InvalidCallback("callback data failed its integrity check (forged or altered)")
    return CallbackChoice(turn_id=turn_id, approved=verdict == "a")


APPROVE_LABELS = ("✅ Approve", "❌ Deny")
REPAIR_LABELS = ("🔧 Try to fix", "Drop")
"""A failed gate's buttons: the same yes/no callback data, on the parked repair offer."""


def approval_keyboard(
    turn_id: str, key: bytes, labels: tuple[str, str] = APPROVE_LABELS
) -> dict[str, Any]:
    """The ✅ Approve / ❌ Deny inline keyboard (a reply_markup) for ``turn_id`` (``labels``
    names the yes and the no button)."""
    yes, no = labels
    return {
        "inline_keyboard": [
            [
                {"text": yes, "callback_data": approval_callback_data(turn_id, True, key)},
                {"text": no, "callback_data": approval_callback_data(turn_id, False, key)},
            ]
        ]
    }


def decided_card(card: str, outcome: str) -> str | None:
    """A card's HTML ``card`` with ``outcome`` (plain text) added below it, keyboard gone; None
    when the two do not fit one message (the outcome then goes as a message of its own)."""
    text = f"{card}\n\n{bold(outcome)}"
    return text if utf16_len(text) <= MAX_MESSAGE_CHARS else None


@dataclass(frozen=True, slots=True)
class Document:
    """A file to send before the approval message (a value too long to show inline)."""

    filename: str
    content: bytes
    caption: str = ""


@dataclass(frozen=True, slots=True)
class ApprovalView:
    """An approval to show: documents first, then ``text`` (≤ 4096) with the keyboard."""

    text: str
    documents: tuple[Document, ...] = ()


def _tail_within(text: str, budget: int) -> str:
    """The longest tail of ``text`` whose escaped form fits ``budget`` UTF-16 units."""
    start = max(0, len(text) - budget)
    while start < len(text) and utf16_len(escape(text[start:])) > budget:
        start += max(1, (utf16_len(escape(text[start:])) - budget) // 5)
    return text[start:]


def _file_stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:40] or "value"


def _argument_block(arg: ArgumentCard, taken: set[str]) -> tuple[str, Document | None]:
    """One argument on the card: the whole value, or a preview and the whole as a document."""
    label = bold(arg.label)
    if arg.fits:
        block, document = f"{label}\n{pre(arg.shown())}", None
    else:
        stem = _file_stem(arg.name)
        filename, n = f"{stem}.txt", 2
        while filename in taken:
            filename, n = f"{stem}-{n}.txt", n + 1
        taken.add(filename)
        caption = (
            f"{arg.label[:200]}: all {len(arg.exact)} characters, exactly as the tool gets them"
        )
        document = Document(filename, arg.exact.encode("utf-8", "replace"), escape(caption))
        note = f" (first {PREVIEW_CHARS} of {len(arg.exact)} characters)"
        block = (
            f"{label}{escape(note)}, in full in {code(filename)} above\n"
            f"{pre(arg.shown(PREVIEW_CHARS))}"
        )
    notes = "".join(f"\n{escape(line)}" for line in arg.notes())
    return block + notes, document


def render_risky_approval(call: ToolCall, summary: str = "") -> ApprovalView:
    """The approval message for a parked RISKY call: the tool and exactly what it will do,
    hidden characters and non-ASCII hosts spelled out, a value too long for the card attached
    whole as a document: nothing the tool will get is left out of what the owner sees."""
    head = [f"🔐 {bold('Approve a RISKY call?')}", f"Tool: {code(reveal(call.name))}"]
    if summary:
        head.append(f"<i>{escape(reveal(summary[:_DESCRIPTION_CHARS]))}</i>")
    arguments = describe_call(call)
    taken: set[str] = set()
    blocks, documents = [], []
    for arg in arguments:
        block, document = _argument_block(arg, taken)
        blocks.append(block)
        if document is not None:
            documents.append(document)
    if not arguments:
        blocks.append("<i>(no arguments)</i>")
    text = "\n".join(head + blocks)
    if utf16_len(text) <= CARD_CHARS:
        return ApprovalView(text=text, documents=tuple(documents))
    # Many medium arguments together: send them all as one document and name them here, with
    # every warning still on the card (or, if even those overflow it, in a document of theirs).
    everything = json.dumps(call.args, ensure_ascii=False, indent=1, default=repr)
    documents = [Document("arguments.json", everything.encode("utf-8", "replace"))]
    head.append(f"Its {len(call.args)} arguments are in full in {code('arguments.json')} above.")
    notes = [line for arg in arguments for line in arg.notes()]
    text = "\n".join(head + [escape(line) for line in notes])
    if utf16_len(text) > CARD_CHARS:
        documents.append(Document("warnings.txt", "\n".join(notes).encode("utf-8", "replace")))
        names = ", ".join(sorted({arg.label for arg in arguments if arg.notes()}))
        warning = f"⚠ hidden characters or non-ASCII hosts in: {names[:500]} (all in warnings.txt)"
        text = "\n".join([*head, escape(warning)])
    return ApprovalView(text=text, documents=tuple(documents))


def render_promotion(
    name: str,
    description: str,
    tool_code: str,
    test_code: str,
    gate_summary: str,
    replaces: str = "",
    diff: str = "",
) -> ApprovalView:
    """The approval message for promoting a gated tool: name, description, code, test, gate.
    A replacement says which tool it ``replaces`` and shows its ``diff`` against the live
    version in place of the code (the whole code and test go along when it does not fit)."""
    title = (
        "I wrote a new version of a tool and it passed its test. Replace it?"
        if replaces
        else "I wrote a tool and it passed its test. Add it?"
    )
    head = [f"🧩 {bold(title)}", f"Name: {code(reveal(name[:64]))}"]
    if replaces:
        head.append(f"♻️ {escape(reveal(replaces[:200]))}")
    shown = reveal(description)
    if utf16_len(escape(shown)) > _DESCRIPTION_CHARS:
        shown = _tail_within(shown[::-1], _DESCRIPTION_CHARS - 1)[::-1] + "…"
    head.append(f"<i>{escape(shown)}</i>")
    whole_gate = reveal(gate_summary)
    gate = _tail_within(whole_gate, _GATE_TAIL_CHARS)
    gate_note = "" if len(gate) == len(whole_gate) else " (last lines)"
    tail = [f"{bold('Gate')}{escape(gate_note)}\n{pre(gate)}"]
    if replaces:
        inline = [f"{bold('Changes against the live version')}\n{pre(reveal(diff))}"]
    else:
        inline = [
            f"{bold('Code')}\n{pre(reveal(tool_code))}",
            f"{bold('Test')}\n{pre(reveal(test_code))}",
        ]
    text = "\n".join(head + inline + tail)
    if utf16_len(text) <= CARD_CHARS:
        return ApprovalView(text=text)
    stem = _file_stem(name)
    documents: tuple[Document, ...] = (
        Document(f"{stem}.py", tool_code.encode("utf-8", "replace"), "the tool's code"),
        Document(f"test_{stem}.py", test_code.encode("utf-8", "replace"), "its test"),
    )
    attached = (
        f"The code ({tool_code.count(chr(10)) + 1} lines) and its test "
        f"({test_code.count(chr(10)) + 1} lines) are attached above as "
        f"{code(documents[0].filename)} and {code(documents[1].filename)}."
    )
    if replaces:
        changes = Document(
            f"{stem}.diff", diff.encode("utf-8", "replace"), "what changes against the live version"
        )
        documents = (changes, *documents)
        attached = (
            f"What changes is attached above as {code(changes.filename)}; the whole new "
            f"code and test as {code(documents[1].filename)} and {code(documents[2].filename)}."
        )
    return ApprovalView(text="\n".join([*head, attached, *tail]), documents=documents)


def render_failed_gate(
    name: str, gate_summary: str, output: str, headline: str = ""
) -> ApprovalView:
    """A failed gate's message: ``headline`` (which round it was), what failed and the end of
    the test run's output, above the "Try to fix" / "Drop" buttons; the gate's texts come
    from model-written code and are shown as data."""
    head = [
        f"🛠 {bold(reveal(headline[:300]) or 'A tool I wrote failed its gate.')}",
        f"Name: {code(reveal(name[:64]))}",
        escape(
            "Try to fix: I get one more turn with what the gate said (it counts against "
            "today's budget for turns I start myself). Drop: I leave it."
        ),
    ]
    summary = _tail_within(reveal(gate_summary), _GATE_TAIL_CHARS)
    blocks = [f"{bold('Gate')}\n{pre(summary)}"]
    if output.strip():
        room = MAX_MESSAGE_CHARS - utf16_len("\n".join(head + blocks)) - 200
        shown = _tail_within(reveal(output), max(200, min(_GATE_TAIL_CHARS, room)))
        blocks.append(f"{bold('Test output')}{escape(' (last lines)')}\n{pre(shown)}")
    return ApprovalView(text="\n".join(head + blocks))
