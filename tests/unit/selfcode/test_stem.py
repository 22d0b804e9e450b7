"""Tool names become safe module stems, or are refused with a reason the model can act on.

Attack inspiration: path traversal in plugin names (CWE-22), dunder module names that Python
treats specially, Unicode confusables (UTS #39) and NFKC-folding tricks, stdlib shadowing.
"""

from __future__ import annotations

import keyword
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shelldon.toolbox.toolbox import StemError, normalize_stem


@pytest.mark.parametrize(
    ("name", "stem"),
    [
        ("word_count", "word_count"),
        ("class", "class_tool"),
        ("import", "import_tool"),
        ("weather.py", "weather"),
        ("  spaced  ", "spaced"),
        ("\uff57\uff4f\uff52\uff44", "word"),  # fullwidth letters fold to ASCII under NFKC
        (
            "\uff43\uff4c\uff41\uff53\uff53",
            "class_tool",
        ),  # and a folded keyword still gets its suffix
        ("Mixed_Case9", "Mixed_Case9"),
        ("\ufb01le_size", "file_size"),  # a ligature NFKC folds to plain letters is harmless
    ],
)
def test_good_names_become_stems(name: str, stem: str) -> None:
    assert normalize_stem(name) == stem


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../x", "separator"),
        ("..\\x", "separator"),
        ("a/b", "separator"),
        ("x\0y", "separator"),
        ("a.b", "dot"),
        ("..", "dot"),
        ("__init__", "underscore"),
        ("__main__", "underscore"),
        ("_private", "underscore"),
        ("", "needs a name"),
        ("   ", "needs a name"),
        ("r\u0435ad_file", "non-ASCII"),  # Cyrillic ie posing as Latin e
        ("t\u043e\u043el", "non-ASCII"),  # Cyrillic o
        ("9lives", "identifier"),
        ("has space", "identifier"),
        ("dash-name", "identifier"),
        ("x" * 65, "longer than 64"),
        ("test_thing", "test_"),
        ("json", "module"),
        ("os", "module"),
        ("pytest", "module"),
        ("conftest", "module"),
    ],
)
def test_bad_names_are_refused(name: str, why: str) -> None:
    with pytest.raises(StemError, match=why):
        normalize_stem(name)


def test_fullwidth_path_separator_folds_and_is_refused() -> None:
    # U+FF0F FULLWIDTH SOLIDUS and U+FF0E FULLWIDTH FULL STOP become '/' and '.' under NFKC.
    with pytest.raises(StemError, match="separator"):
        normalize_stem("\uff0e\uff0e\uff0fx")


def test_refusal_message_suggests_a_fix() -> None:
    with pytest.raises(StemError, match="json_tool"):
        normalize_stem("json")


@given(st.text(max_size=80))
@settings(max_examples=500, deadline=None)
def test_any_name_becomes_a_safe_stem_or_is_refused(name: str) -> None:
    try:
        stem = normalize_stem(name)
    except StemError as exc:
        assert str(exc)
        return
    assert stem.isascii() and stem.isidentifier()
    assert not stem.startswith(("_", "test_"))
    assert not keyword.iskeyword(stem)
    assert stem not in sys.stdlib_module_names
    assert len(stem) <= 64
    assert normalize_stem(stem) == stem  # stable: a stem names the same tool again
