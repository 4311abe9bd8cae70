"""psycopg's failures read by SQLSTATE, and the few libpq reports without one.

Classification is by SQLSTATE, never by message text, with two exceptions that libpq
reports without a SQLSTATE: a refused login, and a lost connection behind a pooler
(`pooler_symptom`: PgBouncer's "received 2 results from command 'COMMIT'", "server
closed the connection"), whose call's outcome is unknown, never "nothing was kept".
"""

from __future__ import annotations

import sys
from typing import Final

from .base import driver_error

INSUFFICIENT_PRIVILEGE: Final = "42501"
# SQLSTATEs a whole transaction may simply be retried after: serialization failure,
# deadlock, lock timeout. (Unique violations are not among them: cadence-store's own
# writes cannot collide under its locks, so one comes from a host's rows.)
RETRYABLE_SQLSTATES: Final = frozenset({"40001", "40P01", "55P03"})
UNAVAILABLE_CLASSES: Final = ("08", "53", "57", "58", "25006", "XX")
_AUTH_SQLSTATE_CLASS: Final = "28"  # invalid authorization specification, bad password
# libpq reports a refused login with no SQLSTATE (the server's FATAL message only); these
# are the server's and libpq's own English texts for it
_AUTH_MESSAGES: Final = (
    "password authentication failed",
    "authentication failed for user",
    "no password supplied",
    "no pg_hba.conf entry",
    'role "',
)
# What psycopg says, with no SQLSTATE, when the connection under it was lost or swapped:
# a pooler answered a command with another server connection's leftovers ("received 2
# results from command 'BEGIN'"), the socket closed, or PgBouncer gave up waiting for a
# server (`query_wait_timeout`, `client_login_timeout`: it closes the client's connection).
_POOLER_SYMPTOMS: Final = (
    "results from command",
    "server closed the connection",
    "query_wait_timeout",
    "client_login_timeout",
    "server conn crashed",
    "the connection is lost",
    "connection is bad",
    "consuming input failed",
)


def sqlstate(error: BaseException) -> str | None:
    orig = driver_error(error)
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return None if state is None else str(state)


def is_authentication_failure(error: BaseException) -> bool:
    """The PostgreSQL server refused the login (user, password, pg_hba.conf): nothing
    ran, and the same call with the same credentials fails again."""
    orig = driver_error(error)
    state = sqlstate(error)
    if state is not None:
        return state.startswith(_AUTH_SQLSTATE_CLASS)
    pgconn = getattr(orig, "pgconn", None)
    if pgconn is None or type(orig).__name__ != "OperationalError":
        return False
    if getattr(pgconn, "needs_password", False):
        return True
    raw = getattr(pgconn, "error_message", b"") or b""
    message = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    fatal = message.lower()
    return "fatal" in fatal and any(text in fatal for text in _AUTH_MESSAGES)


def pooler_symptom(error: BaseException) -> bool:
    """A psycopg error with no SQLSTATE that means the server connection was lost."""
    orig = driver_error(error)
    psycopg = sys.modules.get("psycopg")
    if psycopg is None or not isinstance(orig, psycopg.Error) or sqlstate(orig) is not None:
        return False
    if not isinstance(
        orig, psycopg.InternalError | psycopg.OperationalError | psycopg.InterfaceError
    ):
        return False
    message = str(orig).lower()
    return any(symptom in message for symptom in _POOLER_SYMPTOMS)


__all__ = [
    "INSUFFICIENT_PRIVILEGE",
    "RETRYABLE_SQLSTATES",
    "UNAVAILABLE_CLASSES",
    "is_authentication_failure",
    "pooler_symptom",
    "sqlstate",
]
