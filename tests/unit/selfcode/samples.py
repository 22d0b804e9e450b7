"""Model-written tool modules and tests the self-coding tests stage, gate and discover."""

from __future__ import annotations

ADDER = """\
DESCRIPTION = "Add one to a number."
PARAMS_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def run(a):
    return str(a + 1)
"""

ADDER_TEST = """\
from adder import run


def test_adds_one():
    assert run(a=1) == "2"
"""


def tool(description: str = "A tool.", body: str = "return 'ok'", head: str = "") -> str:
    """A conventional tool module with ``head`` lines before it and ``body`` as run's body."""
    return (
        f"{head}\n"
        f"DESCRIPTION = {description!r}\n"
        'PARAMS_SCHEMA = {"type": "object", "properties": {}}\n\n\n'
        f"def run(**kwargs):\n    {body}\n"
    )


def calling_test(stem: str, body: str = "assert run() == 'ok'", head: str = "") -> str:
    """A test file importing ``stem``'s run and running ``body`` in one test."""
    return f"{head}\nfrom {stem} import run\n\n\ndef test_it():\n    {body}\n"
