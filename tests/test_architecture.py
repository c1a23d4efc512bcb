"""The package's shape: modules import each other without cycles, and functions stay short.

Both are read from the source with ``ast``, so nothing is imported. An import counts when it runs at
module level (class bodies and ``if``/``try`` blocks included; ``if TYPE_CHECKING:`` blocks and
function bodies excluded); a second check counts the imports inside functions too (deferred imports
hide a cycle from the interpreter, not from the design), ``if TYPE_CHECKING:`` blocks still excluded.
``import a.b`` and ``from a.b import name`` depend on ``a.b``; ``from a import b`` depends on ``a`` (its
``__init__``) and, when ``a.b`` is a module, on ``a.b`` too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "gatepack"
EXCLUDED = {"tests", "bench", "fixtures", "docs", "build", "dist"}
MAX_FUNCTION_LINES = 60


def _sources() -> dict[str, Path]:
    """Every module of the package by dotted name (``gatepack.x.y``; a package by its ``__init__``)."""
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if parts[0] in EXCLUDED or any(part.startswith(".") for part in parts):
            continue
        names = [PACKAGE, *parts[:-1]] + ([] if path.name == "__init__.py" else [path.stem])
        modules[".".join(names)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module is imported."""
    found: list[ast.Import | ast.ImportFrom] = []
    for statement in body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            found.append(statement)
        elif isinstance(statement, ast.If):
            if not _is_type_checking(statement.test):
                found += _module_level_imports(statement.body)
            found += _module_level_imports(statement.orelse)
        elif isinstance(statement, ast.Try):
            for block in (statement.body, *(h.body for h in statement.handlers), statement.orelse, statement.finalbody):
                found += _module_level_imports(block)
        elif isinstance(statement, (ast.With, ast.ClassDef)):
            found += _module_level_imports(statement.body)
    return found


def _all_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at module level or inside a function, bar those under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            found += _all_imports(ast.Module(body=node.orelse, type_ignores=[]))  # its body runs for checkers only
        else:
            found += _all_imports(node)
    return found


def _dependencies(name: str, path: Path, modules: dict[str, Path], *, inside_functions: bool = False) -> set[str]:
    """The package's modules that ``name`` imports at module level (with ``inside_functions``, anywhere)."""
    is_package = path.name == "__init__.py"
    found = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for statement in _all_imports(tree) if inside_functions else _module_level_imports(tree.body):
        if isinstance(statement, ast.Import):
            found |= {alias.name for alias in statement.names}
            continue
        base = statement.module or ""
        if statement.level:
            anchor = name.split(".")[: len(name.split(".")) - statement.level + (1 if is_package else 0)]
            base = ".".join(anchor + ([base] if base else []))
        found.add(base)
        found |= {f"{base}.{alias.name}" for alias in statement.names}
    return {module for module in found if module in modules and module != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _long_functions() -> list[tuple[str, int]]:
    """Every function (methods and nested functions included) longer than the limit: (where, lines)."""
    found = []
    for name, path in _sources().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append((f"{name}.{node.name} (line {node.lineno})", length))
    return found


def test_the_sources_are_found() -> None:
    modules = _sources()
    assert "gatepack.cli" in modules and "gatepack.converters.registry" in modules
    assert "gatepack.converters.formats.coreml" in modules


def test_no_module_level_import_cycle() -> None:
    modules = _sources()
    graph = {name: _dependencies(name, path, modules) for name, path in modules.items()}
    assert graph["gatepack.converters.formats.coreml"], "the coreml package's __init__ imports its modules"
    cycles = _cycles(graph)
    assert not cycles, "modules importing each other at module level:\n" + "\n".join(map(" <-> ".join, cycles))


# Cycles through imports inside functions that stay, each with its reason (module sets, as _cycles sorts them).
JUSTIFIED_CYCLES: dict[tuple[str, ...], str] = {}


def test_no_import_cycle_even_through_imports_inside_functions() -> None:
    modules = _sources()
    graph = {name: _dependencies(name, path, modules, inside_functions=True) for name, path in modules.items()}
    cycles = [cycle for cycle in _cycles(graph) if tuple(cycle) not in JUSTIFIED_CYCLES]
    assert not cycles, "modules importing each other (inside functions included):\n" + "\n".join(
        map(" <-> ".join, cycles)
    )


def test_no_function_longer_than_the_limit() -> None:
    offenders = _long_functions()
    assert not offenders, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(
        f"{where}: {length}" for where, length in offenders
    )


def test_every_package_is_installed() -> None:
    """Each folder of modules is listed in pyproject's packages (an editable or wheel install leaves out the rest)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join([PACKAGE, *init.parent.relative_to(ROOT).parts])
        for top in ("converters", "schemas")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found <= listed, f"packages missing from pyproject.toml: {sorted(found - listed)}"


def test_the_application_layer_is_a_front_door_over_modules_that_parse_no_format() -> None:
    """``converters/__init__.py`` re-exports the API (under 150 lines); the modules directly under ``converters/``
    import no format's modules and no ``onnx``: what they need of a format's files (a whole ONNX graph's sizes,
    integer inputs, state wiring, specialising) is a hook on its implementation (``graph_analyses``). A format's
    registration record (plain data: gate tables, names) may be read. The registry, which imports the
    implementations and saves an in-memory ``onnx.ModelProto`` to a file, is the exception."""
    converters = ROOT / "converters"
    assert len((converters / "__init__.py").read_text(encoding="utf-8").splitlines()) < 150
    for path in sorted(converters.glob("*.py")):
        if path.name == "registry.py":
            continue
        imported = set()
        for statement in _all_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(statement, ast.Import):
                imported |= {alias.name for alias in statement.names}
            elif statement.module:
                imported |= {statement.module} | {f"{statement.module}.{alias.name}" for alias in statement.names}
        parsing = sorted(
            n
            for n in imported
            if (n.startswith(("gatepack.converters.formats", "onnx.")) or n == "onnx") and ".registration" not in n
        )
        assert not parsing, f"converters/{path.name} imports {parsing}"
