"""Process bodies of the journal feed campaign (tests/reliability/test_feed_campaign.py).

Importable by name, so that "spawn" children (fresh interpreters) can run them; the test
module puts this directory on ``sys.path`` first.

- ``write``: one writer. Until its deadline it appends to the campaign's shared runs in
  units of work of one to three transitions, and sleeps a random while (up to
  ``delay_ms``) *inside* each transaction before it commits: a transaction that wrote
  its events early commits late, after others that wrote after it.
- ``follow``: one follower. It follows the feed under its follower name and, for each
  item, inserts a row into the host table ``feed_copy`` and records its position in the
  same unit of work (the README's read-model recipe); every item it was given is also
  appended to a log file before its transaction commits. It stops once it has applied
  the feed up to the target position the test writes to ``target_path``.
"""

from __future__ import annotations

import random
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Column, Integer, MetaData, Table, Text, insert

ROOT_HASH = "ab" * 32
T = TypeVar("T")
STAGE = "abel-design"

_metadata = MetaData()
# the host's read model: deliberately no unique key, so a row applied twice would show
FEED_COPY = Table(
    "feed_copy",
    _metadata,
    Column("follower", Text, nullable=False),
    Column("position", Integer, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("sequence", Integer, nullable=False),
)


def host_metadata() -> MetaData:
    return _metadata


def until_not_busy(work: Callable[[], T]) -> T:
    """`work()`, re-run whole while SQLite's lock stays taken past the busy timeout: a
    unit of work is the caller's to re-run (same operation ids), as the docs say; the
    writers hold the lock through their deliberate delays."""
    from cadence_store import StoreBusyError

    while True:
        try:
            return work()
        except StoreBusyError:
            continue


def write(url: str, worker: int, run_ids: list[str], seconds: float, delay_ms: int) -> Any:
    from cadence_store import RunStore

    rng = random.Random(1000 + worker)
    committed = 0
    try:
        with RunStore(url, root_hash=ROOT_HASH) as store:
            deadline = time.monotonic() + seconds
            index = 0
            while time.monotonic() < deadline:
                # runs in one order in every transaction: contention, never a deadlock
                chosen = sorted(rng.sample(run_ids, rng.randint(1, 3)))
                operation_ids = [f"w{worker}-{index + 1 + i}" for i in range(len(chosen))]
                index += len(chosen)
                late_s = rng.uniform(0, delay_ms / 1000)

                def append(
                    chosen: list[str] = chosen,
                    operation_ids: list[str] = operation_ids,
                    late_s: float = late_s,
                ) -> None:
                    with store.unit_of_work() as uow:
                        for run_id, operation_id in zip(chosen, operation_ids, strict=True):
                            uow.runs.transition(
                                run_id, "paused", operation_id=operation_id, code="feed"
                            )
                        time.sleep(late_s)  # commit late

                until_not_busy(append)
                committed += len(chosen)
    except Exception:
        return {"error": traceback.format_exc()}
    return {"appended": committed}


def _target(target_path: Path) -> int | None:
    try:
        return int(target_path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def follow(url: str, follower: str, log_path: str, target_path: str) -> Any:
    from cadence_store import RunStore

    target_file = Path(target_path)
    position = 0

    try:
        with RunStore(url, root_hash=ROOT_HASH) as store, open(log_path, "a") as log:

            def done() -> bool:
                target = _target(target_file)
                if target is None:
                    return False
                # a restarted follower that had applied everything before it was killed
                # is given nothing: its recorded position says it is done (asked only
                # once the writers have finished, so it takes no lock from them)
                return position >= target or store.follower_position(follower) >= target

            items = until_not_busy(lambda: store.follow(follower=follower, stop=done, poll_s=0.02))
            for item in items:
                log.write(f"{item.position} {item.run_id} {item.event.sequence}\n")
                log.flush()  # before the commit: a kill afterwards re-delivers it

                def apply(item: Any = item) -> None:
                    with store.unit_of_work() as uow:
                        uow.session.execute(
                            insert(FEED_COPY).values(
                                follower=follower,
                                position=item.position,
                                run_id=item.run_id,
                                sequence=item.event.sequence,
                            )
                        )
                        uow.runs.record_position(follower, item.position)

                until_not_busy(apply)  # the same item again: its rows were rolled back
                position = item.position
    except Exception:
        return {"error": traceback.format_exc()}
    return {"position": position}
