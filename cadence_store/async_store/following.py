"""`AsyncRunStore.follow`: the journal feed as an async iterator.

- On a store given a URL (its sync calls run in worker threads), the sync follower
  (`RunStore.follow`, LISTEN/NOTIFY or `PRAGMA data_version`) runs in a worker thread
  and hands its items over one at a time: nothing is read ahead of the consumer.
- On a host's `AsyncEngine` (calls run in SQLAlchemy's asyncio greenlet, which a thread
  cannot enter), it reads the feed every `poll_s` on the event loop instead.

Leaving the loop or cancelling it stops the follower; `async with aclosing(...)` (or
`break` inside an `async for` of a task that ends) closes it at once.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from contextlib import aclosing
from typing import Any, Final, TypeVar

from ..errors import CadenceStoreError
from ..journal.feed import FeedItem
from ..repository.feed import feed_item
from ..storage.follower_names import FollowerNameHold
from ..storage.rows import FeedRow
from ..store.following import FEED_BATCH, Stop, read_feed_rows, start_position, stop_check
from ..store.run_store import RunStore

T = TypeVar("T")
_END: Final = object()


async def follow_async(
    store: RunStore,
    *,
    after: int,
    run_id: str | None,
    follower: str | None,
    poll_s: float,
    stop: Stop,
    threaded: bool,
    run: Callable[[Callable[[], Any]], Awaitable[Any]],
) -> AsyncGenerator[FeedItem, None]:
    """The items of `store.follow(...)` (see the module's docstring); `run` runs a sync
    call the way the async store runs its calls."""
    stopping = threading.Event()
    stopped_by_caller = stop_check(stop)

    def stopped() -> bool:
        return stopping.is_set() or stopped_by_caller()

    items: Iterator[FeedItem] = await run(
        lambda: store.follow(
            after=after, run_id=run_id, follower=follower, poll_s=poll_s, stop=stopped
        )
    )
    if not threaded:
        close = getattr(items, "close", None)
        if close is not None:
            close()  # it only checked the arguments; read on the loop instead
        position = await run(lambda: start_position(store.transactions, after, follower))
        name = (
            None if follower is None else FollowerNameHold(store.transactions.base_engine, follower)
        )
        try:
            if name is not None:
                await run(name.take)  # `follower-in-use` while another follow holds it
            polled = _polled(store, position, run_id, poll_s, stopped, run, name)
            async with aclosing(polled) as polled_items:
                async for item in polled_items:
                    yield item
        finally:
            if name is not None:
                await run(name.release)
        return
    pending: asyncio.Future[Any] | None = None
    try:
        while True:
            pending = asyncio.ensure_future(asyncio.to_thread(next, items, _END))
            item = await asyncio.shield(pending)  # a cancellation leaves the thread be
            pending = None
            if item is _END:
                return
            yield item
    finally:
        stopping.set()  # the thread's wait ends within poll_s
        if pending is not None:
            await asyncio.wait([pending])
        await asyncio.to_thread(_close, items)


def _close(items: Iterator[FeedItem]) -> None:
    close = getattr(items, "close", None)
    if close is not None:
        close()


async def _polled(
    store: RunStore,
    position: int,
    run_id: str | None,
    poll_s: float,
    stopped: Callable[[], bool],
    run: Callable[[Callable[[], Any]], Awaitable[Any]],
    name: FollowerNameHold | None,
) -> AsyncGenerator[FeedItem, None]:
    lost = False
    while not stopped():
        try:
            if lost and name is not None:
                await run(name.reaffirm)  # a lost connection may have taken the name with it
            batch: list[FeedRow] = await run(
                functools.partial(
                    read_feed_rows,
                    store.transactions,
                    after=position,
                    limit=FEED_BATCH,
                    run_id=run_id,
                )
            )
        except CadenceStoreError as error:
            if not error.retryable:
                raise
            lost = True
            await asyncio.sleep(poll_s)
            continue
        lost = False
        for row in batch:  # each made as it is yielded, as the sync follower does
            item = feed_item(row)
            yield item
            position = item.position
            if stopped():
                return
        if len(batch) < FEED_BATCH:
            await asyncio.sleep(poll_s)
