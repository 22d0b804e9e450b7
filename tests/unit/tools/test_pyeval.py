"""python_eval keeps working for what a model legitimately computes, and stays bounded."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

from shelldon.worker.tools import ToolContext, ToolError
from shelldon.worker.tools.pyeval import MAX_EXPRESSION_CHARS, check_expression, python_eval

# A false positive is a bug: each of these must evaluate to exactly the repr shown.
BENIGN = [
    ("1 + 2 * 3", "7"),
    ("2 ** 10", "1024"),
    ("7 // 2, 7 % 2", "(3, 1)"),
    ("10 / 4", "2.5"),
    ("-5 // 2", "-3"),
    ("1e3 + 0.5", "1000.5"),
    ("(1 + 2j) * 1j", "(-2+1j)"),
    ("abs(-3.5)", "3.5"),
    ("round(2.675, 2)", "2.67"),
    ("round(1234.5678, -2)", "1200.0"),
    ("divmod(17, 5)", "(3, 2)"),
    ("pow(2, 100)", "1267650600228229401496703205376"),
    ("pow(3, 4, 5)", "1"),
    ("sum([1, 2, 3, 4])", "10"),
    ("sum(x * x for x in range(10))", "285"),
    ("min(3, 1, 2), max([4, 9, 2])", "(1, 9)"),
    ("max(['apple', 'fig', 'banana'], key=len)", "'banana'"),
    ("sorted([3, 1, 2], reverse=True)", "[3, 2, 1]"),
    ("sorted({'b': 2, 'a': 1}.items())", "[('a', 1), ('b', 2)]"),
    ("[x for x in range(20) if x % 7 == 0]", "[0, 7, 14]"),
    ("{x: x ** 2 for x in range(4)}", "{0: 0, 1: 1, 2: 4, 3: 9}"),
    ("{c for c in 'hello'} == set('helo')", "True"),
    ("[(i, j) for i in range(2) for j in range(2)]", "[(0, 0), (0, 1), (1, 0), (1, 1)]"),
    ("list(zip('ab', [1, 2]))", "[('a', 1), ('b', 2)]"),
    ("list(enumerate(['x', 'y'], start=1))", "[(1, 'x'), (2, 'y')]"),
    ("list(range(10))[2:8:2]", "[2, 4, 6]"),
    ("'shelldon'[::-1]", "'nodllehs'"),
    ("'hello world'.title()", "'Hello World'"),
    ("'a,b,,c'.split(',')", "['a', 'b', '', 'c']"),
    ("'-'.join(['2026', '11', '29'])", "'2026-11-29'"),
    ("'  padded  '.strip().upper()", "'PADDED'"),
    ("'banana'.count('a'), 'banana'.find('n')", "(3, 2)"),
    ("'Snake_Case'.lower().replace('_', ' ')", "'snake case'"),
    ("'abc'.startswith('ab') and 'abc'.endswith('c')", "True"),
    ("'42'.zfill(5)", "'00042'"),
    ("len('hello'), len([1, 2]), len({})", "(5, 2, 0)"),
    ("{'a': 1, 'b': 2}.get('c', 0)", "0"),
    ("sorted({'a': 1, 'b': 2}.keys())", "['a', 'b']"),
    ("{**{'a': 1}, 'b': 2}", "{'a': 1, 'b': 2}"),
    ("dict(zip('ab', range(2)))", "{'a': 0, 'b': 1}"),
    ("dict.fromkeys('ab', 0)", "{'a': 0, 'b': 0}"),
    ("{1, 2, 3} & {2, 3, 4}", "{2, 3}"),
    ("sorted({1, 2} | {5})", "[1, 2, 5]"),
    ("{1, 2}.issubset({1, 2, 3})", "True"),
    # mro() was refused (a false alarm): it only names classes, ending in object.
    ("int.mro()", "[<class 'int'>, <class 'object'>]"),
    ("bool.mro()", "[<class 'bool'>, <class 'int'>, <class 'object'>]"),
    ("type({}.keys()).mro()", "[<class 'dict_keys'>, <class 'object'>]"),
    ("issubclass(bool, int) and int in bool.mro()", "True"),
    ("frozenset([1, 1, 2])", "frozenset({1, 2})"),
    ("f'{3.14159:.2f}'", "'3.14'"),
    ("f'{42:>6}|{7:03d}|{255:x}'", "'    42|007|ff'"),
    ("f'{\"pet\"!r} is {1 + 1}'", "\"'pet' is 2\""),
    ("'%s has %d legs' % ('cat', 4)", "'cat has 4 legs'"),
    ("'%(n)s' % {'n': 'x'}", "'x'"),
    ("int('ff', 16), hex(255), bin(5), oct(8)", "(255, '0xff', '0b101', '0o10')"),
    ("float('1.5') + int('2')", "3.5"),
    ("chr(65) + str(ord('a'))", "'A97'"),
    ("bool([]), bool([0])", "(False, True)"),
    ("all([1, 2]), any([0, 0])", "(True, False)"),
    ("list(map(str.upper, ['a', 'b']))", "['A', 'B']"),
    ("list(filter(None, [0, 1, '', 'x']))", "[1, 'x']"),
    ("list(reversed([1, 2, 3]))", "[3, 2, 1]"),
    ("(lambda x, y=2: x * y)(21)", "42"),
    ("sorted(['b', 'A', 'c'], key=lambda s: s.lower())", "['A', 'b', 'c']"),
    ("3 if 2 > 1 else 4", "3"),
    ("1 < 2 < 3", "True"),
    ("isinstance(1, int), type(1.0) is float", "(True, True)"),
    ("type('x')('abc')", "'abc'"),
    ("(1).bit_length(), (255).to_bytes(2, 'big')", "(1, b'\\x00\\xff')"),
    ("(0.5).as_integer_ratio()", "(1, 2)"),
    ("b'hi'.hex(), bytes.fromhex('6869')", "('6869', b'hi')"),
    ("'héllo'.encode('utf-8')", "b'h\\xc3\\xa9llo'"),
    ("next(iter([9, 8]))", "9"),
    ("[y := 5, y * 2]", "[5, 10]"),
    ("slice(1, 5, 2).indices(10)", "(1, 5, 2)"),
    ("range(0, 10, 3)[-1]", "9"),
    ("10 ** 100 % 7", "4"),
    ("[[0] * 3 for i in range(2)]", "[[0, 0, 0], [0, 0, 0]]"),
    ("sum(range(10 ** 6))", "499999500000"),
    ("'ﬁlter works'", "'ﬁlter works'"),
    ("ﬁlter(None, []) is not None", "True"),
    ("None", "None"),
    ("  \n  21 * 2  \n", "42"),
    ("math.sqrt(16), math.floor(2.7), math.gcd(12, 18)", "(4.0, 2, 6)"),
    ("round(math.pi, 3), math.comb(5, 2), math.isclose(0.1 + 0.2, 0.3)", "(3.142, 10, True)"),
]


@pytest.fixture
def quick(ctx: ToolContext) -> ToolContext:
    return dataclasses.replace(ctx, eval_timeout_s=1.0)


@pytest.mark.parametrize(("code", "expected"), BENIGN)
def test_benign_expression_evaluates(quick: ToolContext, code: str, expected: str) -> None:
    assert python_eval(quick, code) == expected


def test_there_are_at_least_forty_benign_expressions() -> None:
    assert len(BENIGN) >= 40


@pytest.mark.parametrize(
    "code", ["import os", "x = 1", "del x", "for i in range(3): pass", "def f(): pass", "1; 2"]
)
def test_a_statement_is_a_syntax_error_that_says_one_expression(
    quick: ToolContext, code: str
) -> None:
    with pytest.raises(ToolError, match="one expression"):
        python_eval(quick, code)


def test_runtime_error_comes_back_as_its_type_and_message(quick: ToolContext) -> None:
    with pytest.raises(ToolError, match="ZeroDivisionError: division by zero"):
        python_eval(quick, "1 / 0")


def test_unknown_name_lists_what_is_available(quick: ToolContext) -> None:
    with pytest.raises(ToolError) as info:
        python_eval(quick, "sqrt(2)")
    assert "NameError" in str(info.value)
    assert "sorted" in str(info.value)


def test_result_is_cut_at_the_output_cap(quick: ToolContext) -> None:
    small = dataclasses.replace(quick, max_output_chars=50)
    text = python_eval(small, "'x' * 10000")
    assert text.startswith("'" + "x" * 49)
    assert "cut the result at 50 characters" in text
    assert len(text) < 120


def test_non_ascii_result_survives_the_pipe(quick: ToolContext) -> None:
    assert python_eval(quick, "'ünïcødé ✓ 🐚'") == "'ünïcødé ✓ 🐚'"


def test_too_long_expression_is_refused_before_parsing(quick: ToolContext) -> None:
    with pytest.raises(ToolError, match="keep it under"):
        python_eval(quick, "1+" * MAX_EXPRESSION_CHARS + "1")


def test_check_expression_returns_the_tree_for_a_safe_expression() -> None:
    tree = check_expression("sorted([3, 1])")
    assert tree.body is not None


def _children_of_this_process() -> list[tuple[int, str]]:
    """(pid, state) of every direct child, from /proc (includes zombies)."""
    found = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        for raw in (task / "children").read_text().split():
            stat = Path(f"/proc/{raw}/stat").read_text()
            found.append((int(raw), stat.rsplit(")", 1)[1].split()[0]))
    return found


def test_evaluator_child_is_reaped_after_success_and_after_a_kill(quick: ToolContext) -> None:
    before = _children_of_this_process()
    python_eval(quick, "1 + 1")
    with pytest.raises(ToolError):
        python_eval(dataclasses.replace(quick, eval_timeout_s=0.2), "sum(range(10 ** 12))")
    assert _children_of_this_process() == before


def test_trivial_evaluation_takes_a_few_milliseconds(quick: ToolContext) -> None:
    python_eval(quick, "1")  # warm the imports
    started = time.perf_counter()
    for _ in range(10):
        python_eval(quick, "1 + 1")
    per_call = (time.perf_counter() - started) / 10
    # The bench script reports the figure; this only catches a gross regression.
    assert per_call < 0.25


def _address_space_mb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmSize in /proc/self/status")


def test_address_space_limit_applies_in_the_evaluator_only(quick: ToolContext) -> None:
    # bytes(n) maps zero pages without touching them: cheap when allowed, refused when capped.
    roomy = dataclasses.replace(quick, rlimit_as_mb=_address_space_mb() + 512)
    tight = dataclasses.replace(quick, rlimit_as_mb=_address_space_mb() + 64)
    assert python_eval(roomy, "len(bytes(128 * 2**20))") == str(128 * 2**20)
    with pytest.raises(ToolError, match="MemoryError"):
        python_eval(tight, "len(bytes(128 * 2**20))")
    # The caller's own limit is untouched by the child's.
    assert len(bytes(128 * 2**20)) == 128 * 2**20
