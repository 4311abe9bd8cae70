"""RunStore's own write path: one transaction on a pooled DB-API connection.

A `UnitOfWork` wraps its transaction in a SQLAlchemy `Connection` (and a `Session` for a
host's rows). A `RunStore` call that runs no host code needs neither: here the repository
runs on the DB-API connection the pool hands out, in the transaction of the hand-written
floor (`benchmarks/floor.py`): checkout, BEGIN (IMMEDIATE on SQLite), the same statements
under the same locks, COMMIT, checkin. Errors are coded as everywhere else, and a failed
statement or commit rolls the whole transaction back.

It is used only where it changes nothing a host could see: on an engine with no
connection-level event listeners or execution options (a host's `begin` hook or isolation
level belongs to `Connection`s), and on a store already checked at head and in shape
(otherwise the unit of work runs, and checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from sqlalchemy import Engine

from .failures import WRITE, database_errors
from .repository import Clock, RunRepository
from .shape import is_store_ready

T = TypeVar("T")

# the `Connection` events a direct transaction would not fire
_CONNECTION_EVENTS: Final = (
    "engine_connect",
    "begin",
    "commit",
    "rollback",
    "set_connection_execution_options",
)


def fits_direct_writes(engine: Engine) -> bool:
    """Whether a transaction on `engine`'s pooled DB-API connections is indistinguishable
    from one on its `Connection`s: no connection events, no execution options."""
    if engine.get_execution_options():
        return False
    return not any(getattr(engine.dispatch, name) for name in _CONNECTION_EVENTS)


class DirectWrites:
    """Runs repository work in one transaction on a pooled DB-API connection."""

    __slots__ = ("_clock", "_engine", "_root_hash", "_schema", "_sqlite")

    def __init__(
        self, engine: Engine, *, root_hash: str | None, clock: Clock | None, schema: str | None
    ) -> None:
        self._engine = engine
        self._root_hash = root_hash
        self._clock = clock
        self._schema = schema
        self._sqlite = engine.dialect.name == "sqlite"

    def ready(self) -> bool:
        """The store was checked (head revision, shape) on this pool, and still counts."""
        return is_store_ready(self._engine.pool, self._schema)

    def run(self, work: Callable[[RunRepository], T]) -> T:
        with database_errors(WRITE):
            pooled = self._engine.raw_connection()
        dbapi_connection = pooled.dbapi_connection
        assert dbapi_connection is not None  # a connection just checked out
        try:
            with database_errors(WRITE):
                if self._sqlite:
                    # take the write lock first: a concurrent writer waits in SQLite's busy
                    # handler instead of failing the read-then-write halfway
                    dbapi_connection.execute("BEGIN IMMEDIATE")
            repository = RunRepository.on_dbapi_connection(
                dbapi_connection,
                self._engine.dialect,
                root_hash=self._root_hash,
                clock=self._clock,
                schema=self._schema,
            )
            result = work(repository)
            with database_errors(WRITE):
                dbapi_connection.commit()
            return result
        except BaseException:
            # The failure that got us here stays authoritative.
            try:
                dbapi_connection.rollback()
            except Exception:
                pooled.invalidate()  # a connection that cannot roll back is not reused
            raise
        finally:
            # back to the pool (which also rolls back anything left open)
            pooled.close()
