"""The package's import graph: layers that only import downwards, no circle, no reach-in.

Layers, bottom up: `errors` and `telemetry_state`; the pure `journal` and `telemetry`;
`storage` (tables, statements, backends, schema, engines); `repository` (the rules over one
transaction); `store` (transactions, the retry loop, the unit of work); `async_store` and
`transfer` (built on the store); `parallel_verify` (stores and export files across
processes); then the web view `web` and the entry points `testing`, `cli` (whose `serve`
runs `web`) and the package itself.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "cadence_store"
LAYERS: dict[str, int] = {
    "errors": 0,
    "journal": 1,
    "telemetry_state": 0,
    "telemetry": 1,
    "storage": 2,
    "repository": 3,
    "store": 4,
    "async_store": 5,
    "transfer": 5,
    "parallel_verify": 6,
    "web": 7,
    "testing": 7,
    "cli": 8,
    "__init__": 9,
    "__main__": 10,
}
# Private names of other libraries' objects that are their documented API.
DOCUMENTED = {"_mapping", "_replace", "_fields", "_asdict"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolved(module: str, path: Path, node: ast.ImportFrom) -> list[str]:
    """The package modules an import names (relative ones resolved)."""
    if node.level == 0:
        if node.module is None or not node.module.startswith("cadence_store."):
            return []
        base = node.module.removeprefix("cadence_store.")
    else:
        parts = [] if module == "__init__" else module.split(".")
        if not _is_package(path):
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, *([node.module] if node.module else [])])
    targets = []
    for alias in node.names:
        candidate = f"{base}.{alias.name}" if base else alias.name
        if candidate in MODULES:
            targets.append(candidate)
        elif base in MODULES:
            targets.append(base)
    return targets


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def _imports(module: str) -> Iterator[tuple[str, bool, int]]:
    """(imported module, at import time, line) for each package import of `module`."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        at_import_time = parents.get(node) is tree
        if _type_checking_only(node, parents):
            continue
        for target in _resolved(module, path, node):
            yield target, at_import_time, node.lineno


def _layer(module: str) -> str:
    return module.split(".", maxsplit=1)[0]


def test_every_module_is_in_a_layer() -> None:
    assert {_layer(module) for module in MODULES} <= set(LAYERS), "a new top-level module"


def test_imports_only_go_down_the_layers() -> None:
    climbing = []
    for module in MODULES:
        for target, _, line in _imports(module):
            own, other = _layer(module), _layer(target)
            if own != other and LAYERS[other] >= LAYERS[own]:
                climbing.append(f"{module}:{line} imports {target}")
    assert climbing == []


def test_no_import_circle() -> None:
    graph = {
        module: {target for target, eager, _ in _imports(module) if eager and target != module}
        for module in MODULES
    }
    circles = []
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                circles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []


def test_the_journal_never_imports_sqlalchemy() -> None:
    for module, path in MODULES.items():
        if _layer(module) != "journal":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(name.split(".")[0] == "sqlalchemy" for name in names), module


def _private_reach_ins(source: str) -> list[str]:
    """`x._name` where `_name` is not one of this module's own attributes."""
    tree = ast.parse(source)
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
                own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            own.add(node.target.id)
        elif isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__slots__" for target in node.targets
        ):
            own.update(
                str(item.value) for item in ast.walk(node.value) if isinstance(item, ast.Constant)
            )
    found = []
    for node in ast.walk(tree):
        private = ""
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
                continue  # the object's own attribute, wherever its class is written
            private = node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "setattr", "hasattr"}
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            private = node.args[1].value
        if not private.startswith("_") or private.startswith("__"):
            continue
        if private in own or private in DOCUMENTED:
            continue
        found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_reach_into_private_attributes_of_others(module: str) -> None:
    source = MODULES[module].read_text(encoding="utf-8")
    assert _private_reach_ins(source) == []


def test_the_reach_in_scan_finds_one() -> None:
    source = (
        "def f(engine):\n    return engine.pool._pre_ping, getattr(trace, '_TRACER_PROVIDER')\n"
    )
    assert _private_reach_ins(source) == [
        "2: engine.pool._pre_ping",
        "2: getattr(trace, '_TRACER_PROVIDER')",
    ]


def test_the_layer_scan_resolves_relative_imports() -> None:
    targets = {target for target, _, _ in _imports("store.run_store")}
    assert "store.transactions" in targets and "storage.engine" in targets
