"""Revision cs0007_checkpoints: the tree's tiles and the recorded checkpoints, two new
owned tables on both engines; a downgrade drops them and leaves every other row as it
was, and an upgrade after it starts the tree again from the events."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect
from support import ROOT_HASH, FakeClock, table_snapshot

import cadence_store
from cadence_store import RunStore, SchemaOutOfDateError, generate_signer_key
from cadence_store.storage.schema import downgrade, head_revision

BEFORE = "cs0006_event_hash_unique"
KEY = generate_signer_key("example.com/migrated")
NEW_TABLES = {"tree_tiles", "checkpoints"}


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_the_revision_adds_the_tables_and_its_downgrade_drops_them(database_url: str) -> None:
    assert head_revision() != BEFORE
    assert cadence_store.upgrade(database_url, BEFORE) == BEFORE
    assert not NEW_TABLES & _tables(database_url)
    with pytest.raises(SchemaOutOfDateError):
        RunStore(database_url, root_hash=ROOT_HASH).close()
    assert cadence_store.upgrade(database_url) == head_revision()
    assert _tables(database_url) >= NEW_TABLES
    with RunStore(database_url, root_hash=ROOT_HASH, clock=FakeClock()) as store:
        run = store.start_run("abel-implement", change="migrated", operation_id="s-1")
        first = store.checkpoint(KEY)
    engine = create_engine(database_url)
    try:
        journal = {
            name: rows for name, rows in table_snapshot(engine).items() if name not in NEW_TABLES
        }
    finally:
        engine.dispose()
    assert downgrade(database_url, BEFORE) == BEFORE
    assert not NEW_TABLES & _tables(database_url)
    assert cadence_store.upgrade(database_url) == head_revision()
    engine = create_engine(database_url)
    try:
        after = table_snapshot(engine)
    finally:
        engine.dispose()
    assert {name: rows for name, rows in after.items() if name not in NEW_TABLES} == journal
    assert after["tree_tiles"] == [] and after["checkpoints"] == []
    with RunStore(database_url, root_hash=ROOT_HASH, clock=FakeClock()) as store:
        again = store.checkpoint(KEY)  # the tree rebuilt from the events: the same head
        assert (again.size, again.root_hash) == (first.size, first.root_hash)
        assert store.verify_checkpoint(first.note, KEY.verifier()).tree_size == 1
        assert store.inclusion_proof(run.run_id).tree_size == 1
