"""SQLAlchemy 2.x declarative models of the tables cadence-store owns.

Column names, keys and foreign keys are cadence 1.x's exactly (a cadence 1.x store is
adopted as is, and a fresh store stays readable by cadence 1.x). On SQLite the tables are
STRICT and `runs.run_id` is declared without NOT NULL, as cadence 1.x declared it; other
engines get BIGINT for every integer (millisecond timestamps, revisions, sequences).

These models are the single source of truth the migrations must match
(`tests/integration/test_migrations.py` proves there is no drift).
"""

from __future__ import annotations

from typing import Final, cast

from sqlalchemy import (
    BigInteger,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy import (
    column as sql_column,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION: Final = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# INTEGER on SQLite (STRICT accepts no BIGINT), BIGINT elsewhere.
Int64 = BigInteger().with_variant(Integer(), "sqlite")

STRICT: Final = {"sqlite_strict": True}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    # a column's type is its annotation's: every `str` TEXT, every `int` an `Int64`
    type_annotation_map = {str: Text, int: Int64, bytes: LargeBinary}


def _run_fk() -> ForeignKey:
    return ForeignKey("runs.run_id", ondelete="CASCADE")


def _rows_with(column: str) -> Index:
    """An index of the rows that have a `column` (partial, on both engines)."""
    present = sql_column(column).is_not(None)
    return Index(None, column, sqlite_where=present, postgresql_where=present)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("root_hash", "stage", "lookup_key"),
        # revision cs0009: each filter of `list_runs` finds its runs in run id order
        Index(None, "state", "run_id"),
        Index(None, "stage", "run_id"),
        Index(None, "root_hash", "run_id"),
        _rows_with("change_name"),
        STRICT,
    )

    # cadence 1.x declared `run_id TEXT PRIMARY KEY` (no NOT NULL); the frozen migration
    # keeps that DDL, and every engine reflects a primary key as NOT NULL, as here.
    run_id: Mapped[str] = mapped_column(primary_key=True)
    root_hash: Mapped[str]
    stage: Mapped[str]
    lookup_key: Mapped[str]
    change_name: Mapped[str | None]
    provisional_key: Mapped[str | None]
    state: Mapped[str]
    sequence: Mapped[int]
    event_hash: Mapped[str]
    delivery_revision: Mapped[int | None]
    projection_json: Mapped[str]
    terminal_tombstone: Mapped[str | None]
    # cadence-store's own additions (revision cs0003): when the run was created and last
    # appended to, milliseconds by the store's clock; NULL for runs cadence 1.x wrote.
    # Never part of a hash or of projection_json.
    created_at: Mapped[int | None]
    updated_at: Mapped[int | None]


class DeliveryBindingRow(Base):
    __tablename__ = "delivery_bindings"
    __table_args__ = (
        PrimaryKeyConstraint("run_id", "gate", "revision"),
        UniqueConstraint("run_id", "operation_id"),
        STRICT,
    )

    run_id: Mapped[str] = mapped_column(_run_fk())
    gate: Mapped[str]
    revision: Mapped[int]
    receipt_hash: Mapped[str]
    operation_id: Mapped[str]
    approval_revision: Mapped[int | None]
    contract_hash: Mapped[str | None]
    record_hash: Mapped[str | None]


class EventRow(Base):
    __tablename__ = "events"
    __table_args__ = (
        PrimaryKeyConstraint("run_id", "sequence"),
        # no unique on (run_id, event_hash) since revision cs0006: cadence 1.x's, it was
        # read by nothing and written at a random leaf by every append
        STRICT,
    )

    run_id: Mapped[str] = mapped_column(_run_fk())
    sequence: Mapped[int]
    type: Mapped[str]
    payload_json: Mapped[str]
    prior_hash: Mapped[str]
    event_hash: Mapped[str]
    # cadence-store's own addition (revision cs0003): when the event was appended, by the
    # store's clock; NULL for events cadence 1.x wrote. Never part of the event's hash.
    recorded_at: Mapped[int | None]
    # cadence-store's own addition (revision cs0004): the event's place in the journal
    # feed (`RunStore.follow`); NULL on PostgreSQL until the event is numbered, after its
    # transaction commits (`feed_statements`). Never part of the event's hash.
    feed_position: Mapped[int | None] = mapped_column(index=True, unique=True)


class OperationRow(Base):
    __tablename__ = "operations"
    __table_args__ = (
        PrimaryKeyConstraint("run_id", "operation_id"),
        # cadence-store's own addition: start_run finds an operation id across runs
        # without scanning every receipt (cadence 1.x slowed down as runs accumulated).
        Index(None, "operation_id"),
        # and (revision cs0005): verification streams a run's receipts in chain order
        Index(None, "run_id", "sequence"),
        # and (revision cs0009): `recover_expired_leases` finds the live leases only
        _rows_with("lease_expires_at"),
        STRICT,
    )

    run_id: Mapped[str] = mapped_column(_run_fk())
    operation_id: Mapped[str]
    kind: Mapped[str]
    state: Mapped[str]
    outcome_json: Mapped[str | None]
    lease_token: Mapped[str | None]
    lease_expires_at: Mapped[int | None]
    # cadence-store's own addition: the number of the current or last grant of a lease
    # (grows with each grant; NULL for receipts)
    lease_fence: Mapped[int | None]
    # cadence-store's own addition (revision cs0005): the sequence a journal receipt's
    # projection names (NULL for leases, and for receipts cadence 1.x wrote since);
    # it only locates the receipt for verification, which compares its text
    sequence: Mapped[int | None]


class FollowerPositionRow(Base):
    """cadence-store's own table (revision cs0004): the feed position each follower
    applied last, written by `record_position` in the host's transaction."""

    __tablename__ = "follower_positions"
    __table_args__ = (STRICT,)

    follower: Mapped[str] = mapped_column(primary_key=True)
    position: Mapped[int]


class TreeTileRow(Base):
    """cadence-store's own table (revision cs0007): the transparency tree's stored hashes,
    as C2SP tlog-tiles lays them out. Tile `(tile_level, tile_index)` holds up to 256
    hashes of tree level `8 * tile_level`, nodes `256 * tile_index` on, concatenated
    (`width` of them: a right-edge tile is rewritten as it fills). Written by
    `RunStore.checkpoint` only, up to the newest recorded checkpoint's size."""

    __tablename__ = "tree_tiles"
    __table_args__ = (PrimaryKeyConstraint("tile_level", "tile_index"), STRICT)

    tile_level: Mapped[int]
    tile_index: Mapped[int]
    width: Mapped[int]
    hashes: Mapped[bytes]


class CheckpointRow(Base):
    """cadence-store's own table (revision cs0007): each signed checkpoint the store
    recorded, in the order it signed them (`checkpoint_id`)."""

    __tablename__ = "checkpoints"
    __table_args__ = (Index(None, "tree_size"), STRICT)

    checkpoint_id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    tree_size: Mapped[int]
    origin: Mapped[str]
    root_hash: Mapped[str]  # lowercase hex
    note: Mapped[str]
    recorded_at: Mapped[int]


class KeptLeafRow(Base):
    """cadence-store's own table (revision cs0008): the tree leaf of every event an archive
    deleted, so the feed keeps every position and every later checkpoint still covers
    the archived events (`RunStore.archive`)."""

    __tablename__ = "kept_leaves"
    __table_args__ = (STRICT,)

    feed_position: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    run_id: Mapped[str]
    sequence: Mapped[int]
    event_hash: Mapped[str]


class ArchivedRunRow(Base):
    """cadence-store's own table (revision cs0008): each run an archive deleted, so a call
    naming it answers `run-archived`, and a start under its lookup key is not taken for a
    fresh one. Times are milliseconds by the store's clock."""

    __tablename__ = "archived_runs"
    __table_args__ = (Index(None, "root_hash", "stage", "lookup_key"), STRICT)

    run_id: Mapped[str] = mapped_column(primary_key=True)
    root_hash: Mapped[str]
    stage: Mapped[str]
    lookup_key: Mapped[str]
    state: Mapped[str]
    archived_at: Mapped[int]
    last_event_at: Mapped[int | None]
    event_count: Mapped[int]
    event_hash: Mapped[str]  # the head of the run's chain


class ArchivedOperationRow(Base):
    """cadence-store's own table (revision cs0008): the operation ids of the archived
    runs, so that replaying one answers `run-archived` rather than a second effect."""

    __tablename__ = "archived_operations"
    __table_args__ = (
        PrimaryKeyConstraint("run_id", "operation_id"),
        Index(None, "operation_id"),
        STRICT,
    )

    run_id: Mapped[str]
    operation_id: Mapped[str]


metadata: Final = Base.metadata
# Core tables for the hot path (statements on the session's connection, no ORM state).
runs: Final = cast(Table, Run.__table__)
delivery_bindings: Final = cast(Table, DeliveryBindingRow.__table__)
events: Final = cast(Table, EventRow.__table__)
operations: Final = cast(Table, OperationRow.__table__)
follower_positions: Final = cast(Table, FollowerPositionRow.__table__)
tree_tiles: Final = cast(Table, TreeTileRow.__table__)
checkpoints: Final = cast(Table, CheckpointRow.__table__)
kept_leaves: Final = cast(Table, KeptLeafRow.__table__)
archived_runs: Final = cast(Table, ArchivedRunRow.__table__)
archived_operations: Final = cast(Table, ArchivedOperationRow.__table__)
# an event as it is read back (a chain's replay, the feed): `rows.EventRow`'s columns
EVENT_COLUMNS: Final = (
    events.c.sequence,
    events.c.type,
    events.c.payload_json,
    events.c.prior_hash,
    events.c.event_hash,
    events.c.recorded_at,
)

OWNED_TABLES: Final = frozenset(
    {
        "runs",
        "events",
        "operations",
        "delivery_bindings",
        "follower_positions",
        "tree_tiles",
        "checkpoints",
        "kept_leaves",
        "archived_runs",
        "archived_operations",
    }
)
