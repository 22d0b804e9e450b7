"""Attacks on python_eval; every one must fail closed (a ToolError), quickly, and leave the
calling process unharmed.

Sources of inspiration: Ned Batchelder, "Eval really is dangerous" (2012) — the
``().__class__.__bases__[0].__subclasses__()`` walk and the frame/code-object tricks; Armin
Ronacher on str.format as attribute access ("Be careful with Python's new-style string format",
2016) and Jinja2's sandbox CVE-2016-10745 / CVE-2019-10906 (format / format_map escapes);
asteval issue #86 ("Sandbox escape": ``print.__reduce__()`` handing back getattr; its advice to
move to an allowlist is what the attribute check does); the simpleeval issue tracker
(``gi_frame.f_back``, ``__builtins__`` via ``f_globals``, memory and CPU bombs such as
"10**10**10" and "'a'*10**10"); CTF pyjail writeups (unicode NFKC identifiers like
``ｇｉ_frame``, ``type('X', (), {...})`` dunder smuggling, lambda recursion without names,
walrus-built nesting); PEP 3131 (identifiers are NFKC-normalised by the parser).
"""

# Look-alike characters are the point of several attacks below.
# ruff: noqa: RUF002

from __future__ import annotations

import dataclasses
import time

import pytest

from shelldon.worker.tools import ToolContext, ToolError
from shelldon.worker.tools.pyeval import check_expression, python_eval


@pytest.fixture
def tight(ctx: ToolContext) -> ToolContext:
    """A short wall-clock bound and a small address space, so bombs end fast."""
    return dataclasses.replace(ctx, eval_timeout_s=0.5, rlimit_as_mb=512)


def refused_statically(code: str) -> str:
    """The guard itself (no fork, no evaluation) refuses ``code``."""
    with pytest.raises(ToolError) as info:
        check_expression(code)
    return str(info.value)


def fails_closed(ctx: ToolContext, code: str) -> str:
    started = time.monotonic()
    with pytest.raises(ToolError) as info:
        python_eval(ctx, code)
    # Generous slack: the bound is what matters, and CI machines are shared.
    assert time.monotonic() - started < ctx.eval_timeout_s + 2.0
    # The caller survives: the next evaluation still works.
    assert python_eval(ctx, "1 + 1") == "2"
    return str(info.value)


# --- class / MRO / subclasses walks, in every disguise (23) ---------------------------------

CLASS_WALKS = [
    "().__class__.__bases__[0].__subclasses__()",
    "''.__class__.__mro__[1].__subclasses__()",
    "[].__class__.__base__.__subclasses__()",
    "{}.__class__.__subclasses__",
    "(1).__class__",
    "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'catch_warnings']",
    "int.__subclasses__()",
    "bool.__base__",
    "type.__subclasses__(type)",
    "(lambda: 0).__globals__",
    "(lambda: 0).__code__.co_consts",
    "(lambda: 0).__closure__",
    "(lambda: 0).__builtins__",
    "__builtins__",
    "__import__('os').system('id')",
    "__loader__",
    "__spec__",
    "str.__dict__",
    "(lambda __x: 1)(1)",
    "dict(__class__=1)",
    "sorted.__reduce__()",
    "(1).__reduce_ex__(2)",
    "[x for _ in [1] for x in [_]]",
]


@pytest.mark.parametrize("code", CLASS_WALKS)
def test_class_graph_walk_is_refused_by_the_guard(code: str) -> None:
    assert "refused" in refused_statically(code)


@pytest.mark.parametrize(
    "code",
    [
        "int.mro()[-1].__subclasses__()",
        "[c.__subclasses__() for c in str.mro()]",
        "type(lambda: 0).mro()[1].__init_subclass__",
        "bool.mro()[-1].__dict__",
    ],
)
def test_mro_leads_nowhere_the_underscore_rule_allows(code: str) -> None:
    # mro() is allowed now; it only ever hands back object past a reachable class.
    assert "starts with '_'" in refused_statically(code)


def test_what_mro_reaches_is_inert(tight: ToolContext) -> None:
    assert python_eval(tight, "int.mro()[-1]()").startswith("<object object at 0x")


# --- three-argument type and the class of a class (5) --------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "type('X', (), {'__getattr__': lambda s, n: n})",
        "type('X', (object,), {})",
        "type(name='X')",
        "type()",
    ],
)
def test_three_argument_type_is_refused(code: str) -> None:
    assert "type() takes exactly one argument" in refused_statically(code)


def test_type_of_a_class_is_withheld_so_type_itself_is_unreachable(tight: ToolContext) -> None:
    assert "type() of a class is not available" in fails_closed(tight, "type(type(1))('X', (), {})")


# --- generator, coroutine, frame, traceback and code internals (22) -------------------------

INTERNALS = [
    "(x for x in [1]).gi_frame",
    "(x for x in [1]).gi_frame.f_back.f_globals",
    "(x for x in [1]).gi_frame.f_builtins",
    "(x for x in [1]).gi_code",
    "(x for x in [1]).gi_yieldfrom",
    "(x for x in [1]).gi_running",
    "(lambda: 0).cr_frame",
    "(lambda: 0).cr_code",
    "(lambda: 0).ag_frame",
    "(lambda: 0).ag_code",
    "(lambda g: g.gi_frame)(x for x in [1])",
    "[g.gi_frame.f_locals for g in [(y for y in [1])]]",
    "max([1]).f_back",
    "iter([]).tb_frame",
    "iter([]).tb_next",
    "(lambda: 0).func_globals",
    "(lambda: 0).func_code.co_code",
    "(lambda: 0).cell_contents",
    "ValueError().with_traceback",
    "(1).f_code",
    "''.co_names",
    "(lambda: 0).im_func",
]


@pytest.mark.parametrize("code", INTERNALS)
def test_interpreter_internals_are_refused_by_the_guard(code: str) -> None:
    assert "refused" in refused_statically(code)


def test_an_unlisted_attribute_is_refused_too() -> None:
    # The allowlist, not the denylist, is the boundary: a new internal is refused by default.
    assert "not available" in refused_statically("(x for x in [1]).gi_suspended_future")


# --- format-string tricks (10) --------------------------------------------------------------

FORMAT_TRICKS = [
    "'{0.__class__}'.format(1)",
    "'{0.gi_frame}'.format(x for x in [1])",
    "'{x.real}'.format_map({'x': 1})",
    "str.format('{0.__class__.__base__}', 1)",
    "''.format",
    "list(map(str.format, ['{0.__class__}'], [1]))",
    "f'{().__class__}'",
    "f'{1:{().__class__}}'",
    "'%s' % ().__class__",
    "'{0}'.ｆｏｒｍａｔ(1)",
]


@pytest.mark.parametrize("code", FORMAT_TRICKS)
def test_format_string_trick_is_refused(code: str) -> None:
    assert "refused" in refused_statically(code)


def test_format_refusal_suggests_f_strings() -> None:
    assert "f-string" in refused_statically("'{0}'.format(1)")


# --- unicode look-alike identifiers, NFKC-normalised like Python does (8) -------------------

LOOKALIKES = [
    "().__ｃｌａｓｓ__",
    "(x for x in [1]).ｇｉ_frame",
    "(x for x in [1]).𝗀𝗂_𝖿𝗋𝖺𝗆𝖾",
    "(x for x in [1]).gi_frame.ｆ_back",
    "__ｂｕｉｌｔｉｎｓ__",
    "str.ｍｒｏ()[-1].__ｓｕｂｃｌａｓｓｅｓ__()",
    "''.ᶠormat",
    "(lambda: 0).𝒸𝓇_frame",
]


@pytest.mark.parametrize("code", LOOKALIKES)
def test_unicode_lookalike_identifier_is_refused(code: str) -> None:
    assert "refused" in refused_statically(code)


# --- withheld builtins: I/O, reflection, dynamic code (16) ----------------------------------

WITHHELD = [
    "open('/etc/passwd').read()",
    "eval('1')",
    "exec('1')",
    "compile('1', 'x', 'eval')",
    "globals()",
    "locals()",
    "vars()",
    "getattr(1, 'real')",
    "setattr(1, 'x', 2)",
    "delattr(1, 'x')",
    "input()",
    "breakpoint()",
    "print('x')",
    "help()",
    "object.mro",
    "memoryview(b'x')",
]


@pytest.mark.parametrize("code", WITHHELD)
def test_side_effecting_builtin_is_not_there(tight: ToolContext, code: str) -> None:
    message = fails_closed(tight, code)
    assert "NameError" in message or "refused" in message


# --- statements and generator syntax (5) ----------------------------------------------------


@pytest.mark.parametrize(
    "code", ["import os", "__import__('os')", "(yield)", "lambda: (yield)", "await x"]
)
def test_statement_or_generator_syntax_is_refused(code: str) -> None:
    refused_statically(code)


# --- memory bombs (12) ----------------------------------------------------------------------

MEMORY_BOMBS = [
    "10**10**10",
    "'a'*10**10",
    "[0]*10**10",
    "(1,)*10**10",
    "b'x'*10**10",
    "1 << 10**10",
    "[[0]*10**4 for i in range(10**5)]",
    "[[[0]*100 for i in range(1000)] for j in range(1000)]",
    "{i: i for i in range(10**9)}",
    "'%0999999999d' % 1",
    "f'{1:>999999999}'",
    "sorted(range(10**9))",
]


@pytest.mark.parametrize("code", MEMORY_BOMBS)
def test_memory_bomb_is_bounded(tight: ToolContext, code: str) -> None:
    message = fails_closed(tight, code)
    assert "MemoryError" in message or "ran past" in message or "Overflow" in message


def test_constant_folding_bomb_is_not_compiled_in_the_caller() -> None:
    # The guard only parses; CPython's folder (which would run at compile) never sees it here.
    started = time.monotonic()
    check_expression("10**10**10 * 'a' * 10**10 << 10**10")
    assert time.monotonic() - started < 0.05


# --- CPU bombs inside C, which SIGALRM cannot interrupt (6) ---------------------------------

CPU_BOMBS = [
    "sum(range(10**12))",
    "any(iter(int, 1))",
    "max(range(10**12))",
    "any(map(int, iter(int, 1)))",
    "len([i for i in range(10**12)])",
    "'a'*10**6 in ('a'*10**6 + 'b'*10**6) * 10**3 and sum(range(10**12))",
]


@pytest.mark.parametrize("code", CPU_BOMBS)
def test_cpu_bomb_is_killed_at_the_wall_clock_limit(tight: ToolContext, code: str) -> None:
    message = fails_closed(tight, code)
    assert "ran past 0.5 s" in message or "MemoryError" in message


# --- deep recursion and deep nesting (7) ----------------------------------------------------

RECURSION = [
    "(lambda f: f(f))(lambda f: f(f))",
    "(lambda f: f(f, 10**6))(lambda f, n: n and f(f, n - 1))",
    "(lambda f: f(f, [], 10**5))(lambda f, acc, n: f(f, [acc], n - 1) if n else acc)",
    "[x := [], [(x := [x]) for i in range(10**5)], len(repr(x))][2]",
]


@pytest.mark.parametrize("code", RECURSION)
def test_deep_recursion_fails_closed(tight: ToolContext, code: str) -> None:
    # These end by themselves in milliseconds; the longer bound keeps a busy CI host honest.
    # A roomier address space: inside a big test process, 512 MB can run out before the
    # recursion limit (CPython then reports a SystemError) — closed too, but not this case.
    patient = dataclasses.replace(tight, eval_timeout_s=3.0, rlimit_as_mb=4096)
    assert "RecursionError" in fails_closed(patient, code)


@pytest.mark.parametrize(
    "code", ["-" * 3999 + "1", "(" * 3000 + ")" * 3000, "[" * 1000 + "]" * 1000]
)
def test_deeply_nested_source_is_refused_without_crashing_the_caller(code: str) -> None:
    refused_statically(code)


# --- output floods (2) ----------------------------------------------------------------------


@pytest.mark.parametrize("code", ["'a' * 10**6", "list(range(10**5))"])
def test_huge_result_is_cut_not_shipped_whole(tight: ToolContext, code: str) -> None:
    text = python_eval(tight, code)
    assert len(text) <= tight.max_output_chars + 100
    assert "cut the result" in text
