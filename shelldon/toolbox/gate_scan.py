"""The gate's static half: what a staged tool and its test may import, read by AST only.

Every finding at once (smolagents' tool_validation style): ``import x``, ``from x import y``,
``__import__("x")``, ``importlib.import_module("x")``, ``importlib.__import__("x")``, also
through aliases and literal ``exec``/``eval`` strings, may not name an LLM SDK or ``shelldon``.
A computed module name cannot be checked: it is listed in ``dynamic_imports`` for the owner to
read, not refused. The tool must also follow the convention (``def run``, ``DESCRIPTION``,
``PARAMS_SCHEMA``: ``shelldon.toolbox.convention.read_declaration``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from shelldon.toolbox.convention import parse_module, read_declaration

FORBIDDEN_MODULES = ("openai", "anthropic", "google", "litellm", "zhipuai", "ollama", "shelldon")
"""Top-level modules a self-coded tool (or its test) may not import: LLM SDKs and shelldon."""

_LOADER_CALLS = frozenset(
    {
        "spec_from_file_location",
        "module_from_spec",
        "exec_module",
        "load_module",
        "SourceFileLoader",
        "run_path",
        "run_module",
        "find_spec",
    }
)


@dataclass(frozen=True, slots=True)
class StaticScan:
    """What the AST checks found: refusals (``findings``) and unverifiable dynamic imports."""

    findings: tuple[str, ...] = ()
    dynamic_imports: tuple[str, ...] = ()


def _forbidden(module: str) -> bool:
    return module.split(".", 1)[0] in FORBIDDEN_MODULES


def _refusal(where: str, module: str) -> str:
    return (
        f"{where}: imports {module!r}: self-coded tools may not import an LLM SDK "
        f"({', '.join(FORBIDDEN_MODULES[:-1])}) or shelldon; do the work with the standard "
        "library and return text"
    )


@dataclass(slots=True)
class _Aliases:
    """Names that, in this module, mean importlib, builtins or an import function."""

    importlib: set[str] = field(default_factory=lambda: {"importlib"})
    builtins: set[str] = field(default_factory=lambda: {"builtins", "__builtins__"})
    import_funcs: set[str] = field(default_factory=lambda: {"__import__"})


def _collect_aliases(tree: ast.AST) -> _Aliases:
    aliases = _Aliases()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                bound = a.asname or a.name.split(".", 1)[0]
                if a.name == "importlib" or (a.name.startswith("importlib.") and not a.asname):
                    aliases.importlib.add(bound)
                elif a.name == "builtins":
                    aliases.builtins.add(bound)
        elif isinstance(node, ast.ImportFrom) and node.module in ("importlib", "builtins"):
            for a in node.names:
                if a.name in ("import_module", "__import__"):
                    aliases.import_funcs.add(a.asname or a.name)
    return aliases


class _ImportScanner(ast.NodeVisitor):
    """Walks one module and records forbidden and unverifiable imports with line numbers."""

    def __init__(self, filename: str, aliases: _Aliases, depth: int = 0) -> None:
        self.filename = filename
        self.aliases = aliases
        self.depth = depth
        self.findings: list[str] = []
        self.dynamic: list[str] = []
        self._called: set[int] = set()

    def _where(self, node: ast.AST) -> str:
        return f"{self.filename}:{getattr(node, 'lineno', '?')}"

    def _unverifiable(self, node: ast.AST, why: str) -> None:
        snippet = ast.unparse(node)
        if len(snippet) > 80:
            snippet = snippet[:77] + "..."
        self.dynamic.append(f"{self._where(node)}: {snippet} — {why}")

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if _forbidden(a.name):
                self.findings.append(_refusal(self._where(node), a.name))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.findings.append(
                f"{self._where(node)}: relative import: a tool is a single module, import "
                "standard-library modules by their absolute name"
            )
        elif node.module and _forbidden(node.module):
            self.findings.append(_refusal(self._where(node), node.module))

    def _is_import_call(self, func: ast.expr) -> bool:
        if isinstance(func, ast.Name):
            return func.id in self.aliases.import_funcs
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            base = func.value.id
            return (
                base in self.aliases.importlib and func.attr in ("import_module", "__import__")
            ) or (base in self.aliases.builtins and func.attr == "__import__")
        return False

    def _check_dynamic_import(self, node: ast.Call) -> None:
        target: ast.expr | None = node.args[0] if node.args else None
        for kw in node.keywords:
            if kw.arg == "name":
                target = kw.value
        if isinstance(target, ast.Constant) and isinstance(target.value, str):
            name = target.value
            if name.startswith("."):
                self._unverifiable(node, "a relative dynamic import")
            elif _forbidden(name):
                self.findings.append(_refusal(self._where(node), name))
        else:
            self._unverifiable(node, "the module name is computed at run time")

    def _check_code_string(self, node: ast.Call, name: str) -> None:
        arg = node.args[0] if node.args else None
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)) or self.depth > 2:
            self._unverifiable(node, f"{name}() runs code the gate cannot read")
            return
        try:
            inner = ast.parse(arg.value, mode="exec")
        except (SyntaxError, ValueError):
            return  # exec of an unparsable literal raises at run time; nothing gets imported
        sub = _ImportScanner(f"{self._where(node)} ({name} string)", self.aliases, self.depth + 1)
        sub.visit(inner)
        self.findings.extend(sub.findings)
        self.dynamic.extend(sub.dynamic)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if self._is_import_call(func):
            self._called.add(id(func))
            self._check_dynamic_import(node)
        elif isinstance(func, ast.Name) and func.id in ("exec", "eval", "compile"):
            self._check_code_string(node, func.id)
        elif isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) >= 2:
            attr = node.args[1]
            if not isinstance(attr, ast.Constant) or attr.value in ("__import__", "import_module"):
                self._unverifiable(node, "getattr can reach an import function")
        else:
            last = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if last in _LOADER_CALLS:
                self._unverifiable(node, "loads a module by path, the gate cannot see which")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.aliases.import_funcs and id(node) not in self._called:
            self._unverifiable(node, "a reference to an import function")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in ("__import__", "import_module") and id(node) not in self._called:
            self._unverifiable(node, "a reference to an import function")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        key = node.slice
        if isinstance(key, ast.Constant) and key.value in ("__import__", "import_module"):
            self._unverifiable(node, "a lookup of an import function")
        self.generic_visit(node)


def scan_imports(tree: ast.Module, filename: str) -> StaticScan:
    """Forbidden imports (refused) and computed ones (listed) in one parsed module."""
    scanner = _ImportScanner(filename, _collect_aliases(tree))
    scanner.visit(tree)
    return StaticScan(tuple(scanner.findings), tuple(scanner.dynamic))


def static_checks(stem: str, code: str, test: str) -> StaticScan:
    """The AST half of the gate over the tool and its test: every finding at once."""
    findings: list[str] = []
    dynamic: list[str] = []
    for filename, source, is_tool in ((f"{stem}.py", code, True), (f"test_{stem}.py", test, False)):
        tree, error = parse_module(source, filename)
        if tree is None:
            findings.append(error)
            continue
        scan = scan_imports(tree, filename)
        findings.extend(scan.findings)
        dynamic.extend(scan.dynamic_imports)
        if is_tool:
            _decl, problems = read_declaration(tree)
            findings.extend(f"{filename}: {p}" for p in problems)
    return StaticScan(tuple(findings), tuple(dynamic))
