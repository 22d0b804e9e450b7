"""The gate's AST half: forbidden imports refused, computed imports listed, the convention
checked, every finding reported at once.

Attack inspiration: smolagents' tool_validation (all findings at once), the classic
``__import__``/``importlib`` sandbox escapes collected in CTF pyjail write-ups (aliasing,
``getattr(builtins, ...)``, ``exec`` of a string, ``__builtins__['__import__']``), and
import-linter's own rule that forbidden means any submodule too.
"""

from __future__ import annotations

import ast

import pytest

from shelldon.toolbox.convention import read_declaration
from shelldon.toolbox.gate_scan import scan_imports, static_checks

from .samples import ADDER, ADDER_TEST, tool


def scan(src: str):
    return scan_imports(ast.parse(src), "t.py")


@pytest.mark.parametrize(
    "src",
    [
        "import anthropic",
        "import openai.types",
        "import os, litellm",
        "import google.generativeai as genai",
        "from zhipuai import ZhipuAI",
        "from ollama import chat",
        "from anthropic.types import Message",
        "import shelldon",
        "from shelldon.toolbox import toolbox",
        "import shelldon.secrets",
        "def f():\n    import openai",
        "try:\n    import anthropic\nexcept ImportError:\n    pass",
        '__import__("openai")',
        '__import__(name="anthropic")',
        '__import__("shelldon.secrets")',
        'import importlib\nimportlib.import_module("anthropic")',
        'import importlib\nimportlib.__import__("openai")',
        'import importlib as il\nil.import_module("litellm")',
        'from importlib import import_module\nimport_module("ollama")',
        'from importlib import import_module as im\nim("zhipuai")',
        'import builtins\nbuiltins.__import__("openai")',
        'import builtins as b\nb.__import__("google.genai")',
        'import importlib.util\nimportlib.import_module("openai")',
        'exec("import anthropic")',
        "eval(\"__import__('openai')\")",
        'exec("exec(\\"import openai\\")")',
    ],
)
def test_forbidden_import_is_refused(src: str) -> None:
    result = scan(src)
    assert result.findings, src
    assert "may not import" in result.findings[0]


@pytest.mark.parametrize(
    "src",
    [
        "import os, json, re",
        "from collections import Counter",
        "import googletrans",  # only the google package is forbidden, not every google* name
        "import openai_compat_shim_local",
        'x = "import anthropic"',  # a string is not an import
        'import importlib\nimportlib.import_module("json")',
    ],
)
def test_allowed_import_passes(src: str) -> None:
    result = scan(src)
    assert result.findings == ()
    assert result.dynamic_imports == ()


@pytest.mark.parametrize(
    "src",
    [
        "__import__(name)",
        '__import__("open" + "ai")',
        'import importlib\nimportlib.import_module(f"{x}")',
        "import importlib\nm = importlib.import_module",
        "f = __import__",
        'getattr(__builtins__, "__imp" + "ort__")',
        'getattr(builtins, "__import__")("openai")',
        '__builtins__["__import__"]("openai")',
        "exec(code)",
        "eval(text)",
        'import importlib.util\nimportlib.util.spec_from_file_location("m", p)',
        'import runpy\nrunpy.run_path("x.py")',
        'import importlib\nimportlib.import_module(".sibling", "pkg")',
    ],
)
def test_computed_import_is_listed_not_refused(src: str) -> None:
    result = scan(src)
    assert result.findings == ()
    assert result.dynamic_imports, src
    assert result.dynamic_imports[0].startswith("t.py:")


def test_relative_import_is_refused() -> None:
    assert "relative import" in scan("from . import sibling").findings[0]


def test_finding_names_the_line() -> None:
    result = scan("import os\n\n\nimport anthropic\n")
    assert result.findings[0].startswith("t.py:4:")


def test_syntax_error_is_reported_with_its_line() -> None:
    result = static_checks("adder", "x = 1\ndef run(:\n", ADDER_TEST)
    assert any(f.startswith("adder.py:2: syntax error") for f in result.findings)


def test_null_byte_source_is_a_finding_not_a_crash() -> None:
    result = static_checks("adder", "x = 1\0", ADDER_TEST)
    assert result.findings and "adder.py" in result.findings[0]


def test_test_file_is_checked_too() -> None:
    result = static_checks("adder", ADDER, "import anthropic\n" + ADDER_TEST)
    assert any(f.startswith("test_adder.py:1:") for f in result.findings)


def test_every_finding_is_reported_at_once() -> None:
    code = "import anthropic\nimport openai\nDESCRIPTION = 3\n"
    result = static_checks("bad", code, "import shelldon\n")
    text = "\n".join(result.findings)
    assert "'anthropic'" in text
    assert "'openai'" in text
    assert "'shelldon'" in text
    assert "def run" in text
    assert "DESCRIPTION" in text
    assert "PARAMS_SCHEMA" in text


def test_a_clean_pair_has_no_findings() -> None:
    result = static_checks("adder", ADDER, ADDER_TEST)
    assert result.findings == ()


def declaration_problems(src: str) -> tuple[str, ...]:
    return read_declaration(ast.parse(src))[1]


@pytest.mark.parametrize(
    ("src", "problem"),
    [
        (tool().replace("def run", "def walk"), "def run"),
        (tool().replace("def run", "async def run"), "not async"),
        ("run = lambda: 'x'\n" + tool().split("def run")[0], "def run"),
        (tool().replace("DESCRIPTION = 'A tool.'", 'DESCRIPTION = f"{1}"'), "string literal"),
        (tool().replace("DESCRIPTION = 'A tool.'", "DESCRIPTION = ''"), "not be empty"),
        (tool().replace("DESCRIPTION = 'A tool.'", "X = 1"), "DESCRIPTION"),
        (tool().replace('{"type": "object", "properties": {}}', "dict()"), "dict literal"),
        (tool().replace('{"type": "object", "properties": {}}', "{'type': T}"), "literals only"),
        (tool().replace('"type": "object"', '"type": "array"'), '"type": "object"'),
        (tool().replace(', "properties": {}', ""), '"properties"'),
        (tool().replace('"properties": {}', '"properties": {"a": 1}'), "property 'a'"),
        (
            tool().replace('"properties": {}', '"properties": {}, "required": ["a"]'),
            "does not list them",
        ),
        (tool().replace('"properties": {}', '"properties": {"a": {"t": (1,)}}'), "JSON values"),
        (tool().replace("PARAMS_SCHEMA = ", "OTHER = "), "PARAMS_SCHEMA"),
    ],
)
def test_convention_break_is_explained(src: str, problem: str) -> None:
    problems = declaration_problems(src)
    assert any(problem in p for p in problems), problems


def test_schema_property_run_cannot_accept_is_explained() -> None:
    src = (
        'DESCRIPTION = "d"\n'
        'PARAMS_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}\n'
        "def run(town):\n    return town\n"
    )
    problems = declaration_problems(src)
    assert any("['city'] are not parameters of run" in p for p in problems)
    assert any("['town'] have no default" in p for p in problems)


def test_annotated_declarations_are_read() -> None:
    src = (
        'DESCRIPTION: str = "d"\n'
        'PARAMS_SCHEMA: dict = {"type": "object", "properties": {"a": {"type": "string"}}}\n'
        "def run(a: str = 'x') -> str:\n    return a\n"
    )
    decl, problems = read_declaration(ast.parse(src))
    assert problems == ()
    assert decl is not None
    assert decl.params_schema["properties"] == {"a": {"type": "string"}}
