"""FREE tool ``python_eval``: one pure-Python expression in a restricted namespace, hard-bounded.

A restricted namespace, not a sandbox: it makes the common escapes fail closed. Two layers:

* ``check_expression`` (in the calling process) parses in eval mode — a statement or an import
  is a syntax error — and walks the tree: no identifier starting with ``_`` (after NFKC
  normalisation), only the public attributes of built-in values (never ``format`` /
  ``format_map``, frames, code objects, generator or traceback internals), and
  ``type()`` with one argument only. Names resolve against ``SAFE_BUILTINS`` alone.
* ``evaluate_bounded`` compiles, evaluates and renders (``repr``) the expression in a
  short-lived forked child under RLIMIT_AS / RLIMIT_CPU, killed with SIGKILL at the wall-clock
  limit and always reaped: SIGALRM cannot interrupt a loop inside C (``sum(range(10**12))``).
  Compiling only in the child also keeps CPython's constant folder out of the caller.
"""

from __future__ import annotations

import ast
import math
import os
import signal
import time
import unicodedata
from typing import Any, NoReturn

import structlog

from shelldon.contracts import Tier, ToolDefinition
from shelldon.proc.child import Child, SpawnError
from shelldon.proc.limits import ProcessLimits, apply_limits
from shelldon.proc.output import Output, write_all
from shelldon.worker.tools.registry import ToolContext, ToolError, ToolSpec, string_params

log = structlog.get_logger(__name__)

# Longer input is not "one expression" a model needs, and it bounds the parser's work.
MAX_EXPRESSION_CHARS = 4000

# Attributes that reach interpreter internals (frames, code, generators, tracebacks) or run
# field lookups inside a string (str.format's "{0.__class__}" getattr trick). None starts with
# "_", so the underscore rule alone would miss them.
FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "format", "format_map",
        "gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "gi_suspended",
        "cr_frame", "cr_code", "cr_await", "cr_origin", "cr_running", "cr_suspended",
        "ag_frame", "ag_code", "ag_await", "ag_running",
        "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "f_lasti",
        "f_lineno", "f_trace_lines", "f_trace_opcodes",
        "tb_frame", "tb_next", "tb_lasti", "tb_lineno",
        "co_code", "co_consts", "co_names", "co_varnames", "co_filename",
        "func_globals", "func_code", "func_closure", "func_defaults",
        "im_func", "im_self", "im_class", "cell_contents", "with_traceback",
    }
)  # fmt: skip

# The values an expression can build are built-in ones, so their public attributes are all it
# may touch; anything else (a generator's, a function's, a frame's) is not on this list. The
# pure ``math`` module is offered by name too, so its functions and constants are listed.
_VALUE_TYPES: tuple[type, ...] = (
    str, bytes, int, float, complex, bool, list, tuple, dict, set, frozenset, range, slice,
    type({}.keys()), type({}.values()), type({}.items()), type(None),
)  # fmt: skip
# ``mro`` is a method of classes (dir() of a class leaves it out). It hands back only classes an
# expression already reaches through type() plus ``object``, whose every attribute starts with
# "_", so the old ``object.__subclasses__()`` walk is still refused by the underscore rule.
ALLOWED_ATTRIBUTES = (
    frozenset(name for t in (*_VALUE_TYPES, math) for name in dir(t) if not name.startswith("_"))
    | {"mro"}
) - FORBIDDEN_ATTRIBUTES


def _type_of(obj: object) -> type:
    """``type(x)`` with one argument; the class of a class (``type`` itself) is withheld so no
    expression can reach three-argument ``type`` through it."""
    if isinstance(obj, type):
        raise TypeError("python_eval: type() of a class is not available")
    return type(obj)


# No open, __import__, eval, exec, compile, globals, locals, vars, getattr/setattr/delattr,
# input, breakpoint, print, object, super, format: nothing that does I/O or reaches by name.
SAFE_BUILTINS: dict[str, Any] = {
    "abs": abs, "all": all, "any": any, "ascii": ascii, "bin": bin, "bool": bool,
    "bytes": bytes, "callable": callable, "chr": chr, "complex": complex, "dict": dict,
    "divmod": divmod, "enumerate": enumerate, "filter": filter, "float": float,
    "frozenset": frozenset, "hash": hash, "hex": hex, "int": int, "isinstance": isinstance,
    "issubclass": issubclass, "iter": iter, "len": len, "list": list, "map": map, "max": max,
    "math": math, "min": min, "next": next, "oct": oct, "ord": ord, "pow": pow, "range": range,
    "repr": repr, "reversed": reversed, "round": round, "set": set, "slice": slice,
    "sorted": sorted, "str": str, "sum": sum, "tuple": tuple, "type": _type_of, "zip": zip,
}  # fmt: skip


def _identifier(name: str) -> str:
    """The name Python itself binds: identifiers are NFKC-normalised by the parser."""
    return unicodedata.normalize("NFKC", name)


def _refuse_identifier(name: str, what: str) -> None:
    if _identifier(name).startswith("_"):
        raise ToolError(f"python_eval refused: {what} {name!r} starts with '_' (not allowed)")


def _refuse_attribute(attr: str) -> None:
    name = _identifier(attr)
    _refuse_identifier(name, "attribute")
    if name in ("format", "format_map"):
        raise ToolError(
            f"python_eval refused: str.{name} can look up attributes from inside the string; "
            "use an f-string or % formatting instead"
        )
    if name in FORBIDDEN_ATTRIBUTES:
        raise ToolError(
            f"python_eval refused: attribute {name!r} reaches interpreter internals "
            "(frames, code, generators or tracebacks)"
        )
    if name not in ALLOWED_ATTRIBUTES:
        raise ToolError(
            f"python_eval refused: attribute {name!r} is not available; only the public "
            "methods and fields of built-in values (str, bytes, numbers, list, tuple, dict, "
            "set, range) and the functions of math are"
        )


def check_expression(code: str) -> ast.Expression:
    """Parse ``code`` as one expression and refuse anything outside the restricted namespace.

    Returns the tree to evaluate; raises ``ToolError`` naming what was refused and why.
    """
    if len(code) > MAX_EXPRESSION_CHARS:
        raise ToolError(
            f"python_eval refused: the expression is {len(code)} characters; "
            f"keep it under {MAX_EXPRESSION_CHARS}"
        )
    try:
        # Surrounding whitespace would be an "unexpected indent"; it means nothing here.
        tree = ast.parse(code.strip(), mode="eval")
    except SyntaxError as exc:
        where = f" at line {exc.lineno}, column {exc.offset}" if exc.lineno else ""
        raise ToolError(
            "python_eval takes one expression (no statements, imports or assignments): "
            f"{exc.msg}{where}"
        ) from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise ToolError(f"python_eval refused: the expression cannot be parsed ({exc})") from None
    for node in ast.walk(tree):  # iterative: a deep tree cannot exhaust the caller's stack
        if isinstance(node, ast.Name):
            _refuse_identifier(node.id, "name")
        elif isinstance(node, ast.Attribute):
            _refuse_attribute(node.attr)
        elif isinstance(node, ast.arg):
            _refuse_identifier(node.arg, "parameter")
        elif isinstance(node, ast.keyword) and node.arg is not None:
            _refuse_identifier(node.arg, "keyword")
        elif isinstance(node, ast.Await | ast.Yield | ast.YieldFrom):
            raise ToolError("python_eval refused: await and yield are not expressions it runs")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and _identifier(node.func.id) == "type"
            and (len(node.args) != 1 or node.keywords)
        ):
            raise ToolError("python_eval refused: type() takes exactly one argument here")
    return tree


_OK, _ERR = b"K", b"E"


def _render(tree: ast.Expression, limit: int) -> tuple[bytes, str]:
    """Compile, evaluate and repr the expression; in the child only."""
    try:
        code = compile(tree, "<python_eval>", "eval", dont_inherit=True)
        value = eval(code, {"__builtins__": dict(SAFE_BUILTINS)})  # noqa: S307 - the guarded namespace
        text = repr(value)
    except MemoryError:
        return _ERR, "MemoryError: the expression needs more memory than python_eval allows"
    except RecursionError:
        return _ERR, "RecursionError: the expression recursed too deeply"
    except NameError as exc:
        return _ERR, (
            f"NameError: {exc} (python_eval has no imports, files or I/O; it knows only these "
            f"builtins: {', '.join(sorted(SAFE_BUILTINS))})"
        )
    except BaseException as exc:  # the child reports every failure, whatever it is
        return _ERR, f"{type(exc).__name__}: {exc}"
    if len(text) > limit:
        text = text[:limit] + f"…[python_eval cut the result at {limit} characters]"
    return _OK, text


def _child(tree: ast.Expression, ctx: ToolContext, read_fd: int, write_fd: int) -> NoReturn:
    """The forked evaluator: drop inherited descriptors, cap itself, answer once, ``_exit``."""
    try:
        os.close(read_fd)
        os.closerange(3, write_fd)
        os.closerange(write_fd + 1, os.sysconf("SC_OPEN_MAX"))
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        cpu_s = min(ctx.rlimit_cpu_s, math.ceil(ctx.eval_timeout_s) + 1)
        apply_limits(ProcessLimits(address_space_mb=ctx.rlimit_as_mb, cpu_s=cpu_s))
        status, text = _render(tree, ctx.max_output_chars)
        write_all(write_fd, status + text.encode("utf-8", errors="replace"))
    finally:
        os._exit(0)


def _describe_death(code: int) -> str:
    """Why a child that sent nothing ended (``code`` negative: the signal that killed it)."""
    if code < 0:
        if -code == signal.SIGXCPU:
            return "python_eval stopped: the expression hit the CPU-time limit"
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"python_eval stopped: the evaluator died with {name}"
    return "python_eval stopped: the evaluator exited without an answer"


def evaluate_bounded(tree: ast.Expression, ctx: ToolContext) -> str:
    """Evaluate a checked expression in a forked child, bounded by ``ctx.eval_timeout_s``;
    raises ``ToolError`` with the expression's error or why the child stopped."""
    read_fd, write_fd = os.pipe()
    try:
        # In the worker's group: whoever kills the worker's group kills the evaluator too.
        child = Child.fork(lambda: _child(tree, ctx, read_fd, write_fd), own_group=False)
    except SpawnError as exc:
        os.close(read_fd)
        os.close(write_fd)
        log.warning("python_eval_fork_failed", error=str(exc))
        raise ToolError(f"python_eval is unavailable right now ({exc})") from None
    os.close(write_fd)
    deadline = time.monotonic() + ctx.eval_timeout_s
    # 4 bytes per character at most, plus the status byte and the cut note.
    output = Output(read_fd, 4 * ctx.max_output_chars + 256)
    with child:  # killed, reaped and released however this block is left
        try:
            cut_short = not child.pump((output,), deadline, until_full=output) or output.truncated
        finally:
            output.close()
        if cut_short:
            child.kill()
        code = child.reap(block=True)
    if cut_short:
        log.info("python_eval_killed", timeout_s=ctx.eval_timeout_s)
        raise ToolError(
            f"python_eval stopped: the expression ran past {ctx.eval_timeout_s:g} s "
            "(or produced too much output); try a smaller computation"
        )
    data = output.data()
    if not data:
        raise ToolError(_describe_death(code if code is not None else 0))
    text = data[1:].decode("utf-8", errors="replace")
    if data[:1] != _OK:
        raise ToolError(text)
    return text


def python_eval(ctx: ToolContext, code: str) -> str:
    """The ``repr`` of one restricted Python expression's value; refusals and errors raise
    ``ToolError`` so the model reads them as a failed result."""
    return evaluate_bounded(check_expression(code), ctx)


def specs() -> list[ToolSpec]:
    """The FREE python_eval tool."""
    return [
        ToolSpec(
            ToolDefinition(
                name="python_eval",
                description=(
                    "Evaluate ONE pure Python expression (no statements, imports, files or "
                    "I/O) and return its repr. Built-ins like len, sum, sorted, min, max, "
                    "range, zip, enumerate, round, divmod, pow and the methods of str, list, "
                    "dict and set work, and so does math (math.sqrt, math.pi...); names "
                    "starting with '_' and str.format do not. "
                    "Bounded to a couple of seconds."
                ),
                params_schema=string_params(code="one Python expression"),
                tier=Tier.FREE,
            ),
            python_eval,
        )
    ]
