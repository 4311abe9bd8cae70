"""Issue 26, the smaller breaks:

- a pause code holding a lone surrogate is either refused up front (a coded error,
  nothing written) or accepted and then shown by ``cadence-store runs`` and ``show``
  (text and JSON) without a crash;
- SQLite URL query values that do not parse (``?timeout=abc``) are a coded
  `CadenceStoreError`, never a raw ``ValueError``, whichever way the URL comes in;
- a host `Engine`'s ``before_cursor_execute`` listeners see the statements the store runs
  on that engine (its writes and reads), as they see the host's own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, create_engine, event
from support import ROOT_HASH, FakeClock, table_snapshot

import cadence_store
from cadence_store import AsyncRunStore, CadenceStoreError, RunStore
from cadence_store.cli import main

# ---------------------------------------------------------------------------------------
# a lone surrogate in a pause code
# ---------------------------------------------------------------------------------------

LONE_SURROGATE_CODE = "wait-\ud800-here"


def _cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=True)


def test_a_pause_code_with_a_lone_surrogate_is_refused_or_shown(
    store_url: str, run_store: RunStore, db: Engine
) -> None:
    run = run_store.start_run("abel-implement", change="surrogate", operation_id="s1")
    before = table_snapshot(db)
    try:
        run_store.transition(run.run_id, "paused", operation_id="t1", code=LONE_SURROGATE_CODE)
    except CadenceStoreError as refused:  # refused up front: coded, nothing written
        assert isinstance(refused.code, str) and refused.code, refused
        assert table_snapshot(db) == before
        return
    for args in (
        ("runs", "--url", store_url),
        ("runs", "--url", store_url, "--json"),
        ("show", run.run_id, "--url", store_url),
        ("show", run.run_id, "--url", store_url, "--json"),
    ):
        result = _cli(*args)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            args,
            repr(result.exception),
        )
        assert result.exit_code == 0, (args, result.output[-500:])
        assert run.run_id in result.output, args
    shown = json.loads(_cli("show", run.run_id, "--url", store_url, "--json").output)
    assert isinstance(shown, dict)


# ---------------------------------------------------------------------------------------
# SQLite URL query values
# ---------------------------------------------------------------------------------------

BAD_QUERIES = ["timeout=abc", "check_same_thread=maybe", "cached_statements=x", "uri=maybe"]


def _open_and_read(url: str) -> None:
    with RunStore(url, root_hash=ROOT_HASH) as store:
        store.run_ids()


def _open_and_read_async(url: str) -> None:
    async def read() -> None:
        store = AsyncRunStore(url.replace("sqlite:", "sqlite+aiosqlite:", 1), root_hash=ROOT_HASH)
        try:
            await store.run_ids()
        finally:
            await store.aclose()

    asyncio.run(read())


ENTRIES: dict[str, Callable[[str], object]] = {
    "RunStore": _open_and_read,
    "AsyncRunStore": _open_and_read_async,
    "upgrade": cadence_store.upgrade,
}


@pytest.mark.parametrize("entry", list(ENTRIES))
@pytest.mark.parametrize("query", BAD_QUERIES)
def test_a_sqlite_url_query_value_that_does_not_parse_is_coded(
    tmp_path: Path, query: str, entry: str
) -> None:
    path = tmp_path / "store.sqlite3"
    cadence_store.upgrade(f"sqlite:///{path}")
    url = f"sqlite:///{path}?{query}"
    with pytest.raises(CadenceStoreError) as info:
        ENTRIES[entry](url)
    assert isinstance(info.value.code, str) and info.value.code, info.value


def test_the_cli_reports_a_sqlite_url_query_value_that_does_not_parse(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    cadence_store.upgrade(f"sqlite:///{path}")
    result = _cli("runs", "--url", f"sqlite:///{path}?timeout=abc")
    assert result.exit_code not in (0, None)
    assert not isinstance(result.exception, ValueError), repr(result.exception)


# ---------------------------------------------------------------------------------------
# a host engine's cursor listeners
# ---------------------------------------------------------------------------------------


@pytest.fixture
def listened_engine(store_url: str) -> Iterator[tuple[Engine, list[str]]]:
    engine = create_engine(store_url)
    seen: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _record(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        seen.append(statement)

    try:
        yield engine, seen
    finally:
        engine.dispose()


def _touches(statements: list[str], verb: str, table: str) -> bool:
    return any(verb in s.upper() and table in s.lower() for s in statements)


def test_a_host_engine_listener_sees_the_store_statements(
    listened_engine: tuple[Engine, list[str]], clock: FakeClock
) -> None:
    engine, seen = listened_engine
    with RunStore(engine, root_hash=ROOT_HASH, clock=clock) as store:
        run = store.start_run("abel-implement", change="listened", operation_id="s1")
        calls: list[tuple[str, Callable[[], object], str, str]] = [
            (
                "transition",
                lambda: store.transition(run.run_id, "paused", operation_id="t1"),
                "UPDATE",
                "runs",
            ),
            (
                "bind_delivery",
                lambda: store.bind_delivery(run.run_id, "gate-a", 1, "a" * 64, operation_id="b1"),
                "INSERT",
                "events",
            ),
            ("acquire_lease", lambda: store.acquire_lease(run.run_id, "apply", 60_000), "", "op"),
            ("status", lambda: store.status(run.run_id), "SELECT", "runs"),
            ("list_events", lambda: store.list_events(run.run_id), "SELECT", "events"),
        ]
        unseen = []
        for name, call, verb, table in calls:
            seen.clear()
            call()
            if not _touches(seen, verb, table):
                unseen.append(name)
    assert not unseen, f"the host's before_cursor_execute listener never saw: {unseen}"


def test_a_host_engine_listener_sees_the_statements_of_a_unit_of_work(
    listened_engine: tuple[Engine, list[str]], clock: FakeClock
) -> None:
    engine, seen = listened_engine
    with RunStore(engine, root_hash=ROOT_HASH, clock=clock) as store:
        run = store.start_run("abel-implement", change="listened-uow", operation_id="s1")
        seen.clear()
        with store.unit_of_work() as uow:
            uow.runs.transition(run.run_id, "paused", operation_id="t1")
    assert _touches(seen, "UPDATE", "runs") or _touches(seen, "INSERT", "events"), seen
