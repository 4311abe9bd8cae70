"""A follower name held by one `follow` at a time: two followers of one name would both
apply every item.

- PostgreSQL: a session advisory lock on the name (`pg_try_advisory_lock`, keyed like
  the store's other advisory locks), on a connection the hold keeps for itself. The
  server releases it when that connection ends: a follower that is closed, killed, or
  cut off gives the name up at once, and `reaffirm` (after a lost connection) takes it
  again, or reports that another follower has it. A standby's locks are its own: the
  name is exclusive among the followers of one server.
- SQLite: an exclusive `flock` on a file beside the database (`<file>-follower-<name>.lock`,
  0600), which the kernel releases when the follower's process ends; an in-memory
  database (one process) holds its names in this process.

Taking a name another follower holds raises `follower-in-use` (nothing waits).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from typing import Any, Final

from sqlalchemy import Engine
from sqlalchemy.pool import PoolProxiedConnection

from ..errors import OperationConflictError
from .backends import backend_for
from .failures import READ, database_errors

FOLLOWER_IN_USE: Final = "follower-in-use"

_memory_names: set[tuple[int, str]] = set()  # in-memory SQLite: (pool id, name)
_memory_lock = threading.Lock()


def _advisory_key(follower: str) -> int:
    # its own text prefix: no run key (`repository.core._advisory_key`) hashes from it
    digest = hashlib.sha256(f"cadence_store.follower:{follower}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _in_use(follower: str) -> OperationConflictError:
    return OperationConflictError(
        FOLLOWER_IN_USE, f"another follower is following as {follower!r}; close it first"
    )


class FollowerNameHold:
    """Holds `follower` for one follow, from `take` until `release`."""

    def __init__(self, engine: Engine, follower: str) -> None:
        self._engine = engine
        self._follower = follower
        self._pooled: PoolProxiedConnection | None = None
        self._file: int | None = None
        self._memory_key: tuple[int, str] | None = None

    def take(self) -> None:
        """Hold the name, or raise `follower-in-use`."""
        if backend_for(self._engine).advisory_locks:
            self._lock_on_server()
        else:
            self._lock_beside_file()

    def reaffirm(self) -> None:
        """After a lost connection: the server may have released the name with it."""
        if backend_for(self._engine).advisory_locks:
            self._lock_on_server()

    def release(self) -> None:
        pooled, self._pooled = self._pooled, None
        if pooled is not None:
            try:
                pooled.invalidate()  # never back to the pool: it holds the lock
            finally:
                pooled.close()
        descriptor, self._file = self._file, None
        if descriptor is not None:
            os.close(descriptor)  # the flock goes with it
        key, self._memory_key = self._memory_key, None
        if key is not None:
            with _memory_lock:
                _memory_names.discard(key)

    def _lock_on_server(self) -> None:
        for attempt in range(2):
            try:
                held = self._try_server_lock()
            except Exception:
                self.release()  # lost: a new connection, once
                if attempt:
                    raise
                continue
            if not held:
                self.release()
                raise _in_use(self._follower)
            return

    def _try_server_lock(self) -> bool:
        with database_errors(READ):
            if self._pooled is None:
                self._pooled = self._engine.raw_connection()
                driver: Any = self._pooled.dbapi_connection
                driver.autocommit = True  # the session's lock, no transaction held open
            cursor = self._pooled.dbapi_connection.cursor()  # type: ignore[union-attr]
            try:
                # an int of ours, written into the text (no paramstyle to pick per driver);
                # re-entrant: taken again on the same session it only counts up, and the
                # connection's end releases every count
                cursor.execute(f"SELECT pg_try_advisory_lock({_advisory_key(self._follower)})")
                row = cursor.fetchone()
            finally:
                cursor.close()
            return row is not None and bool(row[0])

    def _lock_beside_file(self) -> None:
        path = self._database_file()
        if not path:
            key = (id(self._engine.pool), self._follower)
            with _memory_lock:
                if key in _memory_names:
                    raise _in_use(self._follower)
                _memory_names.add(key)
            self._memory_key = key
            return
        descriptor = os.open(
            f"{path}-follower-{self._follower}.lock", os.O_RDWR | os.O_CREAT, 0o600
        )
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise _in_use(self._follower) from None
        except BaseException:
            os.close(descriptor)
            raise
        self._file = descriptor

    def _database_file(self) -> str:
        """The main database's file as SQLite resolved it ('' in memory)."""
        with database_errors(READ), self._engine.connect() as connection:
            rows = connection.exec_driver_sql("PRAGMA database_list").all()
            connection.rollback()
        return next((str(row[2] or "") for row in rows if row[1] == "main"), "")
