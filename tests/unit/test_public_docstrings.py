"""Every public method of the public classes has a docstring (the API reference of docs/
is generated from them, and a method without one would be missing there); those of the
stores, the unit of work and the repository are real `def`s: what `inspect.unwrap` finds
under the telemetry's wrapper is a function of that name, written (or generated as
source) in `cadence_store/`, so "go to definition", `help()`, `inspect.getsource` and
mypy all reach the code that runs."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

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


PACKAGE = Path(cadence_store.__file__).resolve().parent


def not_real_defs(cls: type, package: Path = PACKAGE) -> list[str]:
    """The public methods of `cls` that are not a `def` of their own name in `package`."""
    wrong = []
    for name, member in public_members(cls):
        function = inspect.unwrap(member)  # type: ignore[arg-type]
        code = getattr(function, "__code__", None)
        if (
            not inspect.isfunction(function)
            or code is None
            or code.co_name != name
            or not Path(code.co_filename).resolve().is_relative_to(package)
            or not (function.__doc__ or "").strip()
            or f"def {name}(" not in inspect.getsource(function)
        ):
            wrong.append(name)
    return wrong


@pytest.mark.parametrize(
    "cls",
    [
        cadence_store.RunStore,
        AsyncRunStore,
        cadence_store.UnitOfWork,
        cadence_store.RunRepository,
        AsyncRunRepository,
    ],
    ids=lambda cls: cls.__name__,
)
def test_every_public_method_is_a_real_def(cls: type) -> None:
    assert not_real_defs(cls) == []


def made(self: object) -> None:
    """A function a class takes as its method under another name."""


class Assembled:
    """A class with a real method and an assembled one (as the stores' were)."""

    def real(self) -> None:
        """A real def."""

    assembled = made


def test_the_scan_tells_an_assembled_method_from_a_real_def() -> None:
    assert not_real_defs(Assembled, Path(__file__).resolve().parent) == ["assembled"]
