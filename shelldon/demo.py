"""``shelldon demo``: an offline story through the real runtime, on the scripted brain.

A FREE tool call, a RISKY call that asks for approval, a proposed tool gated by real pytest and
promoted, then the new tool used on the next turn. It runs in a fresh home of its own (a
temporary directory unless ``--home`` is given), so it never touches the owner's pet.
"""

from __future__ import annotations

import json
from pathlib import Path

WORD_COUNT_CODE = """\
DESCRIPTION = "Count the words in a text."
PARAMS_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "the text to count"}},
    "required": ["text"],
}


def run(text: str) -> str:
    return str(len(text.split()))
"""

WORD_COUNT_TEST = """\
from word_count import run


def test_counts_words():
    assert run("the quick brown fox") == "4"


def test_empty_text_has_no_words():
    assert run("   ") == "0"
"""

NOTE = "hello from shelldon\n"

SCRIPT = [
    {"when": "time", "tool_calls": [{"name": "get_time", "args": {}}]},
    {"when": "time", "text": "My clock (get_time) says {last_tool_result}."},
    {
        "when": "note",
        "tool_calls": [{"name": "write_file", "args": {"path": "notes.txt", "content": NOTE}}],
    },
    {"when": "note", "text": "Done: {last_tool_result} 📝"},
    {
        "when": "tool",
        "tool_calls": [
            {
                "name": "propose_tool",
                "args": {"name": "word_count", "code": WORD_COUNT_CODE, "test": WORD_COUNT_TEST},
            }
        ],
    },
    {"when": "tool", "text": "I wrote word_count with a test; it goes through my gate next."},
    {
        "when": "words",
        "tool_calls": [{"name": "word_count", "args": {"text": "the quick brown fox jumps"}}],
    },
    {"when": "words", "text": "My new word_count tool counted {last_tool_result} words."},
]

STORY: tuple[tuple[str, bool], ...] = (
    ("What time is it?", False),
    ("Please save a note for me.", False),
    ("Can you make yourself a tool that counts words?", True),
    ("How many words are in 'the quick brown fox jumps'?", False),
)
"""The owner's lines, and whether the story waits for a promotion to be decided after each."""


def write_demo_config(home: Path) -> Path:
    """Write the demo's script and config into ``home``; returns the config path."""
    home.mkdir(parents=True, exist_ok=True)
    script = home / "demo-script.json"
    script.write_text(json.dumps(SCRIPT, indent=1), encoding="utf-8")
    config = home / "config.toml"
    config.write_text(
        '[brain]\nprovider = "scripted"\nscript = "demo-script.json"\n', encoding="utf-8"
    )
    return config
