"""A deadline for a whole `RunStore` call, that holds even inside one stuck attempt.

Re-running a call after a lost connection is bounded by `failover_timeout_s` between
attempts (`store/failover.py`); this module bounds the attempts themselves. An attempt can wait
with no error at all: in PgBouncer's queue while the server restarts (until its
`query_wait_timeout`), or on a half-open TCP connection (for the kernel's retransmission
timeout, minutes). psycopg's blocking calls have no client-side timeout, and a server-side
`statement_timeout` never starts for a statement that has not reached the server.

So each call runs under a `CallBudget` (a context variable of the calling thread):

- a connection the store's engine opens during the call gets libpq's `connect_timeout`
  from what is left of the budget (`do_connect`; libpq counts it per host, at least 2 s);
- every DB-API connection the call uses (checked out of the pool, or the one the direct
  path keeps: `watch_connection`) is noted; when the deadline passes, one watchdog thread
  shuts the socket of each down (`shutdown(2)`, the file descriptor stays the driver's).
  The blocked driver call returns at once with a lost connection, the pool discards the
  connection, and `Failover` reports the call's outcome unknown (`run-store-unavailable`).

Only engines cadence-store creates are watched (`bound_attempts`); a host's engine is
never altered, so a call on it is bounded between attempts only.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading
import time
from contextvars import ContextVar, Token
from typing import Any, Final

from sqlalchemy import Engine, event

# libpq treats a connect_timeout of 1 as 2 seconds; 0 would mean "wait forever"
MIN_CONNECT_TIMEOUT_S: Final = 2


class CallBudget:
    """The deadline of one call (`time.monotonic()`), and the connections it uses."""

    __slots__ = ("connections", "deadline", "expired")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.connections: list[Any] = []
        self.expired = False

    def expired_flag(self) -> bool:
        return self.expired

    def left_s(self) -> float:
        return self.deadline - time.monotonic()


_current: ContextVar[CallBudget | None] = ContextVar("cadence_store_call_budget", default=None)


def _interrupt(dbapi_connection: Any) -> None:
    """Shut the connection's socket down: a blocked read or write on it returns at once."""
    with contextlib.suppress(Exception):
        fd = dbapi_connection.pgconn.socket
        duplicate = socket.socket(fileno=os.dup(fd))
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        finally:
            duplicate.close()


class _Watchdog:
    """One daemon thread that interrupts the connections of calls past their deadline.

    Registering a call is a set insertion under a lock (the whole `call_budget` costs about
    six empty `with` blocks); the thread looks every `POLL_S` (a call ends at most that
    late) and exits after `IDLE_EXIT_S` with no call to watch."""

    POLL_S: Final = 0.1
    IDLE_EXIT_S: Final = 10.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._budgets: set[CallBudget] = set()
        self._thread: threading.Thread | None = None
        self._ending = threading.Event()  # `end_if_idle`: exit now if nothing is watched

    def add(self, budget: CallBudget) -> None:
        with self._lock:
            self._budgets.add(budget)
            if self._thread is None:
                self._ending = threading.Event()
                self._thread = threading.Thread(
                    target=self._loop,
                    args=(self._ending,),
                    name="cadence-store-call-budget",
                    daemon=True,
                )
                self._thread.start()

    def end_if_idle(self) -> None:
        """End the thread now, waiting for it, if it watches no call (a store's close:
        nothing of the store's is left running; the next call starts it again)."""
        with self._lock:
            thread = self._thread
            if thread is None or self._budgets:
                return
            self._thread = None
            self._ending.set()
        thread.join()

    def remove(self, budget: CallBudget) -> None:
        with self._lock:
            self._budgets.discard(budget)

    def _loop(self, ending: threading.Event) -> None:
        idle_since = time.monotonic()
        while True:
            if ending.wait(self.POLL_S):
                return  # `end_if_idle` took it out of service
            now = time.monotonic()
            with self._lock:
                if not self._budgets:
                    if now - idle_since > self.IDLE_EXIT_S:
                        if self._thread is threading.current_thread():
                            self._thread = None
                        return
                    continue
                idle_since = now
                due = [budget for budget in self._budgets if budget.deadline <= now]
                for budget in due:
                    budget.expired = True
                    self._budgets.discard(budget)
            for budget in due:
                for connection in list(budget.connections):
                    _interrupt(connection)


_watchdog: Final = _Watchdog()


class call_budget:
    """Bound the block (one whole call) by `timeout_s` seconds; yields the budget."""

    __slots__ = ("_budget", "_token")
    _token: Token[CallBudget | None]

    def __init__(self, timeout_s: float) -> None:
        self._budget = CallBudget(time.monotonic() + timeout_s)

    def __enter__(self) -> CallBudget:
        self._token = _current.set(self._budget)
        _watchdog.add(self._budget)
        return self._budget

    def __exit__(self, *_exc: object) -> None:
        _watchdog.remove(self._budget)
        _current.reset(self._token)


def end_idle_watchdog() -> None:
    """End the watchdog's thread if no call is being watched (see `_Watchdog.end_if_idle`)."""
    _watchdog.end_if_idle()


def watch_connection(dbapi_connection: Any) -> None:
    """The current call uses `dbapi_connection`: interrupt it if the call runs out of time."""
    budget = _current.get()
    if budget is not None:
        budget.connections.append(dbapi_connection)
        if budget.expired:
            _interrupt(dbapi_connection)


def _unwatch(dbapi_connection: Any, _record: Any) -> None:
    budget = _current.get()
    if budget is not None:
        with contextlib.suppress(ValueError):
            budget.connections.remove(dbapi_connection)


def _on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    watch_connection(dbapi_connection)


def _on_connect(_dialect: Any, _record: Any, _cargs: Any, cparams: dict[str, Any]) -> None:
    budget = _current.get()
    if budget is None:
        return
    left = max(MIN_CONNECT_TIMEOUT_S, math.ceil(budget.left_s()))
    given = cparams.get("connect_timeout")
    with contextlib.suppress(TypeError, ValueError):
        if given is not None and 0 < int(given) < left:
            return
    cparams["connect_timeout"] = left


def bound_attempts(engine: Engine) -> None:
    """Bound every attempt on cadence-store's own PostgreSQL `engine` by its call's budget."""
    event.listen(engine, "do_connect", _on_connect)
    event.listen(engine.pool, "checkout", _on_checkout)
    event.listen(engine.pool, "checkin", _unwatch)


def attempts_bounded(engine: Engine) -> bool:
    """Whether `bound_attempts` watches `engine`'s connections (else no connection of a
    call on it is ever interrupted: SQLite, a host's engine)."""
    return event.contains(engine.pool, "checkout", _on_checkout)
