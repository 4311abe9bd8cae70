"""The error boundary: driver errors become coded `CadenceStoreError`s, in one place.

Every public entry point (store, unit of work, repository, transfer, schema, CLI) goes
through `database_errors` (a context manager) or `coded` (a decorator that also wraps
generator functions), so no raw driver exception escapes whichever way a caller comes in.

Codes: `run-store-busy` (other writers held the store past the wait or retry budget),
`run-store-unavailable` (the database cannot be reached or used at all: a standby's
read-only transaction, disk full, I/O error, unreachable, lost connection),
`run-store-auth-failed` (the PostgreSQL server refused the login),
`run-store-not-a-database` (the SQLite file is not a database),
`run-store-permission-denied` (`StorePermissionError`: a PostgreSQL role
without a grant, SQLSTATE 42501; a SQLite database read-only to this process, never
retried), `run-store-read-failed` / `run-store-write-failed` (the database refused a
statement of a read / a write, e.g. a missing table or a constraint; nothing of the call
was kept), `run-store-host-write-failed` (`HostWriteError`: it refused a statement of the
host's own code, `host_errors`).
Classification is the backend's whose driver raised the error (`Backend.classify`: by
the driver's result code or SQLSTATE, never by message text but for what libpq reports
without a SQLSTATE, `backends.postgresql_errors`); what no backend classifies is the
call's own failure (`run-store-read-failed` / `run-store-write-failed`).
"""

from __future__ import annotations

import functools
import inspect
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from enum import StrEnum
from typing import Any, Final, ParamSpec, TypeVar, cast

from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from ..errors import CadenceStoreError, HostWriteError, StorePermissionError, StoreUnavailableError
from .backends import BACKENDS, backend_named
from .backends.base import driver_error
from .backends.postgresql_errors import (
    RETRYABLE_SQLSTATES,
    is_authentication_failure,
    pooler_symptom,
    sqlstate,
)
from .pg_prepare import rerun_unprepared


class Access(StrEnum):
    """What a call was doing when the database failed: it picks the failure's code."""

    READ = "read"
    WRITE = "write"


READ: Final = Access.READ
WRITE: Final = Access.WRITE


def _driver_error_types() -> tuple[type[BaseException], ...]:
    """The DB-API base exceptions of the drivers in use (never imported just for this)."""
    types: list[type[BaseException]] = [sqlite3.Error]
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        types.append(psycopg.Error)
    return tuple(types)


def is_database_error(error: BaseException, dbapi: Any = None) -> bool:
    """A failure of the database or its driver (wrapped by SQLAlchemy or bare)."""
    if isinstance(error, (SQLAlchemyError, *_driver_error_types())):
        return True
    return dbapi is not None and isinstance(error, dbapi.Error)


def is_retryable(error: BaseException | None) -> bool:
    """A PostgreSQL serialization failure, deadlock or lock timeout; or a prepared
    statement a pooler lost, after which nothing is prepared (`pg_prepare`)."""
    state = None if error is None else sqlstate(error)
    return state in RETRYABLE_SQLSTATES or rerun_unprepared(state)


def translate_database_error(error: BaseException, access: Access = WRITE) -> CadenceStoreError:
    """The coded error for a database failure met while reading or writing."""
    if isinstance(error, CadenceStoreError):
        return error
    orig = driver_error(error)
    detail = f"{type(orig).__name__}: {orig}"
    invalidated = isinstance(error, DBAPIError) and error.connection_invalidated
    owner = next((backend for backend in BACKENDS if backend.owns_error(orig)), None)
    if owner is not None:
        verdict = owner.classify(error)
        if verdict is not None:
            return verdict
    elif type(orig).__name__ == "OperationalError":
        # no driver's: the server never answered (refused, unreachable)
        return StoreUnavailableError("run-store-unavailable", detail)
    if invalidated:
        return StoreUnavailableError("run-store-unavailable", detail)
    return StoreUnavailableError(f"run-store-{access}-failed", detail)


def translate_host_error(error: BaseException) -> CadenceStoreError:
    """The coded error for a database failure raised by a host's statement (its `write=`
    callback, its rows flushed in a unit of work). A statement the database refused is
    the host's failure, `HostWriteError`, not an outage: nothing was kept, and retrying
    unchanged fails again. An unreachable or busy database stays what it is (an outage
    or a race is no fault of the host's statement), and so does a SQLite file read-only
    to this process; a refused grant on a table is the host's table's."""
    translated = translate_database_error(error, WRITE)
    refused = (
        backend_named(translated.engine) if isinstance(translated, StorePermissionError) else None
    )
    if translated.code == f"run-store-{WRITE}-failed" or (
        refused is not None and refused.grants_per_table
    ):
        return HostWriteError(error, translated.detail)
    return translated


def host_errors() -> AbstractContextManager[None]:
    """Raise database failures of a host's statements inside the block as coded errors
    (`translate_host_error`); the host's other exceptions pass through unchanged."""
    return _HOST_GUARD


# PostgreSQL SQLSTATEs after which the same call can succeed on a (new) primary:
# admin shutdown, crash shutdown, cannot connect now (57P01-57P03), idle session timeout
# (57P05: the server closed an idle pooled connection), the whole connection exception
# class (08xxx, PgBouncer's own errors among them), and a read-only transaction (25006): a
# connection a failover left on a standby.
_CONNECTION_LOST_SQLSTATES: Final = frozenset({"57P01", "57P02", "57P03", "57P05", "25006"})


def is_connection_lost(error: BaseException | None) -> bool:
    """Whether `error` means the connection to the primary was lost, or no primary answered.

    Such a call may or may not have committed, and can be re-run with the same operation
    id. Not lost: constraint errors and every other SQLSTATE, SQLite's errors (a file has
    no failover), serialization failures (retried separately) and the library's own coded
    errors (they are verdicts, not accidents).
    """
    if error is None or isinstance(error, CadenceStoreError):
        return False
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    orig = driver_error(error)
    if hasattr(orig, "sqlite_errorcode") or is_authentication_failure(error):
        return False  # a refused login is a verdict too: waiting does not change it
    state = sqlstate(error)
    if state is not None:
        return state in _CONNECTION_LOST_SQLSTATES or state.startswith("08")
    # psycopg reports a refused or dropped connection ("server closed the connection
    # unexpectedly", "connection is bad", no read-write host) with no SQLSTATE, and a
    # pooler's lost server connection as an InternalError ("received 2 results")
    return type(orig).__name__ == "OperationalError" or pooler_symptom(orig)


class _DatabaseErrors:
    """The context manager of `database_errors` and `host_errors` (a class: it guards
    every statement of the hot path, where a generator-based one cost more than the check
    itself): a database failure leaves the block as `translate(error)`."""

    __slots__ = ("_translate",)

    def __init__(self, translate: Callable[[BaseException], CadenceStoreError]) -> None:
        self._translate = translate

    def __enter__(self) -> None:
        return None

    def __exit__(self, _type: object, error: BaseException | None, _traceback: object) -> None:
        if error is not None:
            self.raise_coded(error)

    def raise_coded(self, error: BaseException) -> None:
        """Raise `error`'s coded error, from it, if it is a database failure (else
        return): what leaving the block with `error` does, for a hot path's `except`
        clause, which costs nothing while nothing fails (the block costs two calls).
        Raised here, the coded error is held by no frame it passes through: a caller
        that kept it in a local would keep it, and every frame of its traceback, alive
        until a garbage collection (with them a failed call's connection)."""
        if (
            isinstance(error, Exception)
            and not isinstance(error, CadenceStoreError)
            and is_database_error(error)
        ):
            raise self._translate(error) from error


# stateless, so one per access serves every (nested, concurrent) use
_GUARDS: Final = {
    access: _DatabaseErrors(functools.partial(translate_database_error, access=access))
    for access in Access
}
_HOST_GUARD: Final = _DatabaseErrors(translate_host_error)


def database_errors(access: Access) -> _DatabaseErrors:
    """Raise database failures inside the block as coded `CadenceStoreError`s (as a
    context manager), or a caught one's coded error (`raise_coded`, in an `except`)."""
    return _GUARDS[access]


P = ParamSpec("P")
R = TypeVar("R")


def coded(access: Access) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a public function (or generator function) with `database_errors`.

    A generator is wrapped as it is consumed: the rows it streams fail coded too.
    """

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        if inspect.isgeneratorfunction(function):

            @functools.wraps(function)
            def generator(*args: P.args, **kwargs: P.kwargs) -> Any:
                with database_errors(access):
                    return (yield from cast(Iterator[Any], function(*args, **kwargs)))

            return cast(Callable[P, R], generator)

        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with database_errors(access):
                return function(*args, **kwargs)

        return wrapper

    return decorate


__all__ = [
    "READ",
    "WRITE",
    "Access",
    "coded",
    "database_errors",
    "host_errors",
    "is_database_error",
    "is_connection_lost",
    "is_retryable",
    "pooler_symptom",
    "sqlstate",
    "translate_database_error",
    "translate_host_error",
]
