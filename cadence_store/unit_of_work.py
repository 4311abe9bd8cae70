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
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from .engine import begin_write
from .errors import StoreUnavailableError
from .failures import is_database_error, translate_database_error
from .repository import Clock, RunRepository


class UnitOfWork:
    def __init__(
        self, engine: Engine, *, root_hash: str | None = None, clock: Clock | None = None
    ) -> None:
        self._engine = engine
        self._root_hash = root_hash
        self._clock = clock
        self._connection: Connection | None = None
        self._session: Session | None = None
        self._runs: RunRepository | None = None
        self._dbapi = engine.dialect.loaded_dbapi

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
        try:
            connection = self._engine.connect()
        except DBAPIError as error:
            raise translate_database_error(error) from error
        try:
            begin_write(connection)
        except Exception as error:
            connection.close()
            if is_database_error(error, self._dbapi):
                raise translate_database_error(error) from error
            raise
        self._connection = connection
        self._runs = RunRepository.on_connection(
            connection, lambda: self.session, root_hash=self._root_hash, clock=self._clock
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        connection, session = self._connection, self._session
        assert connection is not None
        self._connection = self._session = self._runs = None
        try:
            if exc_type is None:
                try:
                    if session is not None:
                        session.flush()
                    connection.commit()
                except Exception as error:
                    _rollback_quietly(session, connection)
                    if is_database_error(error, self._dbapi):
                        raise translate_database_error(error) from error
                    raise
            else:
                _rollback_quietly(session, connection)
                if exc is not None and is_database_error(exc, self._dbapi):
                    raise translate_database_error(exc) from exc
        finally:
            if session is not None:
                session.close()
            connection.close()


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
