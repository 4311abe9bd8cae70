"""The host application's tests: only the plugin's fixtures (no conftest registers them)."""

from __future__ import annotations

import pytest
from orders_app import Order, create_tables, open_account, place_order
from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session

from cadence_store import CadenceStoreError, LeaseFencedError
from cadence_store.testing import assert_chain_intact


@pytest.fixture
def orders_url(cadence_store_url: str) -> str:
    create_tables(cadence_store_url)
    return cadence_store_url


def orders(url: str) -> list[tuple[int, str]]:
    engine = create_engine(url)
    try:
        with Session(engine) as session:
            return [(o.id, o.item) for o in session.scalars(select(Order).order_by(Order.id))]
    finally:
        engine.dispose()


def test_every_test_starts_with_an_empty_store(cadence_store):
    assert cadence_store.run_ids() == []
    open_account(cadence_store, "first-customer")
    assert len(cadence_store.run_ids()) == 1


def test_an_order_commits_with_its_journal_event(cadence_store, orders_url):
    assert cadence_store.run_ids() == []
    run_id = open_account(cadence_store, "ada")
    projection = place_order(cadence_store, run_id, 1, "tea")
    assert projection.sequence == 2
    assert orders(orders_url) == [(1, "tea")]
    assert_chain_intact(cadence_store)
    assert_chain_intact(cadence_store, run_id)


def test_a_failed_order_keeps_neither_row_nor_event(cadence_store, orders_url):
    run_id = open_account(cadence_store, "bob")
    place_order(cadence_store, run_id, 1, "tea")
    with pytest.raises(CadenceStoreError):  # the host's duplicate key, coded
        place_order(cadence_store, run_id, 1, "coffee")
    assert cadence_store.status(run_id).sequence == 2
    assert orders(orders_url) == [(1, "tea")]


def test_the_fake_clock_expires_leases(cadence_store, cadence_store_clock):
    run_id = open_account(cadence_store, "cy")
    lease = cadence_store.acquire_lease(run_id, "ship", ttl_ms=1_000)
    assert lease.expires_at == cadence_store_clock() + 1_000
    cadence_store_clock.advance(1_001)
    with pytest.raises(LeaseFencedError):
        cadence_store.transition(run_id, "paused", operation_id="late", lease=lease)


def test_tampering_in_raw_sql_is_named(cadence_store, cadence_store_url):
    run_id = open_account(cadence_store, "dee")
    place_order_free = cadence_store.transition(run_id, "paused", operation_id="pause")
    assert place_order_free.sequence == 2
    engine = create_engine(cadence_store_url)
    try:
        with engine.begin() as connection:  # the owned tables under their plain names
            connection.execute(
                text("UPDATE events SET payload_json = :p WHERE run_id = :r AND sequence = 2"),
                {"p": '{"from":"created","to":"ready"}', "r": run_id},
            )
    finally:
        engine.dispose()
    with pytest.raises(AssertionError, match=rf"run {run_id}: .* at sequence 2"):
        assert_chain_intact(cadence_store)
