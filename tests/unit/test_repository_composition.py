"""`RunRepository` holds its parts as objects: at most one class of the project's own in
its MRO besides itself, and every public method a real `def` of its own, documented, so
that "go to definition" lands on the method and the next hop on the part that runs it."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import cadence_store
from cadence_store import RunRepository

PACKAGE = Path(cadence_store.__file__).resolve().parent


def _defined_in_the_package(obj: object) -> bool:
    source = inspect.getsourcefile(obj)  # type: ignore[arg-type]
    return source is not None and Path(source).resolve().is_relative_to(PACKAGE)


def _public_methods() -> list[str]:
    return sorted(
        name
        for name in dir(RunRepository)
        if not name.startswith("_")
        and not isinstance(inspect.getattr_static(RunRepository, name), property)
    )


def test_at_most_one_project_class_beside_itself_in_the_mro() -> None:
    project_bases = [
        cls.__qualname__
        for cls in RunRepository.__mro__[1:]
        if cls.__module__.startswith("cadence_store.") and _defined_in_the_package(cls)
    ]
    assert len(project_bases) <= 1, project_bases


def test_the_contract_methods_are_public_methods() -> None:
    # the names DESIGN.md fixes, so that the check below cannot pass over an empty list
    contract = {"start_run", "bind_change", "bind_delivery", "transition", "acquire_lease"}
    contract |= {"renew_lease", "assert_lease", "commit_lease", "interrupt_lease"}
    contract |= {"inspect_operation", "status", "list_events", "rebuild_projection"}
    contract |= {"verify_integrity", "recover_expired_leases", "list_runs", "run_detail"}
    assert contract <= set(_public_methods())


@pytest.mark.parametrize("name", _public_methods())
def test_each_public_method_is_a_documented_def_of_its_own(name: str) -> None:
    function = inspect.unwrap(getattr(RunRepository, name))
    assert inspect.isfunction(function), f"{name} is {function!r}"
    assert function.__code__.co_name == name
    assert function.__qualname__ == f"RunRepository.{name}", "defined on RunRepository"
    assert _defined_in_the_package(function)
    assert inspect.getdoc(function), f"{name} has no docstring"
