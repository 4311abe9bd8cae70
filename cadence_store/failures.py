"""Translating driver errors into coded `CadenceStoreError`s, and which ones to retry.

Codes: `run-store-busy` (other writers held the store past the wait or retry budget),
`run-store-unavailable` (the database cannot be read or written: read-only, disk full,
I/O error, unreachable), `run-store-write-failed` (the database refused a write, e.g. a
constraint or trigger; nothing of the call was kept).
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy.exc import DBAPIError

from .errors import CadenceStoreError, StoreBusyError, StoreUnavailableError

# SQLite primary result codes (https://sqlite.org/rescode.html)
_SQLITE_BUSY: Final = frozenset({5, 6})  # BUSY, LOCKED
_SQLITE_UNAVAILABLE: Final = frozenset({3, 7, 8, 10, 11, 13, 14, 15, 23, 26})
# PostgreSQL SQLSTATEs a whole transaction may simply be retried after: serialization
# failure, deadlock, lock timeout. (Unique violations are not among them: cadence-store's
# own writes cannot collide under its locks, so one comes from a host's rows.)
RETRYABLE_SQLSTATES: Final = frozenset({"40001", "40P01", "55P03"})
_PG_UNAVAILABLE_CLASSES: Final = ("08", "53", "57", "58", "25006", "XX")


def _driver_error(error: BaseException) -> BaseException:
    """The DB-API exception itself (SQLAlchemy wraps it; the hot path raises it bare)."""
    if isinstance(error, DBAPIError) and error.orig is not None:
        return error.orig
    return error


def is_database_error(error: BaseException, dbapi: Any) -> bool:
    return isinstance(error, DBAPIError) or (dbapi is not None and isinstance(error, dbapi.Error))


def _sqlite_code(error: BaseException) -> int | None:
    code = getattr(_driver_error(error), "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def sqlstate(error: BaseException) -> str | None:
    orig = _driver_error(error)
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return None if state is None else str(state)


def is_retryable(error: BaseException | None) -> bool:
    """A PostgreSQL serialization failure, deadlock or lost insert race."""
    return error is not None and sqlstate(error) in RETRYABLE_SQLSTATES


def translate_database_error(error: BaseException) -> CadenceStoreError:
    orig = _driver_error(error)
    detail = f"{type(orig).__name__}: {orig}"
    code = _sqlite_code(error)
    state = sqlstate(error)
    invalidated = isinstance(error, DBAPIError) and error.connection_invalidated
    if code in _SQLITE_BUSY or state in RETRYABLE_SQLSTATES:
        return StoreBusyError("run-store-busy", detail)
    if code in _SQLITE_UNAVAILABLE or invalidated:
        return StoreUnavailableError("run-store-unavailable", detail)
    if state is not None and state.startswith(_PG_UNAVAILABLE_CLASSES):
        return StoreUnavailableError("run-store-unavailable", detail)
    if state is None and code is None and type(orig).__name__ == "OperationalError":
        # no SQLSTATE: the server never answered (refused, unreachable, auth)
        return StoreUnavailableError("run-store-unavailable", detail)
    return StoreUnavailableError("run-store-write-failed", detail)


# PostgreSQL SQLSTATEs after which the same call can succeed on a (new) primary:
# admin shutdown, crash shutdown, cannot connect now (57P01-57P03), the whole connection
# exception class (08xxx), and a read-only transaction (25006): a connection a failover
# left on a standby.
_CONNECTION_LOST_SQLSTATES: Final = frozenset({"57P01", "57P02", "57P03", "25006"})


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
    orig = _driver_error(error)
    if hasattr(orig, "sqlite_errorcode"):
        return False
    state = sqlstate(error)
    if state is not None:
        return state in _CONNECTION_LOST_SQLSTATES or state.startswith("08")
    # psycopg reports a refused or dropped connection ("server closed the connection
    # unexpectedly", "connection is bad", no read-write host) with no SQLSTATE
    return type(orig).__name__ == "OperationalError"
