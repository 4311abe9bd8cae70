"""What differs between SQLite and PostgreSQL for the journal, held in one profile each.

The repository and the store ask the profile, never the dialect's name: how a write
transaction takes its lock, whose clock judges a lease, whether keys are serialised by
advisory locks, whether an append's three writes are one statement, where the tables are
when no schema is named, how a long result is streamed, and what a transaction's state
is. A profile answers from the DB-API connection (or an async driver's adapter of it),
never through SQLAlchemy's wrapping, so it costs an attribute read on the hot path.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy.engine import Dialect

# psycopg's `pq.TransactionStatus.INERROR`: a statement failed, the server has aborted
# the transaction and refuses everything but ROLLBACK (COMMIT then rolls back, silently)
_PG_INERROR: Final = 3


def _driver(raw: Any) -> Any:
    """The driver's own connection behind an async adapter (aiosqlite, psycopg async)."""
    return getattr(raw, "driver_connection", None) or raw


def _sqlite_in_transaction(raw: Any) -> bool:
    state = getattr(raw, "in_transaction", None)
    if state is None:
        state = getattr(_driver(raw), "in_transaction", True)
    return bool(state)


def _sqlite_trouble(raw: Any) -> str | None:
    if _sqlite_in_transaction(raw):
        return None
    return "SQLite rolled the transaction back by itself (disk full, I/O error, no memory)"


def _pg_in_transaction(raw: Any) -> bool:
    info = getattr(_driver(raw), "info", None)
    return info is not None and int(info.transaction_status) != 0


def _pg_trouble(raw: Any) -> str | None:
    info = getattr(_driver(raw), "info", None)
    if info is not None and int(info.transaction_status) == _PG_INERROR:
        return "a statement in this transaction failed, and PostgreSQL aborted it"
    return None


def _no_trouble(_raw: Any) -> str | None:
    return None


def _always_in_transaction(_raw: Any) -> bool:
    return True


def _plain_cursor(raw: Any, is_async: bool) -> Any:
    # aiosqlite's adapter would otherwise fetch the whole result on execute
    return raw.cursor(server_side=True) if is_async else raw.cursor()


def _named_cursor(raw: Any, _is_async: bool) -> Any:
    # a named cursor is server-side (psycopg, and its async adapter: name positional)
    return raw.cursor(f"cadence_stream_{next(_stream_ids)}")


_stream_ids = itertools.count()


@dataclass(frozen=True, slots=True)
class DialectProfile:
    """One engine's answers to what the journal must know of it."""

    name: str
    # SQLite ends a transaction on its own after some errors; PostgreSQL never does
    rolls_back_by_itself: bool
    in_transaction: Callable[[Any], bool]  # of a raw connection
    # why a raw connection's transaction can no longer commit, or None
    transaction_trouble: Callable[[Any], str | None]
    # a write transaction takes the database's write lock when it begins (BEGIN IMMEDIATE)
    begins_immediate: bool = False
    # lease time is the server's clock (callers on many machines), unless `clock=` is given
    server_clock: bool = False
    # keys are serialised by transaction-level advisory locks (SQLite has one writer)
    advisory_locks: bool = False
    # an append's run, event and receipt writes are one statement (one round trip)
    one_statement_append: bool = False
    # where the tables are when no schema is named (never the connection's search_path)
    default_schema: str | None = None
    # a cursor that streams a long result: (raw connection, is async) -> cursor
    streaming_cursor: Callable[[Any, bool], Any] = _plain_cursor
    # the write-ahead log is folded back into the file when the store closes
    checkpoints_wal: bool = False
    # feed positions are given after commit, under a lock (concurrent writers commit out
    # of order), by the appender's feed notifier or a reader that may write; else each
    # append numbers its event under the single writer's lock
    feed_numbered_by_readers: bool = False
    # followers are woken by LISTEN/NOTIFY (else they poll for a changed database)
    notifies: bool = False
    # a batch's rows are bound as one JSON row set, in one statement (else each row is an
    # execution of its own: `Statements.write_rows`)
    binds_row_sets: bool = False


SQLITE: Final = DialectProfile(
    "sqlite",
    True,
    _sqlite_in_transaction,
    _sqlite_trouble,
    begins_immediate=True,
    checkpoints_wal=True,
)
POSTGRESQL: Final = DialectProfile(
    "postgresql",
    False,
    _pg_in_transaction,
    _pg_trouble,
    server_clock=True,
    advisory_locks=True,
    one_statement_append=True,
    default_schema="public",
    streaming_cursor=_named_cursor,
    feed_numbered_by_readers=True,
    notifies=True,
    binds_row_sets=True,
)
_PROFILES: Final = {profile.name: profile for profile in (SQLITE, POSTGRESQL)}


def profile_of(dialect: Dialect) -> DialectProfile:
    """The profile of `dialect` (another engine gets one that reports no trouble)."""
    name = str(dialect.name)
    profile = _PROFILES.get(name)
    if profile is None:
        profile = DialectProfile(name, False, _always_in_transaction, _no_trouble)
    return profile


__all__ = ["POSTGRESQL", "SQLITE", "DialectProfile", "profile_of"]
