"""The one retry loop of a store call, sync and async: its first try, the whole-transaction
retries after a lost race, the re-runs after a lost connection.

Each loop reads top to bottom as one call: try the transaction; a try that lost a race on
PostgreSQL (serialization failure, deadlock, lock timeout: `is_retryable`) is tried
again, whole, after a jittered wait, until `MAX_ATTEMPTS` tries have lost; any other
failure goes to the failover policy (`failover.py`), which raises it unless it means a
lost connection, and otherwise waits and re-runs the call with `rerun` in place of `work`
(the lost try may have committed), until a primary answers or the call's
`failover_timeout_s` is spent. While nothing fails a call costs one try and a clock
reading: the re-runs' budget is made on the first lost connection.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from sqlalchemy.util.concurrency import await_only, in_greenlet

from ..errors import CadenceStoreError, StoreBusyError
from ..journal import RunProjection
from ..repository.run_repository import RunRepository
from ..storage.failures import is_retryable
from ..telemetry_state import record_busy_retry
from .failover import Failover, Reruns

T = TypeVar("T")
R = TypeVar("R")  # the repository an async transaction hands its work
Work = Callable[[RunRepository], T]
MAX_ATTEMPTS: Final = 8  # tries of one transaction that lose a race, then `run-store-busy`

logger = logging.getLogger(__name__)


def pause(seconds: float) -> None:
    """Wait `seconds` without holding up an event loop: inside SQLAlchemy's asyncio
    greenlet (an `AsyncRunStore` on a host's `AsyncEngine`) the loop does the waiting."""
    if in_greenlet():
        await_only(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


def call_with_retries(
    failover: Failover,
    transaction: Callable[[Work[T]], T],
    work: Work[T],
    rerun: Work[T] | None = None,
) -> T:
    """`transaction(work)` until it commits: retried whole while it loses races, re-run
    (with `rerun` when given) after a lost connection, within `failover`'s budget."""
    with failover.watch() as watched:
        started = failover.monotonic()
        reruns: Reruns | None = None  # made on the first lost connection
        tries = 0  # of the current attempt, which a re-run starts again
        while True:
            tries += 1
            try:
                return transaction(work)
            except CadenceStoreError as error:
                if isinstance(error, StoreBusyError):
                    delay = busy_retry_delay(error, tries)
                    if delay is not None:
                        pause(delay)  # looked up now: tests record the waits
                        continue
                if reruns is None:
                    reruns = failover.reruns(started, watched)
                failover.sleep(failover.delay_before_rerun(error, reruns))
            tries = 0
            if rerun is not None:
                work = rerun


async def call_with_retries_async(
    failover: Failover,
    transaction: Callable[[Callable[[R], Awaitable[T]]], Awaitable[T]],
    work: Callable[[R], Awaitable[T]],
    rerun: Callable[[R], Awaitable[T]] | None = None,
) -> T:
    """`call_with_retries` for a coroutine's transaction: the waits are the event loop's,
    and a try is bounded by its engine's own timeouts (no watchdog)."""
    started = failover.monotonic()
    reruns: Reruns | None = None
    tries = 0
    while True:
        tries += 1
        try:
            return await transaction(work)
        except CadenceStoreError as error:
            if isinstance(error, StoreBusyError):
                delay = busy_retry_delay(error, tries)
                if delay is not None:
                    await asyncio.sleep(delay)
                    continue
            if reruns is None:
                reruns = failover.reruns(started, None)
            await asyncio.sleep(failover.delay_before_rerun(error, reruns))
        tries = 0
        if rerun is not None:
            work = rerun


def replaying(
    kind: str, run_id: str, operation_id: str, work: Work[RunProjection]
) -> Work[RunProjection]:
    """The re-run of a call after a lost connection: what the operation id's first attempt
    committed, if it did (replayed with no lease check), else `work`."""

    def rerun(runs: RunRepository) -> RunProjection:
        recorded = runs.recorded_outcome(run_id, operation_id, kind)
        return work(runs) if recorded is None else recorded

    return rerun


def busy_retry_delay(error: StoreBusyError, attempt: int) -> float | None:
    """The jittered wait before trying again a whole transaction that lost a race on its
    `attempt`-th try (logged, and a span event); None when it is not to be tried again
    (not a race, or the tries are spent)."""
    if attempt >= MAX_ATTEMPTS or not is_retryable(error.__cause__ or error):
        if attempt > 1:
            logger.warning(
                "cadence-store: transaction still losing races after %d attempts (%s)",
                attempt,
                error.code,
            )
        return None
    delay = random.uniform(0, 0.002 * 2**attempt)
    logger.info(
        "cadence-store: transaction lost a race (%s); retrying it whole in %.3f s "
        "(attempt %d of %d)",
        error.code,
        delay,
        attempt + 1,
        MAX_ATTEMPTS,
    )
    record_busy_retry(attempt, delay)
    return delay


__all__ = [
    "MAX_ATTEMPTS",
    "Work",
    "busy_retry_delay",
    "call_with_retries",
    "call_with_retries_async",
    "pause",
    "replaying",
]
