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

Should a pooler pass the check (one that forwards the server's process id), its first
lost statement (26000 or 42P05) switches every engine that prepares off, each of its
connections at once (`rerun_unprepared`, asked by the error classifier), with one
WARNING, and the failed transaction is tried again whole: the statement never
ran, the transaction was rolled back, and a write's operation id makes a re-run replay
what a first attempt committed anyway.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Mapping
from typing import Any, Final

from sqlalchemy import Engine, event

from .database_url import driver_name

PREPARE_THRESHOLD: Final = 1  # psycopg's: prepared on its second execution on a connection
# what a transaction pooler causes for a prepared statement: it does not exist on this
# server connection (26000), or another client's of the same name does (42P05)
LOST_STATEMENT_SQLSTATES: Final = frozenset({"26000", "42P05"})

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

    __slots__ = ("__weakref__", "_connections", "_database", "_lock", "decided", "threshold")

    def __init__(self, database: str) -> None:
        self._database = database
        self._lock = threading.Lock()
        self.threshold: int | None = None  # known once `decided`; None: prepare nothing
        self.decided = False
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()  # psycopg's, live
        _POLICIES.add(self)

    def on_connect(self, dbapi_connection: Any, _record: Any) -> None:
        """A new connection of the engine: prepare on it, unless the engine is behind a
        pooler (checked on the engine's first connection)."""
        if not self.decided:
            with self._lock:
                if not self.decided:
                    self._decide(dbapi_connection)
        driver = _driver(dbapi_connection)
        driver.prepare_threshold = self.threshold
        self._connections.add(driver)

    def switch_off(self) -> bool:
        """Prepare nothing from now on, on every connection of the engine; whether it was
        preparing until now."""
        with self._lock:
            if self.decided and self.threshold is None:
                return False
            self.threshold, self.decided = None, True
            connections = list(self._connections)
        for connection in connections:
            connection.prepare_threshold = None
        return True

    @property
    def database(self) -> str:
        return self._database

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


_POLICIES: Final[weakref.WeakSet[PreparePolicy]] = weakref.WeakSet()


def rerun_unprepared(state: str | None) -> bool:
    """Whether a failure with SQLSTATE `state` is a statement a pooler lost while the
    store's prepare policy is in use, so that the transaction can be tried again whole,
    preparing nothing: every engine with the policy is switched off first, at once (which
    engine failed is not known here; the others go on as behind a pooler), with one
    WARNING naming them. Without such an engine (every `prepare_threshold` the caller's),
    nothing is switched, nor is the failure retried."""
    if state not in LOST_STATEMENT_SQLSTATES:
        return False
    policies = list(_POLICIES)
    switched = [policy.database for policy in policies if policy.switch_off()]
    if switched:
        logger.warning(
            "cadence-store: a prepared statement was lost (SQLSTATE %s): a transaction "
            "pooler is in between. Server-side prepared statements are off from now on "
            "for the store's engines of %s, and the failed transaction is tried again. "
            "Pass prepare_threshold yourself to choose: ?prepare_threshold=none",
            state,
            ", ".join(sorted(set(switched))),
        )
    return bool(policies)


def use_prepare_policy(engine: Engine, connect_args: Mapping[str, Any], database: str) -> None:
    """Give a psycopg `engine` cadence-store makes its prepare policy (`PreparePolicy`),
    unless `connect_args` (the caller's, with the URL's) name a `prepare_threshold`.
    `database`: the URL with its password masked, for the log."""
    if driver_name(engine.url) != "psycopg" or "prepare_threshold" in connect_args:
        return
    event.listen(engine, "connect", PreparePolicy(database).on_connect)


__all__ = [
    "LOST_STATEMENT_SQLSTATES",
    "PREPARE_THRESHOLD",
    "PreparePolicy",
    "behind_pooler",
    "rerun_unprepared",
    "use_prepare_policy",
]
