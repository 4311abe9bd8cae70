"""What a unit of work whose block caught a journal error may end with (issue 26).

Exactly one of two outcomes is allowed:

- the block exits without an error and everything it was told happened is committed
  (the journal calls that returned, the host rows it added), or
- the unit of work raises a coded `CadenceStoreError` and nothing of it is committed.

Success with writes missing — PostgreSQL's silently rolled-back COMMIT after an aborted
statement, SQLite's automatic rollback followed by a new transaction — is the bug.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Engine, create_engine
from support import Snapshot, table_snapshot

from cadence_store import CadenceStoreError

# The code a unit of work raises when it refuses to commit because one of its statements
# failed and the engine aborted or rolled back its transaction. Not pinned until the fix
# exists: while empty, any stable code is accepted; the lead pins it here, in one place.
TRANSACTION_ABORTED_CODES: frozenset[str] = frozenset()

HOST = sa.MetaData()
HOST_OUTBOX = sa.Table(
    "host_outbox",
    HOST,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("message", sa.Text, nullable=False),
)


def create_host_outbox(engine: Engine) -> None:
    HOST.create_all(engine)


@contextmanager
def outbox_engine(url: str) -> Iterator[Engine]:
    """A plain engine on `url` (for checking rows), with the host outbox table created."""
    engine = create_engine(url, pool_size=1, max_overflow=3)
    create_host_outbox(engine)
    try:
        yield engine
    finally:
        engine.dispose()


def host_outbox_ids(engine: Engine) -> list[int]:
    with engine.connect() as connection:
        return list(
            connection.execute(sa.select(HOST_OUTBOX.c.id).order_by(HOST_OUTBOX.c.id)).scalars()
        )


def outbox_row(row_id: int) -> dict[str, Any]:
    return {"id": row_id, "message": f"sent-{row_id}"}


def assert_refused_commit(error: BaseException) -> None:
    """A unit of work that would not commit says so with a coded error."""
    assert isinstance(error, CadenceStoreError), f"raw exception: {error!r}"
    assert isinstance(error.code, str) and error.code, error
    if TRANSACTION_ABORTED_CODES:
        assert error.code in TRANSACTION_ABORTED_CODES, error


@dataclass
class Acknowledged:
    """What a block was told happened: journal calls that returned, host rows added.

    `journal`: run id -> the sequence the last returned call reported;
    `operations`: (run id, operation id) pairs whose call returned.
    """

    journal: dict[str, int] = field(default_factory=dict)
    operations: list[tuple[str, str]] = field(default_factory=list)
    host_rows: list[int] = field(default_factory=list)

    def call(self, run_id: str, operation_id: str, sequence: int) -> None:
        self.journal[run_id] = sequence
        self.operations.append((run_id, operation_id))


@dataclass
class Outcome:
    error: BaseException | None = None


@contextmanager
def one_of_two_outcomes(
    db: Engine,
    sequence_of: Callable[[str], int],
    receipt_of: Callable[[str, str], Any],
    acknowledged: Acknowledged,
) -> Iterator[Outcome]:
    """Wraps a unit of work: afterwards it committed all it acknowledged, or it raised a
    coded error and the owned tables and the host outbox are exactly as before."""
    before: Snapshot = table_snapshot(db)
    host_before = host_outbox_ids(db)
    outcome = Outcome()
    try:
        yield outcome
    except Exception as error:  # the unit of work refused: it must be coded, and clean
        outcome.error = error
    if outcome.error is not None:
        assert_refused_commit(outcome.error)
        assert table_snapshot(db) == before, (
            f"the unit of work raised {outcome.error!r} but kept part of its journal rows"
        )
        assert host_outbox_ids(db) == host_before, (
            f"the unit of work raised {outcome.error!r} but kept host rows"
        )
        return
    missing: list[str] = []
    for run_id, sequence in acknowledged.journal.items():
        stored = sequence_of(run_id)
        if stored != sequence:
            missing.append(f"run {run_id} at sequence {stored}, acknowledged {sequence}")
    for run_id, operation_id in acknowledged.operations:
        if receipt_of(run_id, operation_id) is None:
            missing.append(f"no receipt for {operation_id} of run {run_id}")
    kept = set(host_outbox_ids(db))
    for row_id in acknowledged.host_rows:
        if row_id not in kept:
            missing.append(f"host row {row_id} missing")
    extra = kept - set(host_before) - set(acknowledged.host_rows)
    if extra:
        missing.append(f"host rows {sorted(extra)} stored that were never added")
    assert not missing, "the unit of work exited without an error but lost writes: " + (
        "; ".join(missing)
    )
