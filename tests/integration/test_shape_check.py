"""Issue 10: a store at head whose owned tables drifted is refused at open.

A dropped column, a dropped own index or a dropped owned table is refused by `RunStore`,
by a `UnitOfWork` entered on the engine and by `RunRepository` in a host `Session` (its
first call) with `StoreFormatError` `run-store-reset-required`, naming the difference; on
SQLite the file stays byte for byte as it was. Adopted cadence 1.x stores pass the check;
a host's extra nullable column on a cadence table is accepted, an extra NOT NULL column
without a default is not (an insert that does not name it would fail).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, make_url, text
from sqlalchemy.orm import Session
from support import ROOT_HASH, FakeClock

import cadence_store
from cadence_store import RunRepository, RunStore, StoreFormatError, UnitOfWork

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cadence-1x"
ADOPTABLE = ["current.sqlite3", "legacy-v4.sqlite3", "legacy-v2.sqlite3"]

# damage -> (statement, words the refusal must name)
DRIFTS = {
    "dropped-column": (
        "ALTER TABLE runs DROP COLUMN provisional_key",
        "runs.provisional_key is missing",
    ),
    "dropped-index": (
        "DROP INDEX ix_operations_operation_id",
        "operations: index on ['operation_id'] is missing",
    ),
    "dropped-table": ("DROP TABLE delivery_bindings", "table delivery_bindings is missing"),
}


def _open_store(url: str) -> None:
    RunStore(url, root_hash=ROOT_HASH, clock=FakeClock()).close()


def _enter_unit_of_work(url: str) -> None:
    engine = create_engine(url)
    try:
        with UnitOfWork(engine, root_hash=ROOT_HASH, clock=FakeClock()):
            pass
    finally:
        engine.dispose()


def _first_repository_call(url: str) -> None:
    engine = create_engine(url)
    try:
        with Session(engine) as session, session.begin():
            RunRepository(session, root_hash=ROOT_HASH, clock=FakeClock()).run_ids()
    finally:
        engine.dispose()


ENTRY_POINTS: dict[str, Callable[[str], None]] = {
    "store": _open_store,
    "uow": _enter_unit_of_work,
    "repository": _first_repository_call,
}


def _execute(url: str, *statements: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.execute(text(statement))
    finally:
        engine.dispose()


def _fingerprint(url: str) -> str | None:
    """sha256 of a SQLite file and its -wal (None on PostgreSQL)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    digest = hashlib.sha256()
    for suffix in ("", "-wal"):
        path = Path(f"{parsed.database}{suffix}")
        if path.exists():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def at_head(database_url: str) -> Iterator[str]:
    cadence_store.upgrade(database_url)
    yield database_url


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("drift", list(DRIFTS))
def test_a_drifted_store_is_refused_at_open_and_left_as_it_was(
    at_head: str, drift: str, entry: str
) -> None:
    statement, named = DRIFTS[drift]
    _execute(at_head, statement)
    before = _fingerprint(at_head)

    with pytest.raises(StoreFormatError) as info:
        ENTRY_POINTS[entry](at_head)

    assert info.value.code == "run-store-reset-required"
    assert named in str(info.value), str(info.value)
    assert _fingerprint(at_head) == before


def test_a_store_at_head_passes_by_every_entry_point(at_head: str) -> None:
    for open_it in ENTRY_POINTS.values():
        open_it(at_head)


@pytest.mark.parametrize("fixture", ADOPTABLE)
def test_adopted_cadence_1x_stores_pass_the_check(tmp_path: Path, fixture: str) -> None:
    path = tmp_path / fixture
    shutil.copyfile(FIXTURES / fixture, path)
    url = f"sqlite:///{path}"
    cadence_store.upgrade(url)
    for open_it in ENTRY_POINTS.values():
        open_it(url)
    with RunStore(url, root_hash=ROOT_HASH, clock=FakeClock()) as store:
        run_ids = store.run_ids()
        assert run_ids
        for run_id in run_ids:
            store.verify_integrity(run_id)


def test_an_extra_nullable_column_on_a_cadence_table_is_accepted(at_head: str) -> None:
    _execute(at_head, "ALTER TABLE runs ADD COLUMN host_note TEXT")
    with RunStore(at_head, root_hash=ROOT_HASH, clock=FakeClock()) as store:
        run = store.start_run("abel-design", provisional_key="b" * 64, operation_id="s1")
        assert store.verify_integrity(run.run_id).run_id == run.run_id
    _first_repository_call(at_head)
    _enter_unit_of_work(at_head)


def _add_required_column(url: str) -> None:
    """An extra NOT NULL column without a default on `runs`.

    SQLite's ALTER TABLE cannot add one (it needs a default for the existing rows), so
    the table's recorded definition is edited, as a hand-made or rebuilt table would be.
    """
    if make_url(url).get_backend_name() != "sqlite":
        _execute(url, "ALTER TABLE runs ADD COLUMN host_flag INTEGER NOT NULL")
        return
    _execute(
        url,
        "ALTER TABLE runs ADD COLUMN host_flag INTEGER NOT NULL DEFAULT 0",
        "PRAGMA writable_schema = ON",
        "UPDATE sqlite_master SET sql = replace(sql, 'host_flag INTEGER NOT NULL DEFAULT 0', "
        "'host_flag INTEGER NOT NULL') WHERE type = 'table' AND name = 'runs'",
        "PRAGMA writable_schema = OFF",
    )


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_an_extra_not_null_column_without_default_is_refused(at_head: str, entry: str) -> None:
    _add_required_column(at_head)
    before = _fingerprint(at_head)

    with pytest.raises(StoreFormatError) as info:
        ENTRY_POINTS[entry](at_head)

    assert info.value.code == "run-store-reset-required"
    assert "runs.host_flag is an extra NOT NULL column without a default" in str(info.value)
    assert _fingerprint(at_head) == before


def test_the_check_reads_the_catalogue_once_per_engine(at_head: str) -> None:
    """Checked when an engine is first used; a drift after that is the boundary's to report."""
    engine: Engine = create_engine(at_head)
    try:
        RunStore(engine, root_hash=ROOT_HASH, clock=FakeClock()).close()
        _execute(at_head, DRIFTS["dropped-index"][0])
        RunStore(engine, root_hash=ROOT_HASH, clock=FakeClock()).close()  # cached: not re-read
    finally:
        engine.dispose()
    with pytest.raises(StoreFormatError):
        _open_store(at_head)  # a new engine reads it again
