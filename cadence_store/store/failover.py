"""Re-running a `RunStore` call across a PostgreSQL failover.

Every journal write carries an operation id and replaying the id returns the recorded
outcome, so a call whose connection was lost can be re-run as a whole: if the first
attempt committed, the re-run replays it; if not, the re-run applies it. The retry loop
(`retries.py`) re-runs the call with the jittered exponential backoff `Failover` decides
while the error means "connection lost" or "no primary answers"
(`failures.is_connection_lost`), until a primary answers or the timeout passes; then
`StoreUnavailableError` says the outcome is unknown.
The timeout counts from the start of the call and bounds each attempt too: one stuck
with no error (in a pooler's queue, on a half-open connection) is interrupted when the
budget runs out (`call_budget`).

A unit of work opened by the caller (`RunStore.unit_of_work()`) is never re-run here: its
body is the caller's code, which may have effects outside the database.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Final

from ..errors import CadenceStoreError, InvalidInputError, StoreUnavailableError
from ..storage.call_budget import CallBudget, call_budget
from ..storage.failures import is_connection_lost, is_database_error
from ..telemetry_state import record_failover_rerun

DEFAULT_FAILOVER_TIMEOUT_S: Final = 30.0
FIRST_DELAY_S: Final = 0.05
MAX_DELAY_S: Final = 1.0

logger = logging.getLogger(__name__)
_UNWATCHED: Final = nullcontext()  # reusable: it holds nothing of a call


def require_failover_timeout(value: object) -> float:
    """A finite number of seconds >= 0 (0 turns re-running off)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError("invalid-failover-timeout")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidInputError("invalid-failover-timeout")
    return seconds


class Failover:
    """The re-run policy of one store: how long a call whose connection was lost is re-run,
    and the wait before each re-run (`delay_before_rerun`; the loop is `retries.py`'s)."""

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
        drops pooled connections that may point at the old primary; `sleep` waits before a
        re-run. `interrupts`: the engine's connections are watched
        (`call_budget.attempts_bounded`); on one whose are not, an attempt past the
        deadline is only told by the clock, which is all the watchdog would do for it (a
        budget's registration cost a tenth of the store's own work on a SQLite
        transition)."""
        self.timeout_s = require_failover_timeout(timeout_s)
        self._database = database
        self._forget_connections = forget_connections
        self.monotonic = monotonic
        self.sleep = sleep
        # the whole call under a watchdog, first attempt included (`call_budget`)
        self._watched = interrupts and self.timeout_s > 0

    def watch(self) -> AbstractContextManager[CallBudget | None]:
        """What a call runs under: its `call_budget` where attempts are interrupted, else
        nothing (the clock tells an attempt past the deadline)."""
        return call_budget(self.timeout_s) if self._watched else _UNWATCHED

    def reruns(self, started: float, watched: CallBudget | None) -> Reruns:
        """The re-runs of a call that began at `started` (`monotonic`) under `watched`."""
        deadline = started + self.timeout_s
        if watched is not None:
            return Reruns(deadline, watched.expired_flag)
        monotonic = self.monotonic
        return Reruns(deadline, lambda: monotonic() >= deadline)

    def delay_before_rerun(self, error: CadenceStoreError, budget: Reruns) -> float:
        """How long to wait before re-running a call that failed with `error` (and the
        connections dropped); raises `error` itself unless it means a lost connection (or
        re-running is off), and `run-store-unavailable` once the budget is spent (or an
        attempt was interrupted for running past it)."""
        if self.timeout_s <= 0:
            raise error
        cause = error.__cause__
        interrupted = budget.expired() and cause is not None and is_database_error(cause)
        if not interrupted and not is_connection_lost(cause):
            raise error
        now = self.monotonic()
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


class Reruns:
    """One call's re-runs so far, when they must stop, and whether an attempt ran out."""

    __slots__ = ("deadline", "expired", "retries")

    def __init__(self, deadline: float, expired: Callable[[], bool]) -> None:
        self.deadline = deadline
        self.expired = expired
        self.retries = 0
