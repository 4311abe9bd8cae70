"""Where each generated method's signature and docstring are stated (for
`tools/generate_methods.py`): the source function, found by reading the package's modules
as text, without importing them (the generated modules are among them)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPOSITORY = ROOT / "cadence_store/repository/run_repository.py"

RUN_STORE = ROOT / "cadence_store/store/run_store.py"
RUN_STORE_CALLS = ROOT / "cadence_store/store/run_store_calls.py"
ASYNC_CALLS = ROOT / "cadence_store/async_store/calls.py"
HOST_CALLS = ROOT / "cadence_store/store/host_calls.py"
FOLLOWING = ROOT / "cadence_store/store/following.py"


@dataclass(frozen=True)
class Source:
    """Where a method's signature and docstring are stated: a function of `path` (a
    method of `owner`, whose `self` the generated method keeps), `drop_first`: a function
    whose first parameter the generated method's `self` stands for."""

    path: Path
    name: str
    owner: str | None = None
    drop_first: bool = False


def repository(name: str) -> Source:
    """`RunRepository.name` where it is written: in its class, or in the first of its bases
    (depth first, as written) that defines it; read without importing the package, whose
    modules include the ones written here."""
    found = _defining_class(REPOSITORY, "RunRepository", name)
    if found is None:
        raise SystemExit(f"RunRepository.{name} is not defined in cadence_store/repository/")
    path, owner = found
    return Source(path, name, owner=owner)


def _defining_class(path: Path, owner: str, name: str) -> tuple[Path, str] | None:
    tree = ast.parse(path.read_text())
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == owner)
    if any(isinstance(node, ast.FunctionDef) and node.name == name for node in cls.body):
        return path, owner
    imported = {
        alias.asname or alias.name: path.parent / f"{node.module}.py"
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        for alias in node.names
    }
    for base in cls.bases:
        if isinstance(base, ast.Name):
            module = imported.get(base.id, path)
            if module.exists():
                found = _defining_class(module, base.id, name)
                if found is not None:
                    return found
    return None


def run_store(name: str) -> Source:
    """`RunStore.name`: written in `run_store.py`, or generated in `run_store_calls.py`."""
    if f"    def {name}(" in RUN_STORE.read_text():
        return Source(RUN_STORE, name, owner="RunStore")
    return Source(RUN_STORE_CALLS, name, owner="RunStoreCalls")


def host_call(name: str) -> Source:
    return Source(HOST_CALLS, name)


def feed(name: str) -> Source:
    return Source(FOLLOWING, name, drop_first=True)


def definition(source: Source, texts: dict[Path, str]) -> ast.FunctionDef:
    """The `def` of `source`, parsed from its module's text as this run writes it."""
    text = texts.get(source.path) or source.path.read_text()
    tree = ast.parse(text)
    scope: list[ast.stmt] = tree.body
    if source.owner is not None:
        owner = next(
            node
            for node in tree.body
            if isinstance(node, ast.ClassDef) and node.name == source.owner
        )
        scope = owner.body
    return next(
        node for node in scope if isinstance(node, ast.FunctionDef) and node.name == source.name
    )
