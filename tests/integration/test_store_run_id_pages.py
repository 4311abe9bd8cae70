"""`run_ids(after=, limit=)`: keyset pages of the run ids, through `RunStore`, a unit of
work, a `RunRepository` in a host transaction and `AsyncRunStore` (the suite's entry
points), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from cadence_store import InvalidInputError

RUNS = 7


def _start(store, count=RUNS):
    for number in range(count):
        store.start_run("abel-implement", change=f"change-{number}", operation_id=f"s{number}")
    return store.run_ids()


def test_pages_walk_every_run_id_once_in_order(store):
    every = _start(store)
    assert len(every) == RUNS and every == sorted(every)  # sorted as the engine sorts
    for limit in (1, 2, 3, RUNS, RUNS + 5):
        walked, pages, after = [], [], None
        while True:
            page = store.run_ids(after=after, limit=limit)
            pages.append(page)
            walked += page
            if len(page) < limit:
                break
            after = page[-1]
        assert walked == every
        assert all(len(page) == limit for page in pages[:-1])
        assert len(pages[-1]) < limit


def test_after_alone_and_limit_alone(store):
    every = _start(store)
    assert store.run_ids(after=every[2]) == every[3:]
    assert store.run_ids(limit=3) == every[:3]
    assert store.run_ids(after=every[1], limit=2) == every[2:4]
    assert store.run_ids(after=None, limit=None) == every
    # a cursor that is no run's id: the ids that sort after it
    assert store.run_ids(after="") == every
    assert store.run_ids(after=every[0] + "~") == every[1:]


def test_a_cursor_past_the_end_gives_an_empty_page(store):
    every = _start(store)
    assert store.run_ids(after=every[-1]) == []
    assert store.run_ids(after=every[-1], limit=5) == []


def test_an_empty_store_has_no_pages(store):
    assert store.run_ids(limit=10) == []
    assert store.run_ids(after="anything") == []


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"limit": 0}, "invalid-limit"),
        ({"limit": -3}, "invalid-limit"),
        ({"limit": True}, "invalid-limit"),
        ({"limit": 2.0}, "invalid-limit"),
        ({"limit": "10"}, "invalid-limit"),
        ({"limit": 2**60}, "invalid-limit"),
        ({"after": 12}, "invalid-run-cursor"),
        ({"after": "run\x00id"}, "invalid-run-cursor"),
        ({"after": b"run"}, "invalid-run-cursor"),
    ],
)
def test_bad_arguments_are_refused_as_list_runs_refuses_them(store, rejected, arguments, code):
    _start(store, 2)
    with rejected(InvalidInputError, code):
        store.run_ids(**arguments)
    with rejected(InvalidInputError, code):
        store.list_runs(**arguments)  # the same rule, the same code
