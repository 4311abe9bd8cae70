"""The events table without `UNIQUE (run_id, event_hash)`.

Revision ID: cs0006_event_hash_unique
Revises: cs0005_receipt_sequence
Create Date: 2026-12-02

cadence 1.x kept a unique index on each event's hash within its run. Nothing reads
events by hash (a chain is read by its key, `(run_id, sequence)`, and verified link by
link), and a duplicate hash within a run needs a duplicate sequence first, which the key
refuses. The index was pure cost: its keys are hashes, so every append wrote a random
leaf of it, and the events of one transaction shared none of its pages (measured:
`benchmarks/page_writes.py`, 75 of the 124 pages a unit of work of 100 transitions
commits on SQLite).

SQLite cannot drop a table constraint, so its events table is rebuilt: the same columns,
key, foreign key and feed index, STRICT, every row copied with its rowid. The DDL is
frozen here (the table as this revision leaves it), for stores made by cadence-store and
for adopted cadence 1.x stores alike (whose constraints were unnamed). PostgreSQL drops
the constraint.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "cs0006_event_hash_unique"
down_revision: str | Sequence[str] | None = "cs0005_receipt_sequence"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CONSTRAINT = "uq_events_run_id_event_hash"
COLUMNS = "run_id, sequence, type, payload_json, prior_hash, event_hash, recorded_at, feed_position"
# the events table at this revision; {unique} is where the downgrade puts the constraint back
EVENTS_DDL = """CREATE TABLE events_rebuilt (
	run_id TEXT NOT NULL,
	sequence INTEGER NOT NULL,
	type TEXT NOT NULL,
	payload_json TEXT NOT NULL,
	prior_hash TEXT NOT NULL,
	event_hash TEXT NOT NULL,
	recorded_at INTEGER,
	feed_position INTEGER,
	CONSTRAINT pk_events PRIMARY KEY (run_id, sequence),
	CONSTRAINT fk_events_run_id_runs FOREIGN KEY(run_id)
		REFERENCES runs (run_id) ON DELETE CASCADE{unique}
) STRICT"""
WITH_UNIQUE = f",\n\tCONSTRAINT {CONSTRAINT} UNIQUE (run_id, event_hash)"


def _rebuild_sqlite_events(unique: str) -> None:
    """Replace SQLite's events table by one made from `EVENTS_DDL`, rows and rowids kept.
    No table refers to events, so dropping it cascades nothing."""
    op.execute(EVENTS_DDL.format(unique=unique))
    op.execute(
        f"INSERT INTO events_rebuilt (rowid, {COLUMNS}) SELECT rowid, {COLUMNS} FROM events"  # noqa: S608
    )
    op.execute("DROP TABLE events")
    op.execute("ALTER TABLE events_rebuilt RENAME TO events")
    op.execute("CREATE UNIQUE INDEX ix_events_feed_position ON events (feed_position)")


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        _rebuild_sqlite_events(unique="")
    else:
        op.drop_constraint(CONSTRAINT, "events", type_="unique")


def downgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        _rebuild_sqlite_events(unique=WITH_UNIQUE)
    else:
        op.create_unique_constraint(CONSTRAINT, "events", ["run_id", "event_hash"])
