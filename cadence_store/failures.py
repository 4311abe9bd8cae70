"""Translating driver errors into coded `CadenceStoreError`s, and which ones to retry.

Codes: `run-store-busy` (other writers held the store past the wait or retry budget),
`run-store-unavailable` (the database cannot be read or written: read-only, disk full,
I/O error, unreachable), `run-store-write-failed` (the database refused a write, e.g. a
constraint or trigger; nothing of the call was kept).
"""

from __future__ import annotations

from typing import Final

from sqlalchemy.exc import DBAPIError

from .errors import CadenceStoreError, StoreBusyError, StoreUnavailableError

# SQLite primary result codes (https://sqlite.org/rescode.html)
_SQLITE_BUSY: Final = frozenset({5, 6})  # BUSY, LOCKED
_SQLITE_UNAVAILABLE: Final = frozenset({3, 7, 8, 10, 11, 13, 14, 15, 23, 26})
# PostgreSQL SQLSTATEs a whole transaction may simply be retried after.
RETRYABLE_SQLSTATES: Final = frozenset({"40001", "40P01", "23505", "55P03"})
_PG_UNAVAILABLE_CLASSES: Final = ("08", "53", "57", "58", "25006", "XX")


def _sqlite_code(error: DBAPIError) -> int | None:
    code = getattr(error.orig, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def sqlstate(error: DBAPIError) -> str | None:
    state = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
    return None if state is None else str(state)


def is_retryable(error: BaseException) -> bool:
    """A PostgreSQL serialization failure, deadlock or lost insert race."""
    return isinstance(error, DBAPIError) and sqlstate(error) in RETRYABLE_SQLSTATES


def translate_database_error(error: DBAPIError) -> CadenceStoreError:
    detail = f"{type(error.orig).__name__}: {error.orig}"
    code = _sqlite_code(error)
    state = sqlstate(error)
    if code in _SQLITE_BUSY or state in RETRYABLE_SQLSTATES:
        return StoreBusyError("run-store-busy", detail)
    if code in _SQLITE_UNAVAILABLE or error.connection_invalidated:
        return StoreUnavailableError("run-store-unavailable", detail)
    if state is not None and state.startswith(_PG_UNAVAILABLE_CLASSES):
        return StoreUnavailableError("run-store-unavailable", detail)
    return StoreUnavailableError("run-store-write-failed", detail)
