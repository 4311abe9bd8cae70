"""`UnitOfWork`: one transaction, committed or rolled back as a whole.

Entering begins a write transaction on its own connection (BEGIN IMMEDIATE on SQLite, so
concurrent writers queue instead of failing halfway; row locks on PostgreSQL are taken by
the repository). `uow.session` is an ordinary SQLAlchemy `Session` on that transaction:
host rows added to it commit atomically with the journal rows. Leaving the block without
an exception commits; an exception — or a failing commit — rolls everything back.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session

from .engine import begin_write
from .errors import StoreUnavailableError
from .failures import WRITE, database_errors, is_database_error, translate_database_error
from .repository import Clock, RunRepository
from .schema import require_schema_name
from .shape import assert_store_ready
from .telemetry import instrument_unit_of_work


@instrument_unit_of_work
class UnitOfWork:
    def __init__(
        self,
        engine: Engine,
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
        schema: str | None = None,
    ) -> None:
        """`schema`: the PostgreSQL schema of cadence-store's tables; the session's own
        statements (a host's rows) are not redirected there."""
        self._engine = engine
        self._root_hash = root_hash
        self._clock = clock
        self._schema = require_schema_name(schema)
        self._connection: Connection | None = None
        self._session: Session | None = None
        self._runs: RunRepository | None = None

    @property
    def session(self) -> Session:
        """A `Session` joined to this transaction (made on first use)."""
        if self._connection is None:
            raise StoreUnavailableError("unit-of-work-not-active")
        if self._session is None:
            # only this object commits; a session commit() just flushes
            self._session = Session(
                bind=self._connection, join_transaction_mode="rollback_only", expire_on_commit=False
            )
        return self._session

    @property
    def runs(self) -> RunRepository:
        if self._runs is None:
            raise StoreUnavailableError("unit-of-work-not-active")
        return self._runs

    def __enter__(self) -> Self:
        if self._connection is not None:
            raise StoreUnavailableError("unit-of-work-not-reentrant")
        with database_errors(WRITE):
            connection = self._engine.connect()
        try:
            with database_errors(WRITE):
                begin_write(connection)
                # once per engine: a store not at head, or drifted, is refused before use
                assert_store_ready(connection, self._schema)
        except BaseException:
            _rollback_quietly(None, connection)
            connection.close()
            raise
        self._connection = connection
        self._runs = RunRepository.on_connection(
            connection,
            lambda: self.session,
            root_hash=self._root_hash,
            clock=self._clock,
            schema=self._schema,
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        connection, session, runs = self._connection, self._session, self._runs
        assert connection is not None and runs is not None
        self._connection = self._session = self._runs = None
        try:
            if exc_type is None:
                try:
                    refuse_unfinished(runs)
                    with database_errors(WRITE):
                        if session is not None:
                            session.flush()
                        connection.commit()
                except BaseException:
                    _rollback_quietly(session, connection)
                    raise
            else:
                _rollback_quietly(session, connection)
                if exc is not None and is_database_error(exc):
                    # a host's statement in the block failed: coded, like cadence-store's
                    raise translate_database_error(exc, WRITE) from exc
        finally:
            if session is not None:
                session.close()
            connection.close()


def refuse_unfinished(runs: RunRepository) -> None:
    """A journal call failed after some of its writes (and the block went on): committing
    would keep half of it."""
    if runs.left_unfinished:
        raise StoreUnavailableError(
            "run-store-write-failed",
            "a journal call in this unit of work failed after writing part of its rows; "
            "the unit of work was rolled back",
        )


def _rollback_quietly(session: Session | None, connection: Connection) -> None:
    # The failure that got us here stays authoritative.
    try:
        if session is not None:
            session.rollback()
    except Exception:
        pass
    try:
        connection.rollback()
    except Exception:
        pass
