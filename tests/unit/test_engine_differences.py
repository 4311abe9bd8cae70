"""Engine differences live in the engines' backends (`storage/backends/`, and the
migrations, which Alembic runs per dialect): no other module compares a dialect's name,
reads one to branch on (`dialect.name`, `url.get_backend_name()`, `is_sqlite(...)`) or
imports `sqlalchemy.dialects`. Read from the package's syntax trees."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "cadence_store"
# where engine differences belong
EXEMPT = (PACKAGE / "storage" / "backends", PACKAGE / "migrations")
DIALECT_NAMES = frozenset({"sqlite", "postgresql", "postgres", "mysql", "mssql", "oracle"})
NAME_TESTS = frozenset({"is_sqlite", "is_postgresql", "is_postgres"})


def _names_a_dialect(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.lower() in DIALECT_NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_a_dialect(item) for item in node.elts)
    return False


def _compared_names(node: ast.Compare) -> bool:
    """`x == "sqlite"`, `"postgresql" != x`, `x in ("sqlite", ...)`: not a substring test
    of a text (`"postgresql" in command`)."""
    operands = [node.left, *node.comparators]
    for index, operator in enumerate(node.ops):
        left, right = operands[index], operands[index + 1]
        if isinstance(operator, ast.Eq | ast.NotEq | ast.Is | ast.IsNot):
            if _names_a_dialect(left) or _names_a_dialect(right):
                return True
        elif (
            isinstance(operator, ast.In | ast.NotIn)
            and isinstance(right, ast.Tuple | ast.List | ast.Set)
            and _names_a_dialect(right)
        ):
            return True
    return False


def engine_branches(source: str, where: str = "<source>") -> list[str]:
    """Each place in one module's source that tells engines apart by name."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("sqlalchemy.dialects"):
                    found.append((node.lineno, f"imports {alias.name}"))
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = [alias.name for alias in node.names]
            if module.startswith("sqlalchemy.dialects") or (
                module == "sqlalchemy" and "dialects" in names
            ):
                found.append((node.lineno, f"imports from {module}"))
            found.extend((node.lineno, f"imports {name}") for name in names if name in NAME_TESTS)
        elif isinstance(node, ast.Compare) and _compared_names(node):
            found.append((node.lineno, f"compares a dialect name: {ast.unparse(node)}"))
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "name"
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "dialect"
        ):
            found.append((node.lineno, f"reads {ast.unparse(node)}"))
        elif isinstance(node, ast.Call):
            function = node.func
            called = (
                function.attr
                if isinstance(function, ast.Attribute)
                else function.id
                if isinstance(function, ast.Name)
                else ""
            )
            if called == "get_backend_name" or called in NAME_TESTS:
                found.append((node.lineno, f"calls {called}"))
    return [f"{where}:{line}: {what}" for line, what in sorted(found)]


def _branches_outside_the_backends() -> Iterator[str]:
    scanned = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(path.is_relative_to(exempt) for exempt in EXEMPT):
            continue
        scanned += 1
        yield from engine_branches(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE)))
    assert scanned > 50, "the package was not found"


def test_no_module_outside_the_backends_tells_engines_apart_by_name() -> None:
    found = list(_branches_outside_the_backends())
    assert found == [], "ask the backend (storage/backends) for the piece instead"


def test_the_backends_are_where_the_names_are() -> None:
    backends = PACKAGE / "storage" / "backends"
    found = [
        branch
        for path in sorted(backends.glob("*.py"))
        for branch in engine_branches(path.read_text(encoding="utf-8"))
    ]
    assert found, "the scan no longer sees the backends' own dialect imports"


def test_the_scan_finds_each_kind_of_branch() -> None:
    sample = """
import sqlalchemy.dialects.sqlite
from sqlalchemy.dialects import postgresql
from sqlalchemy import dialects, select
from ..storage.engine import is_sqlite
if engine.dialect.name == "postgresql":
    pass
if "sqlite" != url.get_backend_name():
    pass
if name in ("sqlite", "postgresql"):
    pass
if is_sqlite(connection):
    pass
fine = "postgresql" in command, name == "events", url.drivername, backend.name
other = Integer().with_variant(BigInteger(), "sqlite"), name in names
"""
    assert [branch.split(": ", 1)[1] for branch in engine_branches(sample)] == [
        "imports sqlalchemy.dialects.sqlite",
        "imports from sqlalchemy.dialects",
        "imports from sqlalchemy",
        "imports is_sqlite",
        "compares a dialect name: engine.dialect.name == 'postgresql'",
        "reads engine.dialect.name",
        "calls get_backend_name",
        "compares a dialect name: 'sqlite' != url.get_backend_name()",
        "compares a dialect name: name in ('sqlite', 'postgresql')",
        "calls is_sqlite",
    ]
