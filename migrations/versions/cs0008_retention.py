"""Retention: the leaves and the ids of archived runs.

Revision ID: cs0008_retention
Revises: cs0007_checkpoints
Create Date: 2026-12-07

`RunStore.archive` deletes finished runs once an archive file holds them. `kept_leaves`
keeps each deleted event's tree leaf (its feed position, run id, sequence and event
hash), so the tree keeps every leaf; `archived_runs` and `archived_operations` keep each
archived run's ids, so a call naming one answers `run-archived`. All three start empty;
no existing table or row is touched. The downgrade refuses a store that archived runs
(their leaves would leave gaps in the feed the tree could no longer read).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "cs0008_retention"
down_revision: str | Sequence[str] | None = "cs0007_checkpoints"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INT64 = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "kept_leaves",
        sa.Column("feed_position", INT64, autoincrement=False, nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("sequence", INT64, nullable=False),
        sa.Column("event_hash", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("feed_position", name="pk_kept_leaves"),
        sqlite_strict=True,
    )
    op.create_table(
        "archived_runs",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("root_hash", sa.Text(), nullable=False),
        sa.Column("stage", sa.Text(), nullable=False),
        sa.Column("lookup_key", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("archived_at", INT64, nullable=False),
        sa.Column("last_event_at", INT64, nullable=True),
        sa.Column("event_count", INT64, nullable=False),
        sa.Column("event_hash", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name="pk_archived_runs"),
        sqlite_strict=True,
    )
    op.create_index(
        "ix_archived_runs_root_hash_stage_lookup_key",
        "archived_runs",
        ["root_hash", "stage", "lookup_key"],
    )
    op.create_table(
        "archived_operations",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("operation_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "operation_id", name="pk_archived_operations"),
        sqlite_strict=True,
    )
    op.create_index("ix_archived_operations_operation_id", "archived_operations", ["operation_id"])


def downgrade() -> None:
    kept = op.get_bind().execute(sa.text("SELECT COUNT(*) FROM kept_leaves")).scalar()
    if kept:
        raise RuntimeError(
            f"the store archived runs ({kept} kept leaves): a downgrade below "
            "cs0008_retention would leave gaps in the feed; restore the archives first"
        )
    op.drop_index("ix_archived_operations_operation_id", table_name="archived_operations")
    op.drop_table("archived_operations")
    op.drop_index("ix_archived_runs_root_hash_stage_lookup_key", table_name="archived_runs")
    op.drop_table("archived_runs")
    op.drop_table("kept_leaves")
