"""House rules, read from the package's syntax trees: no code built from strings
(`eval`, `exec`, `compile`), no reach into pydantic's private attributes (`__pydantic_*`),
and no module using another module's `_`-names (by import or as `module._name`)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "cadence_store"
CODE_FROM_STRINGS = {"eval", "exec", "compile"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _pydantic_private(text: str) -> bool:
    return text.startswith("__pydantic_")


def house_breaches(source: str, where: str = "<source>") -> list[str]:
    """Each breach of the rules in one module's source, as `where:line: what`."""
    tree = ast.parse(source)
    imported: set[str] = set()  # names bound by imports: modules, or another module's names
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if any(_private(part) for part in (node.module or "").split(".")):
                found.append((node.lineno, f"imports {'.' * node.level}{node.module}"))
            for alias in node.names:
                imported.add(alias.asname or alias.name)
                if _private(alias.name):
                    found.append((node.lineno, f"imports {alias.name}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                imported.add(alias.asname or alias.name.split(".")[0])
                if any(_private(part) for part in alias.name.split(".")):
                    found.append((node.lineno, f"imports {alias.name}"))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in CODE_FROM_STRINGS
        ):
            found.append((node.lineno, f"calls {node.func.id}"))
        elif isinstance(node, ast.Name) and _pydantic_private(node.id):
            found.append((node.lineno, f"names {node.id}"))
        elif isinstance(node, ast.Attribute):
            if _pydantic_private(node.attr):
                found.append((node.lineno, f"reads {node.attr}"))
            elif (
                _private(node.attr)
                and isinstance(node.value, ast.Name)
                and node.value.id in imported
            ):
                found.append((node.lineno, f"reads {node.value.id}.{node.attr}"))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _pydantic_private(node.value)
        ):
            found.append((node.lineno, f"names {node.value}"))
    return [f"{where}:{line}: {what}" for line, what in sorted(found)]


def test_the_package_keeps_the_house_rules() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 50, "the package was not found"
    found = [
        breach
        for path in modules
        for breach in house_breaches(
            path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE))
        )
    ]
    assert found == []


def test_the_scan_finds_each_kind_of_breach() -> None:
    sample = """
import json
from . import rows
from .values import _Value, RunEvent
from ._hidden import thing
picker = eval("lambda values: values")
exec("x = 1")
code = compile("1", "<x>", "eval")
setter = BaseModel.__dict__["__pydantic_private__"]
fields = model.__pydantic_fields_set__
order = rows._column_order
encoded = json._default_encoder
event = RunEvent._build()
fine = self._own, other.attribute, re.compile("x"), statement.compile(), __version__
"""
    assert [breach.split(": ", 1)[1] for breach in house_breaches(sample)] == [
        "imports _Value",
        "imports ._hidden",
        "calls eval",
        "calls exec",
        "calls compile",
        "names __pydantic_private__",
        "reads __pydantic_fields_set__",
        "reads rows._column_order",
        "reads json._default_encoder",
        "reads RunEvent._build",
    ]
