"""Model-written tool modules and tests the self-coding tests stage, gate and discover."""

from __future__ import annotations

import shutil
from pathlib import Path

from shelldon.toolbox.toolbox import Toolbox

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


def promote(sc: Toolbox, name: str, code: str, test: str = "", *, replace: bool = False) -> Path:
    """Make ``code`` live as a passing gate and the owner's tap would (without running pytest):
    staged in a directory of its own, then promoted from the staged bytes."""
    staged = sc.stage(name, code, test, replace=replace)
    shutil.rmtree(staged.directory)  # what the gate does with its directory once it is done
    return sc.promote(
        staged.name, staged.code, staged.test, expected_hash=staged.code_hash, replace=replace
    )
