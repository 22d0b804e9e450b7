"""The self-coded tool convention, read by AST from the source text (nothing is imported).

A tool module declares ``def run(**kwargs) -> str``, ``DESCRIPTION = "..."`` (a string literal)
and ``PARAMS_SCHEMA = {...}`` (a dict literal that is a JSON-schema object). ``read_declaration``
reads those; the gate uses it for its convention check and the manifest for its entries.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Declaration:
    """What a tool module declares for the model: its description and argument schema."""

    description: str
    params_schema: dict[str, Any]


def _is_json_value(value: Any) -> bool:
    if value is None or isinstance(value, str | bool | int | float):
        return True
    if isinstance(value, list):
        return all(_is_json_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_value(v) for k, v in value.items())
    return False


def schema_problems(schema: Any) -> list[str]:
    """What keeps ``schema`` from being a JSON-schema object for tool arguments (empty: fine)."""
    if not isinstance(schema, dict):
        return [f"PARAMS_SCHEMA must be a dict, got {type(schema).__name__}"]
    if not _is_json_value(schema):
        return [
            "PARAMS_SCHEMA must hold only JSON values (dicts with string keys, lists, strings, "
            "numbers, booleans, None): no tuples, sets or bytes"
        ]
    problems: list[str] = []
    if schema.get("type") != "object":
        problems.append('PARAMS_SCHEMA must have "type": "object"')
    props = schema.get("properties")
    if not isinstance(props, dict):
        problems.append('PARAMS_SCHEMA must have "properties": {...} (a dict, may be empty)')
        props = {}
    for key, value in props.items():
        if not isinstance(value, dict):
            problems.append(f"PARAMS_SCHEMA property {key!r} must be a dict like {{'type': ...}}")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        problems.append('PARAMS_SCHEMA "required" must be a list of property names')
    else:
        missing = [r for r in required if r not in props]
        if missing:
            problems.append(
                f"PARAMS_SCHEMA requires {missing} but does not list them in properties"
            )
    return problems


def _assigned(tree: ast.Module, name: str) -> ast.expr | None:
    """The value last assigned to ``name`` at module level (plain or annotated assignment)."""
    found: ast.expr | None = None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        ) or (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
            and node.value is not None
        ):
            found = node.value
    return found


def _run_problems(run: ast.FunctionDef, props: dict[str, Any]) -> list[str]:
    """Can ``run(**args)`` be called with the schema's properties as keywords?"""
    args = run.args
    problems: list[str] = []
    if args.posonlyargs:
        problems.append("run must not have positional-only parameters: it is called as run(**args)")
    named = [a.arg for a in args.args + args.kwonlyargs]
    if args.kwarg is None:
        unknown = [p for p in props if p not in named]
        if unknown:
            problems.append(
                f"PARAMS_SCHEMA properties {unknown} are not parameters of run "
                "(add them or a **kwargs)"
            )
    n_defaults = len(args.defaults)
    no_default = [a.arg for a in args.args[: len(args.args) - n_defaults]]
    no_default += [
        a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None
    ]
    undeclared = [p for p in no_default if p not in props]
    if undeclared:
        problems.append(
            f"run parameters {undeclared} have no default and are not in PARAMS_SCHEMA "
            "properties, so the model can never pass them"
        )
    return problems


def read_declaration(tree: ast.Module) -> tuple[Declaration | None, tuple[str, ...]]:
    """Read a tool module's convention from its AST: the declaration, or every problem found."""
    problems: list[str] = []
    run = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "run":
            run = node
    if run is None:
        problems.append("the module must define a module-level function: def run(**kwargs) -> str")
    elif isinstance(run, ast.AsyncFunctionDef):
        problems.append("run must be a plain def, not async def")
    description: str | None = None
    value = _assigned(tree, "DESCRIPTION")
    if value is None:
        problems.append('the module must set DESCRIPTION = "what the tool does" (a string literal)')
    elif not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
        problems.append("DESCRIPTION must be a plain string literal (no f-string or expression)")
    elif not value.value.strip():
        problems.append("DESCRIPTION must not be empty: the model reads it to choose the tool")
    else:
        description = value.value
    schema: Any = None
    value = _assigned(tree, "PARAMS_SCHEMA")
    if value is None:
        problems.append(
            'the module must set PARAMS_SCHEMA = {"type": "object", "properties": {...}}'
        )
    elif not isinstance(value, ast.Dict):
        problems.append("PARAMS_SCHEMA must be a dict literal")
    else:
        try:
            schema = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            problems.append("PARAMS_SCHEMA must be a dict of literals only (no names or calls)")
        else:
            problems.extend(schema_problems(schema))
    if isinstance(run, ast.FunctionDef) and isinstance(schema, dict) and not problems:
        problems.extend(_run_problems(run, schema.get("properties") or {}))
    if problems or description is None or not isinstance(schema, dict):
        return None, tuple(problems)
    return Declaration(description, schema), ()


def parse_module(source: str, filename: str) -> tuple[ast.Module | None, str]:
    """Parse ``source``; on failure return the error with its line number for the model."""
    try:
        return ast.parse(source, filename=filename), ""
    except SyntaxError as exc:
        return None, f"{filename}:{exc.lineno}: syntax error: {exc.msg}"
    except (ValueError, MemoryError, RecursionError) as exc:
        return None, f"{filename}: cannot be parsed: {exc}"
