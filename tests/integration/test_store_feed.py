"""The journal feed: `read_feed`, `record_position` / `follower_position`, `follow`.

Every test taking ``store`` runs on both engines and through every entry point (RunStore,
a unit of work, a host Session, AsyncRunStore); those marked ``run_store_only`` test what
only the store has (`follow`, its connection handling).
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Iterator
from contextlib import aclosing
from typing import Any

import pytest
from entry_points import AsyncEntry, RepositoryEntry, UnitOfWorkEntry
from sqlalchemy import Engine, text
from support import ROOT_HASH

from cadence_store import (
    AsyncRunStore,
    FeedItem,
    InvalidInputError,
    OperationConflictError,
    RunStore,
)
from cadence_store.journal import RunEvent
from cadence_store.repository.feed import feed_item

BAD_FOLLOWERS = ["", " reader", "reader ", "a/b", "x" * 129, 7, None, b"reader"]
BAD_POSITIONS = [-1, 1.5, True, "3", None, 2**53]


def record_position(store: Any, follower: Any, position: Any, **options: Any) -> None:
    """`record_position` in a transaction of the entry point's kind."""
    if isinstance(store, AsyncEntry):

        async def record() -> None:
            async with store.async_store.unit_of_work() as uow:
                await uow.runs.record_position(follower, position, **options)

        store.run(record())
    elif isinstance(store, UnitOfWorkEntry | RepositoryEntry):
        with store._repository() as runs:
            runs.record_position(follower, position, **options)
    else:
        with store.unit_of_work() as uow:
            uow.runs.record_position(follower, position, **options)


def feed_rows(store: Any, **arguments: Any) -> list[Any]:
    """`RunRepository.read_feed_rows` in a transaction of the entry point's kind (the
    async one through `run_sync`)."""
    if isinstance(store, AsyncEntry):

        async def read() -> list[Any]:
            async with store.async_store.unit_of_work() as uow:
                return await uow.runs.run_sync(lambda runs: runs.read_feed_rows(**arguments))

        rows: list[Any] = store.run(read())
        return rows
    if isinstance(store, UnitOfWorkEntry | RepositoryEntry):
        with store._repository() as runs:
            return runs.read_feed_rows(**arguments)
    with store.unit_of_work() as uow:
        return uow.runs.read_feed_rows(**arguments)


def _live_feed_items() -> int:
    gc.collect()
    return sum(isinstance(found, FeedItem) for found in gc.get_objects())


def _started(store: Any, tag: str) -> str:
    run = store.start_run("abel-design", provisional_key=tag * 64, operation_id=f"start-{tag}")
    store.transition(run.run_id, "paused", operation_id=f"pause-{tag}", code="p")
    return run.run_id


def _keys(items: list[FeedItem]) -> list[tuple[str, int]]:
    return [(item.run_id, item.event.sequence) for item in items]


def _in_run_order(keys: list[tuple[str, int]], run_id: str) -> list[int]:
    return [sequence for key_run, sequence in keys if key_run == run_id]


def test_the_feed_holds_every_event_once_in_order(store, db: Engine):
    first, second = _started(store, "a"), _started(store, "b")
    store.transition(first, "running", operation_id="run-a")
    feed = store.read_feed()
    keys = _keys(feed)
    assert sorted(keys) == sorted([(first, 1), (first, 2), (second, 1), (second, 2), (first, 3)])
    assert _in_run_order(keys, first) == [1, 2, 3] and _in_run_order(keys, second) == [1, 2]
    if db.dialect.name == "sqlite":  # numbered by each append: append order exactly
        assert keys == [(first, 1), (first, 2), (second, 1), (second, 2), (first, 3)]
    positions = [item.position for item in feed]
    assert positions == sorted(set(positions)) and positions[0] >= 1
    # the items are the runs' events, as list_events gives them
    by_run = {run_id: store.list_events(run_id) for run_id in (first, second)}
    for item in feed:
        assert isinstance(item.event, RunEvent)
        assert item.event == by_run[item.run_id][item.event.sequence - 1]


def test_after_limit_and_run_page_the_feed(store):
    first, second = _started(store, "a"), _started(store, "b")
    feed = store.read_feed()
    assert store.read_feed(limit=3) == feed[:3]
    assert store.read_feed(after=feed[1].position) == feed[2:]
    assert store.read_feed(after=feed[1].position, limit=1) == feed[2:3]
    assert store.read_feed(after=feed[-1].position) == []
    assert _keys(store.read_feed(run_id=second)) == [(second, 1), (second, 2)]
    assert store.read_feed(run_id=first, after=feed[1].position) == []
    assert store.read_feed(run_id="no-such-run") == []
    assert store.read_feed(run_id="nul\x00run") == []  # no run can have it


def test_the_feeds_rows_make_the_items_read_feed_gives(store):
    first, second = _started(store, "a"), _started(store, "b")
    store.transition(first, "running", operation_id="run-a")
    feed = store.read_feed()
    for arguments in (
        {},
        {"limit": 3},
        {"after": feed[1].position},
        {"after": feed[1].position, "limit": 1},
        {"run_id": second},
        {"run_id": "no-such-run"},
    ):
        rows = feed_rows(store, **arguments)
        assert [feed_item(row) for row in rows] == store.read_feed(**arguments)
    assert [row.position for row in feed_rows(store)] == [item.position for item in feed]


@pytest.mark.parametrize(
    "arguments, code",
    [
        ({"after": -1}, "invalid-feed-position"),
        ({"limit": 0}, "invalid-limit"),
        ({"run_id": 5}, "invalid-run-id"),
    ],
    ids=repr,
)
def test_the_feeds_rows_refuse_what_read_feed_refuses(store, rejected, arguments, code):
    with rejected(InvalidInputError, code):
        feed_rows(store, **arguments)


@pytest.mark.run_store_only
def test_a_follower_makes_each_item_as_it_yields_it(store):
    """Not a page of items at once: held together, a page's items outlive the garbage
    collector's young generations, and its full collections then rescan every one."""
    for tag in "abcdef":
        _started(store, tag)  # 12 events, one page
    alive_before = _live_feed_items()  # whatever earlier tests in this process still hold
    items = store.follow(stop=lambda: False, poll_s=0.01)
    try:
        first = next(items)
        assert first.event.sequence == 1
        assert _live_feed_items() - alive_before == 1
        assert len([next(items) for _ in range(11)]) == 11
    finally:
        items.close()


@pytest.mark.run_store_only
def test_an_async_follower_makes_each_item_as_it_yields_it(store_url: str, store):
    for tag in "abcdef":
        _started(store, tag)

    async def follow() -> int:
        async with AsyncRunStore(store_url, root_hash=ROOT_HASH) as async_store:
            items = async_store.follow(stop=lambda: False, poll_s=0.01)
            async with aclosing(items):
                async for _item in items:
                    return _live_feed_items()
        raise AssertionError("the follower gave nothing")

    alive_before = _live_feed_items()  # whatever earlier tests in this process still hold
    assert asyncio.run(follow()) - alive_before == 1


def test_a_follower_position_is_recorded_and_read(store):
    assert store.follower_position("projector") == 0
    record_position(store, "projector", 7)
    record_position(store, "mailer", 3)
    assert store.follower_position("projector") == 7
    record_position(store, "projector", 9)
    assert (store.follower_position("projector"), store.follower_position("mailer")) == (9, 3)


def test_a_recorded_position_moves_back_only_when_told_to_rewind(store, rejected):
    record_position(store, "projector", 9)
    with rejected(OperationConflictError, "feed-position-backwards"):
        record_position(store, "projector", 8)
    record_position(store, "projector", 9)  # recording it again is no move
    record_position(store, "projector", 12)
    record_position(store, "projector", 4, rewind=True)
    assert store.follower_position("projector") == 4
    record_position(store, "fresh", 3, rewind=True)  # a first position, rewound or not
    assert store.follower_position("fresh") == 3
    with rejected(InvalidInputError, "invalid-rewind"):
        record_position(store, "projector", 2, rewind="yes")


@pytest.mark.parametrize("follower", BAD_FOLLOWERS, ids=repr)
def test_a_bad_follower_name_is_refused(store, rejected, follower):
    with rejected(InvalidInputError, "invalid-follower"):
        store.follower_position(follower)
    with rejected(InvalidInputError, "invalid-follower"):
        record_position(store, follower, 1)


@pytest.mark.parametrize("position", BAD_POSITIONS, ids=repr)
def test_a_bad_position_is_refused(store, rejected, position):
    _started(store, "a")
    with rejected(InvalidInputError, "invalid-feed-position"):
        record_position(store, "projector", position)
    with rejected(InvalidInputError, "invalid-feed-position"):
        store.read_feed(after=position)


@pytest.mark.parametrize("limit", [0, -1, 1.0, True, "2"], ids=repr)
def test_a_bad_limit_or_run_id_is_refused(store, rejected, limit):
    with rejected(InvalidInputError, "invalid-limit"):
        store.read_feed(limit=limit)
    with rejected(InvalidInputError, "invalid-run-id"):
        store.read_feed(run_id=5)


def test_a_read_model_commits_its_rows_with_its_position(store, db: Engine):
    """The recipe: a host row and the position in one transaction, or neither."""
    _started(store, "a")
    with db.begin() as connection:
        connection.execute(text("CREATE TABLE seen (run_id TEXT, sequence INTEGER)"))
    [first, second] = store.read_feed()
    with store.unit_of_work() as uow:
        uow.session.execute(text("INSERT INTO seen VALUES (:r, :s)"), {"r": first.run_id, "s": 1})
        uow.runs.record_position("reader", first.position)
    with pytest.raises(RuntimeError), store.unit_of_work() as uow:
        uow.session.execute(text("INSERT INTO seen VALUES (:r, :s)"), {"r": second.run_id, "s": 2})
        uow.runs.record_position("reader", second.position)
        raise RuntimeError("the host fails before its commit")
    assert store.follower_position("reader") == first.position  # neither was kept
    with db.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM seen")).scalar_one() == 1


# -- following -----------------------------------------------------------------------------


def _take(items: Iterator[FeedItem], count: int) -> list[FeedItem]:
    return [next(items) for _ in range(count)]


@pytest.mark.run_store_only
def test_follow_yields_what_is_there_then_each_new_commit(store):
    first = _started(store, "a")
    stop = threading.Event()
    items = store.follow(stop=stop, poll_s=0.01)
    assert _keys(_take(items, 2)) == [(first, 1), (first, 2)]
    appended = threading.Thread(
        target=store.transition, args=(first, "running"), kwargs={"operation_id": "run-a"}
    )
    appended.start()  # committed while the follower waits
    [third] = _take(items, 1)
    appended.join()
    assert (third.run_id, third.event.sequence, third.event.type) == (
        first,
        3,
        "state-transitioned",
    )
    stop.set()
    assert list(items) == []  # ends cleanly, nothing twice


@pytest.mark.run_store_only
def test_follow_resumes_from_a_followers_recorded_position(store):
    first = _started(store, "a")
    second = _started(store, "b")
    feed = store.read_feed()
    with store.unit_of_work() as uow:
        uow.runs.record_position("projector", feed[2].position)
    done = threading.Event()
    resumed = store.follow(follower="projector", stop=done)
    assert _take(resumed, 1) == [feed[3]]
    done.set()
    # a later `after` wins over an earlier recorded position
    assert _take(store.follow(follower="projector", after=feed[3].position), 0) == []
    only_first = store.follow(run_id=first, stop=lambda: False)
    assert _keys(_take(only_first, 2)) == [(first, 1), (first, 2)]
    assert second not in {item.run_id for item in store.read_feed(run_id=first)}


@pytest.mark.run_store_only
@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"poll_s": 0}, "invalid-poll-interval"),
        ({"poll_s": "1"}, "invalid-poll-interval"),
        ({"stop": 3}, "invalid-stop"),
        ({"after": -1}, "invalid-feed-position"),
        ({"follower": "a b"}, "invalid-follower"),
        ({"run_id": 4}, "invalid-run-id"),
    ],
)
def test_follow_refuses_bad_arguments_at_the_call(store, rejected, arguments, code):
    with rejected(InvalidInputError, code):
        store.follow(**arguments)  # at the call, before the first item is asked for


@pytest.mark.run_store_only
def test_a_late_commit_is_not_skipped(store, db: Engine):
    """PostgreSQL: a transaction that wrote its event first and commits last still comes
    out of the feed after what the follower already read, never behind it (a position
    taken when the event was written would be smaller than one the follower passed)."""
    if db.dialect.name != "postgresql":
        pytest.skip("SQLite's single writer cannot commit out of order")
    first, second = _started(store, "a"), _started(store, "b")
    seen = store.read_feed()
    late = store.unit_of_work()
    uow = late.__enter__()
    try:
        uow.runs.transition(first, "running", operation_id="late")  # written, not committed
        store.transition(second, "running", operation_id="early")  # commits first
        early = store.read_feed(after=seen[-1].position)
        assert _keys(early) == [(second, 3)]
    finally:
        late.__exit__(None, None, None)  # commits now
    after_early = store.read_feed(after=early[-1].position)
    assert _keys(after_early) == [(first, 3)]
    assert after_early[0].position > early[-1].position


@pytest.mark.run_store_only
def test_follow_survives_a_lost_connection(store, db: Engine):
    if db.dialect.name != "postgresql":
        pytest.skip("SQLite has no connection to lose")
    first = _started(store, "a")
    items = store.follow(stop=lambda: False, poll_s=0.05, follower="survivor")
    assert len(_take(items, 2)) == 2
    with db.connect() as connection:  # every other backend of this database: the listener
        killed = connection.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ).scalar_one()
    assert killed >= 1
    store.transition(first, "running", operation_id="after-the-loss")
    [next_item] = _take(items, 1)
    assert (next_item.run_id, next_item.event.sequence) == (first, 3)
    # its name went with the lost connection, and was taken again
    with pytest.raises(OperationConflictError, match="follower-in-use"):
        next(store.follow(follower="survivor", stop=lambda: False))
    items.close()


@pytest.mark.run_store_only
def test_async_follow_is_an_async_iterator(store_url: str, store):
    first = _started(store, "a")

    async def follow() -> list[tuple[str, int]]:
        async with AsyncRunStore(store_url, root_hash=ROOT_HASH) as async_store:
            stop = threading.Event()
            seen = []
            async with aclosing(async_store.follow(stop=stop, poll_s=0.01)) as items:
                async for item in items:
                    seen.append((item.run_id, item.event.sequence))
                    if len(seen) == 2:
                        await asyncio.to_thread(
                            store.transition, first, "running", operation_id="run-a"
                        )
                    if len(seen) == 3:
                        break
            assert await async_store.follower_position("nobody") == 0
            return seen

    assert asyncio.run(follow()) == [(first, 1), (first, 2), (first, 3)]


@pytest.mark.run_store_only
def test_imported_events_get_this_stores_positions(store, tmp_path):
    import io

    from cadence_store import export_store, import_store

    first = _started(store, "a")
    out = io.StringIO()
    export_store(store.engine, out)
    assert "feed_position" not in out.getvalue()  # a store's own, never exported
    other = f"sqlite:///{tmp_path}/other.sqlite3"
    import cadence_store

    cadence_store.upgrade(other)
    with RunStore(other, root_hash=ROOT_HASH) as destination:
        _started(destination, "b")
        import_store(destination.engine, io.StringIO(out.getvalue()))
        feed = destination.read_feed()
        assert [key for key in _keys(feed) if key[0] == first] == [(first, 1), (first, 2)]
        assert [item.position for item in feed] == [1, 2, 3, 4]


def test_an_imported_run_whose_times_decrease_comes_in_sequence_order(store, tmp_path):
    """A run imported with `recorded_at` going back in time (an export edited, a cadence
    1.x store's clock set back) is still given its events in sequence order."""
    import io
    import json

    import cadence_store
    from cadence_store import export_store, import_store

    other = f"sqlite:///{tmp_path}/source.sqlite3"
    cadence_store.upgrade(other)
    with RunStore(other, root_hash=ROOT_HASH) as source:
        run_id = _started(source, "a")
        source.transition(run_id, "running", operation_id="run-a")
        out = io.StringIO()
        export_store(source.engine, out)
    lines = []
    for line in out.getvalue().splitlines():
        record = json.loads(line)
        for event in record.get("events", []):
            event["recorded_at"] = 2_000_000_000_000 - event["sequence"]  # decreasing
        lines.append(json.dumps(record))
    import_store(store.engine, io.StringIO("\n".join(lines) + "\n"))
    earlier = _started(store, "b")  # a run of this store's own, numbered before or after
    feed = store.read_feed()
    assert _in_run_order(_keys(feed), run_id) == [1, 2, 3]
    assert _in_run_order(_keys(feed), earlier) == [1, 2]
    assert store.read_feed(run_id=run_id) == [item for item in feed if item.run_id == run_id]


def _first_of(items: Iterator[FeedItem]) -> FeedItem:
    return next(items)


@pytest.mark.run_store_only
def test_a_follower_name_is_held_by_one_follow_at_a_time(store):
    _started(store, "a")
    holding = store.follow(follower="projector", stop=threading.Event(), poll_s=0.01)
    assert _first_of(holding).event.sequence == 1
    second = store.follow(follower="projector", stop=threading.Event(), poll_s=0.01)
    with pytest.raises(OperationConflictError) as refused:
        next(second)  # the name is taken when the first item is asked for
    assert refused.value.code == "follower-in-use"
    other = store.follow(follower="mailer", stop=threading.Event(), poll_s=0.01)
    assert _first_of(other).event.sequence == 1  # another name is free
    other.close()
    holding.close()  # gives the name up at once
    again = store.follow(follower="projector", stop=threading.Event(), poll_s=0.01)
    assert _first_of(again).event.sequence == 1
    again.close()


@pytest.mark.run_store_only
@pytest.mark.parametrize("bind", ["url", "async-engine"])
def test_an_async_follower_name_is_held_by_one_follow_at_a_time(store_url, store, bind):
    """Both async followers: the sync one in a worker thread (a store made from a URL),
    and the one polling on the event loop (a host's `AsyncEngine`)."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from cadence_store.async_store import async_database_url

    _started(store, "a")

    async def follow_twice() -> str:
        engine = create_async_engine(async_database_url(store_url)) if bind != "url" else None
        async with AsyncRunStore(engine or store_url, root_hash=ROOT_HASH) as async_store:
            first = async_store.follow(follower="projector", stop=threading.Event(), poll_s=0.01)
            async with aclosing(first) as holding:
                assert (await anext(holding)).event.sequence == 1
                second = async_store.follow(follower="projector", poll_s=0.01)
                async with aclosing(second) as refused:
                    with pytest.raises(OperationConflictError) as info:
                        await anext(refused)
                # and the sync follower of the same name is refused too
                with pytest.raises(OperationConflictError):
                    next(store.follow(follower="projector", stop=threading.Event()))
            again = async_store.follow(follower="projector", poll_s=0.01)
            async with aclosing(again) as items:
                assert (await anext(items)).event.sequence == 1
        if engine is not None:
            await engine.dispose()
        return info.value.code

    assert asyncio.run(follow_twice()) == "follower-in-use"


@pytest.mark.run_store_only
@pytest.mark.parametrize("bind", ["url", "async-engine"])
def test_closing_an_async_follower_gives_its_name_up_before_it_returns(store_url, store, bind):
    """`aclose()` (or leaving `async with aclosing(...)`) releases the follower's name by
    the time it returns: the next follow of that name starts, every time."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from cadence_store.async_store import async_database_url

    _started(store, "a")

    async def follow_in_turn(turns: int) -> int:
        engine = create_async_engine(async_database_url(store_url)) if bind != "url" else None
        started = 0
        async with AsyncRunStore(engine or store_url, root_hash=ROOT_HASH) as async_store:
            for _ in range(turns):
                items = async_store.follow(follower="in-turn", poll_s=0.01)
                async with aclosing(items):
                    assert (await anext(items)).event.sequence == 1
                started += 1
        if engine is not None:
            await engine.dispose()
        return started

    assert asyncio.run(follow_in_turn(10)) == 10
