"""A proposed tool name as a module stem.

A proposed name becomes a module stem: NFKC-normalised, a trailing ``.py`` dropped, then
it must be an ASCII identifier of at most 64 characters (Anthropic and OpenAI accept no more,
and ASCII keeps a look-alike like a Cyrillic letter from posing as another tool), with no path
separator, dot or leading underscore (so no dunder), not starting with ``test_`` (the staged
test is ``test_<stem>.py``), and not the name of a standard-library module or of what pytest
imports (the gate runs with the staging dir first on ``sys.path``). A keyword gets ``_tool``
appended (``class`` → ``class_tool``) so it stays importable.
"""

from __future__ import annotations

import keyword
import os
import sys
import unicodedata

from shelldon.toolbox.errors import StemError

MAX_STEM_CHARS = 64

# Top-level modules a gate's pytest imports; a staged module of that name would shadow them.
_PYTEST_MODULES = frozenset(
    {
        "pytest",
        "py",
        "pluggy",
        "iniconfig",
        "packaging",
        "pygments",
        "colorama",
        "exceptiongroup",
        "tomli",
        "conftest",
        "setup",
        "site",
        "sitecustomize",
        "usercustomize",
    }
)


def normalize_stem(name: str) -> str:
    """The module stem for a proposed tool name, or ``StemError`` saying what is wrong with it."""
    stem = unicodedata.normalize("NFKC", name).strip()
    if stem.endswith(".py"):
        stem = stem[:-3]
    shown = repr(name[:80])
    if not stem:
        raise StemError("a tool needs a name: letters, digits and underscores, like word_count")
    if any(sep in stem for sep in ("/", "\\", os.sep, "\0")):
        raise StemError(f"tool name {shown} contains a path separator; use a plain name")
    if "." in stem:
        raise StemError(
            f"tool name {shown} contains a dot; use underscores, like {stem.replace('.', '_')!r}"
        )
    if stem.startswith("_"):
        raise StemError(
            f"tool name {shown} starts with an underscore (private or dunder names are refused)"
        )
    if not stem.isascii():
        raise StemError(
            f"tool name {shown} has non-ASCII characters (they can look like other letters); "
            "use a-z, 0-9 and _"
        )
    if not stem.isidentifier():
        raise StemError(
            f"tool name {shown} is not a Python identifier: start with a letter, then letters, "
            "digits and underscores"
        )
    if keyword.iskeyword(stem):
        stem = f"{stem}_tool"
    if len(stem) > MAX_STEM_CHARS:
        raise StemError(f"tool name {shown} is longer than {MAX_STEM_CHARS} characters")
    if stem.startswith("test_"):
        raise StemError(f"tool name {shown} starts with test_, which is reserved for its test file")
    if stem in sys.stdlib_module_names or stem in _PYTEST_MODULES:
        raise StemError(
            f"tool name {shown} is the name of a Python module the tool's test needs; "
            f"choose another, like {stem + '_tool'!r}"
        )
    return stem
