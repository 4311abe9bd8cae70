"""Server-side prepared statements on psycopg: on by default, off behind a pooler.

A prepared statement lives on one server connection. A transaction-mode pooler
(PgBouncer before 1.21, or without `max_prepared_statements`) runs the next transaction
on any of its server connections, where the statement does not exist (SQLSTATE 26000) or
another client's of the same name does (42P05). Without a pooler, preparing the store's
few statements once per connection saves the server's parse and plan of each: measured,
a durable transition at 0.88x the hand-written floor's time instead of 1.3x.

So an engine cadence-store makes prepares every statement from its second use
(`PREPARE_THRESHOLD`), unless its first connection finds a pooler in between: the
backend process id the server sent at login (libpq's `PQbackendPID`, from BackendKeyData)
is the server's own `pg_backend_pid()` when the client talks to PostgreSQL, and a
pooler's own cancel key otherwise (PgBouncer, pgcat, Odyssey and RDS Proxy make their own
to route cancel requests). Then the engine prepares nothing, and says so once in a
WARNING. The check is one statement on the engine's first connection; every later
connection takes its answer. A caller's own `prepare_threshold` (in `connect_args` or the
URL) is always honoured, and skips the check.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, Final

from sqlalchemy import Engine, event

from .database_url import driver_name

PREPARE_THRESHOLD: Final = 1  # psycopg's: prepared on its second execution on a connection

logger = logging.getLogger(__name__)


def _driver(raw: Any) -> Any:
    """psycopg's own connection behind SQLAlchemy's async adapter (or the connection)."""
    return getattr(raw, "driver_connection", None) or raw


def behind_pooler(dbapi_connection: Any) -> tuple[bool, str]:
    """Whether `dbapi_connection` reaches PostgreSQL through a pooler, and why: the login's
    backend process id is not the server's own. The check's transaction is rolled back."""
    login_pid = _driver(dbapi_connection).info.backend_pid
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("SELECT pg_backend_pid()")
        row = cursor.fetchone()
    finally:
        cursor.close()
        dbapi_connection.rollback()
    server_pid = None if row is None else int(row[0])
    if server_pid == login_pid:
        return False, f"the server's backend pid is the login's ({login_pid})"
    return True, f"the login's backend pid {login_pid} is not the server's {server_pid}"


class PreparePolicy:
    """The prepare threshold of one engine's connections, decided on its first."""

    __slots__ = ("_database", "_lock", "decided", "threshold")

    def __init__(self, database: str) -> None:
        self._database = database
        self._lock = threading.Lock()
        self.threshold: int | None = None  # known once `decided`; None: prepare nothing
        self.decided = False

    def on_connect(self, dbapi_connection: Any, _record: Any) -> None:
        """A new connection of the engine: prepare on it, unless the engine is behind a
        pooler (checked on the engine's first connection)."""
        if not self.decided:
            with self._lock:
                if not self.decided:
                    self._decide(dbapi_connection)
        _driver(dbapi_connection).prepare_threshold = self.threshold

    def _decide(self, dbapi_connection: Any) -> None:
        pooled, reason = behind_pooler(dbapi_connection)
        if pooled:
            logger.warning(
                "cadence-store: %s is reached through a connection pooler (%s): "
                "server-side prepared statements are off for this engine (a "
                "transaction-mode pooler runs a transaction on a server connection that "
                "lacks them). Pass prepare_threshold yourself to choose and skip this "
                "check: ?prepare_threshold=none, or 0 where the pooler keeps prepared "
                "statements (session mode; PgBouncer 1.21+ with max_prepared_statements)",
                self._database,
                reason,
            )
            self.threshold = None
        else:
            self.threshold = PREPARE_THRESHOLD
        self.decided = True


def use_prepare_policy(engine: Engine, connect_args: Mapping[str, Any], database: str) -> None:
    """Give a psycopg `engine` cadence-store makes its prepare policy (`PreparePolicy`),
    unless `connect_args` (the caller's, with the URL's) name a `prepare_threshold`.
    `database`: the URL with its password masked, for the log."""
    if driver_name(engine.url) != "psycopg" or "prepare_threshold" in connect_args:
        return
    event.listen(engine, "connect", PreparePolicy(database).on_connect)


__all__ = ["PREPARE_THRESHOLD", "PreparePolicy", "behind_pooler", "use_prepare_policy"]
