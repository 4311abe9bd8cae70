"""Every public method of the public classes has a docstring (the API reference of docs/
is generated from them, and a method without one would be missing there)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pytest

import cadence_store
import cadence_store.testing
from cadence_store.async_store import AsyncRunRepository, AsyncRunStore
from cadence_store.async_store.unit_of_work import AsyncUnitOfWork

PUBLIC_CLASSES = [
    cadence_store.RunStore,
    cadence_store.RunRepository,
    cadence_store.UnitOfWork,
    AsyncRunStore,
    AsyncRunRepository,
    AsyncUnitOfWork,
    cadence_store.testing.FakeClock,
]


def public_members(cls: type) -> Iterator[tuple[str, object]]:
    for name in dir(cls):
        if name.startswith("_"):
            continue
        static = inspect.getattr_static(cls, name)
        if isinstance(static, property):
            yield name, static.fget
        elif isinstance(static, classmethod | staticmethod):
            yield name, static.__func__
        else:
            member = getattr(cls, name)
            if callable(member) and not inspect.isclass(member):
                yield name, member


@pytest.mark.parametrize("cls", PUBLIC_CLASSES, ids=lambda cls: cls.__name__)
def test_every_public_method_has_a_docstring(cls: type) -> None:
    missing = [name for name, member in public_members(cls) if not (member.__doc__ or "").strip()]
    assert missing == [], f"{cls.__name__}: no docstring on {missing}"


def test_every_exported_name_has_a_docstring() -> None:
    missing = []
    for name in cadence_store.__all__:
        value = getattr(cadence_store, name)
        if (inspect.isclass(value) or inspect.isfunction(value)) and not value.__doc__:
            missing.append(name)
    assert missing == []
