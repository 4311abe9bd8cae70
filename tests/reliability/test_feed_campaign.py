"""The journal feed under concurrent writers: nothing skipped, nothing twice (issue 25).

Four writer processes append to shared runs, each transaction sleeping a random while
before its commit (so transactions commit in another order than they wrote in), while
two followers follow the feed and apply each item to a host table with its position in
the same unit of work (``feed_workers``). One follower is killed with SIGKILL mid-run and
started again; it resumes from the position it recorded.

At the end, every committed event has a position, and:
- the follower never killed was given every committed event exactly once, in feed order;
- each follower's host table holds every event exactly once (the killed one too);
- along the feed, each run's sequences go 1, 2, 3, ... with none missing.

A short campaign runs by default (both engines); ``--slow`` runs the 30-second one.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # the spawned children import `feed_workers` by this name
    sys.path.insert(0, _HERE)

import feed_workers  # noqa: E402

import cadence_store  # noqa: E402
from cadence_store import RunStore  # noqa: E402

pytestmark = pytest.mark.campaign  # writer processes for seconds: the campaign step

WRITERS = 4
RUNS = 6
PROCESS_TIMEOUT_S = 120


@dataclass(frozen=True)
class Campaign:
    seconds: float
    delay_ms: int


SHORT = Campaign(seconds=4.0, delay_ms=15)
LONG = Campaign(seconds=30.0, delay_ms=25)


def _reporting(function_name: str, result_path: str, *args: Any) -> None:
    result = getattr(feed_workers, function_name)(*args)
    Path(result_path).write_text(json.dumps(result))


class _Child:
    def __init__(self, tmp_path: Path, name: str, function_name: str, *args: Any) -> None:
        self.result_path = tmp_path / f"{name}.json"
        context = multiprocessing.get_context("spawn")
        self.process = context.Process(
            target=_reporting, args=(function_name, str(self.result_path), *args)
        )
        self.process.start()

    def result(self) -> Any:
        self.process.join(PROCESS_TIMEOUT_S)
        assert not self.process.is_alive(), "a campaign process did not finish"
        result = json.loads(self.result_path.read_text())
        assert "error" not in result, result["error"]
        return result

    def kill(self) -> None:
        assert self.process.pid is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(PROCESS_TIMEOUT_S)


def _lines(path: Path) -> list[tuple[int, str, int]]:
    if not path.exists():
        return []
    return [
        (int(position), run_id, int(sequence))
        for position, run_id, sequence in (line.split() for line in path.read_text().splitlines())
    ]


def _wait_for_lines(path: Path, count: int) -> None:
    """Bounded wait for a follower to have been given `count` items: a condition."""
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while len(_lines(path)) < count:
        assert time.monotonic() < deadline, "the follower was given nothing"
        time.sleep(0.05)


def _run_campaign(url: str, tmp_path: Path, campaign: Campaign) -> None:
    cadence_store.upgrade(url)
    engine = create_engine(url)
    try:
        feed_workers.host_metadata().create_all(engine)
        with RunStore(url, root_hash=feed_workers.ROOT_HASH) as store:
            run_ids = []
            for index in range(RUNS):
                run = store.start_run(
                    feed_workers.STAGE, provisional_key=f"{index:064x}", operation_id=f"s{index}"
                )
                store.transition(run.run_id, "paused", operation_id=f"p{index}")
                run_ids.append(run.run_id)
        target = tmp_path / "target"
        logs = {name: tmp_path / f"{name}.log" for name in ("steady", "killed")}

        def follower(name: str, incarnation: int) -> _Child:
            args = (url, name, str(logs[name]), str(target))
            return _Child(tmp_path, f"{name}-{incarnation}", "follow", *args)

        steady, killed = follower("steady", 0), follower("killed", 0)
        # the followers are live (given setup events) before any writer starts: the kill
        # below then lands while the writers append, however slowly the children started
        _wait_for_lines(logs["killed"], 5)
        writers = [
            _Child(
                tmp_path,
                f"writer-{w}",
                "write",
                url,
                w,
                run_ids,
                campaign.seconds,
                campaign.delay_ms,
            )
            for w in range(WRITERS)
        ]
        time.sleep(campaign.seconds / 3)  # mid-run, while the writers append
        killed.kill()
        given_before_kill = len(_lines(logs["killed"]))
        restarted = follower("killed", 1)

        appended = sum(writer.result()["appended"] for writer in writers)
        with RunStore(url, root_hash=feed_workers.ROOT_HASH) as store:
            feed = [(i.position, i.run_id, i.event.sequence) for i in store.read_feed()]
            total = store.counts().events
        target.write_text(str(feed[-1][0]))
        steady.result()
        restarted.result()

        with engine.connect() as connection:
            table = feed_workers.FEED_COPY
            copies = {
                name: [
                    tuple(row)
                    for row in connection.execute(
                        select(table.c.position, table.c.run_id, table.c.sequence)
                        .where(table.c.follower == name)
                        .order_by(table.c.position, table.c.run_id, table.c.sequence)
                    )
                ]
                for name in logs
            }
    finally:
        engine.dispose()

    # every committed event has a position: the writers' and the setup's
    assert len(feed) == total == appended + 2 * RUNS
    positions = [position for position, _, _ in feed]
    assert positions == sorted(set(positions))
    per_run: dict[str, list[int]] = {}
    for _, run_id, sequence in feed:
        per_run.setdefault(run_id, []).append(sequence)
    for sequences in per_run.values():
        assert sequences == list(range(1, len(sequences) + 1))  # in order, none missing
    # the steady follower was given each committed event once, in feed order
    assert _lines(logs["steady"]) == feed
    # both host tables: every event's row exactly once, killed or not
    assert copies["steady"] == feed
    assert copies["killed"] == feed
    # the kill happened mid-run: items before it, and after the restart
    assert 5 <= given_before_kill < len(feed)
    print(
        f"feed campaign {campaign}: {len(feed)} events, follower killed after "
        f"{given_before_kill} items"
    )


@pytest.mark.parametrize(
    "campaign",
    [pytest.param(SHORT, id="short"), pytest.param(LONG, id="long", marks=pytest.mark.slow)],
)
def test_followers_get_every_committed_event_once_in_order(
    database_url: str, tmp_path: Path, campaign: Campaign
) -> None:
    _run_campaign(database_url, tmp_path, campaign)
