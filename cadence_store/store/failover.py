"""Re-running a `RunStore` call across a PostgreSQL failover.

Every journal write carries an operation id and replaying the id returns the recorded
outcome, so a call whose connection was lost can be re-run as a whole: if the first
attempt committed, the re-run replays it; if not, the re-run applies it. `Failover.run`
re-runs the call with jittered exponential backoff while the error means "connection
lost" or "no primary answers" (`failures.is_connection_lost`), until a primary answers or
the timeout passes; then it raises `StoreUnavailableError` saying the outcome is unknown.
The timeout counts from the start of the call and bounds each attempt too: one stuck
with no error (in a pooler's queue, on a half-open connection) is interrupted when the
budget runs out (`call_budget`).

A unit of work opened by the caller (`RunStore.unit_of_work()`) is never re-run here: its
body is the caller's code, which may have effects outside the database.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar, TypeVarTuple

from ..errors import CadenceStoreError, InvalidInputError, StoreUnavailableError
from ..storage.call_budget import call_budget
from ..storage.failures import is_connection_lost, is_database_error
from ..telemetry import record_failover_rerun

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

DEFAULT_FAILOVER_TIMEOUT_S: Final = 30.0
FIRST_DELAY_S: Final = 0.05
MAX_DELAY_S: Final = 1.0

logger = logging.getLogger(__name__)


def require_failover_timeout(value: object) -> float:
    """A finite number of seconds >= 0 (0 turns re-running off)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError("invalid-failover-timeout")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidInputError("invalid-failover-timeout")
    return seconds


class Failover:
    """The re-run policy of one store: `run(attempt, *args)` calls `attempt(rerun, *args)`,
    where `rerun` is True on every attempt after a lost connection (the earlier one may
    have committed)."""

    def __init__(
        self,
        timeout_s: float,
        *,
        database: str,
        forget_connections: Callable[[], None] = lambda: None,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        interrupts: bool = True,
    ) -> None:
        """`database`: the URL with its password masked, for the log; `forget_connections`
        drops pooled connections that may point at the old primary. `interrupts`: the
        engine's connections are watched (`call_budget.attempts_bounded`); on one whose
        are not, an attempt past the deadline is only told by the clock, which is all the
        watchdog would do for it (a budget's registration cost a tenth of the store's
        own work on a SQLite transition)."""
        self.timeout_s = require_failover_timeout(timeout_s)
        self._database = database
        self._forget_connections = forget_connections
        self._monotonic = monotonic
        self._sleep = sleep
        self._interrupts = interrupts

    @property
    def interrupts(self) -> bool:
        """Whether an attempt past the deadline is interrupted (see `__init__`)."""
        return self._interrupts

    @property
    def monotonic(self) -> Callable[[], float]:
        """The clock of this policy's deadlines (for `rerun_after`'s `started`)."""
        return self._monotonic

    def run(self, attempt: Callable[[bool, *Ts], T], *args: *Ts) -> T:
        """`attempt(rerun, *args)` until it succeeds (`rerun`: False on the first). The
        whole call, first attempt included, ends within `timeout_s` (+ the last backoff's
        rounding): a stuck attempt is interrupted (`call_budget`)."""
        if self.timeout_s <= 0:
            return attempt(False, *args)
        if self._interrupts:
            with call_budget(self.timeout_s) as bound:
                return self._attempts(bound.expired_flag, attempt, *args)
        return self._attempts(None, attempt, *args)

    def _attempts(
        self, expired: Callable[[], bool] | None, attempt: Callable[[bool, *Ts], T], *args: *Ts
    ) -> T:
        """`expired`: the watchdog's flag (None: the clock says when the budget ran out).
        The budget of a call that never fails is never built (on the hot path: a closure
        and an object per call)."""
        deadline = self._monotonic() + self.timeout_s
        try:
            return attempt(False, *args)
        except CadenceStoreError as error:
            failed = error
        return self._reruns(failed, deadline, expired, attempt, *args)

    def rerun_after(
        self,
        failed: CadenceStoreError,
        started: float,
        attempt: Callable[[bool, *Ts], T],
        *args: *Ts,
    ) -> T:
        """`run` after a first attempt that the caller made itself, which began at
        `started` (this policy's `monotonic`) and failed with `failed`: only on an engine
        whose attempts are not watched (`interrupts` False), as a fast path that wants no
        frames of this loop while nothing fails."""
        assert not self._interrupts
        if self.timeout_s <= 0:
            raise failed
        return self._reruns(failed, started + self.timeout_s, None, attempt, *args)

    def _reruns(
        self,
        failed: CadenceStoreError,
        deadline: float,
        expired: Callable[[], bool] | None,
        attempt: Callable[[bool, *Ts], T],
        *args: *Ts,
    ) -> T:
        """The attempts after a first one that failed with `failed` (re-runs while it
        means a lost connection)."""
        if expired is None:
            monotonic = self._monotonic
            expired = lambda: monotonic() >= deadline  # noqa: E731
        budget = _Budget(deadline, expired)
        while True:
            self._sleep(self._next_delay(failed, budget))
            try:
                return attempt(True, *args)
            except CadenceStoreError as error:
                failed = error

    async def run_async(self, attempt: Callable[[bool], Awaitable[T]]) -> T:
        """`run` for a coroutine's attempts (the waits are the event loop's; an attempt
        is bounded by its engine's own timeouts)."""
        if self.timeout_s <= 0:
            return await attempt(False)
        budget = _Budget(self._monotonic() + self.timeout_s, lambda: False)
        while True:
            try:
                return await attempt(budget.retries > 0)
            except CadenceStoreError as error:
                await asyncio.sleep(self._next_delay(error, budget))

    def _next_delay(self, error: CadenceStoreError, budget: _Budget) -> float:
        """How long to wait before re-running a call that failed with `error`; raises
        `error` itself unless it means a lost connection, and `run-store-unavailable`
        once the budget is spent (or an attempt was interrupted for running past it)."""
        cause = error.__cause__
        interrupted = budget.expired() and cause is not None and is_database_error(cause)
        if not interrupted and not is_connection_lost(cause):
            raise error
        now = self._monotonic()
        if interrupted or now >= budget.deadline:
            logger.error(
                "cadence-store: no primary answered within %g s (%s); giving up",
                self.timeout_s,
                self._database,
            )
            raise StoreUnavailableError(
                "run-store-unavailable",
                f"no primary answered within {self.timeout_s:g} s "
                f"({self._database}); the outcome of the call is unknown: it is safe "
                f"to retry it with the same operation id (last error: {error.detail})",
            ) from error
        budget.retries += 1
        ceiling = min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** (budget.retries - 1))
        delay = min(random.uniform(ceiling / 2, ceiling), budget.deadline - now)
        logger.warning(
            "cadence-store: connection to %s lost or no primary answered (%s); "
            "re-running the call in %.2f s (retry %d, %.2f s of %g s left)",
            self._database,
            error.detail,
            delay,
            budget.retries,
            budget.deadline - now,
            self.timeout_s,
        )
        record_failover_rerun(budget.retries, budget.deadline - now)
        self._forget_connections()
        return delay


class _Budget:
    """One call's re-runs so far, when they must stop, and whether an attempt ran out."""

    __slots__ = ("deadline", "expired", "retries")

    def __init__(self, deadline: float, expired: Callable[[], bool]) -> None:
        self.deadline = deadline
        self.expired = expired
        self.retries = 0
