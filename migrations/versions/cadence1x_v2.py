"""cadence 1.x run schema v2: runs, delivery_bindings (no approval proof), events, operations.

Revision ID: cadence1x_v2
Revises:
Create Date: 2026-11-29

The table definitions are frozen here as cadence 1.x v2 declared them; they never import
the live models. cadence 1.x stores at v2 are stamped at this revision when adopted.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "cadence1x_v2"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("cadence_store",)
depends_on: str | Sequence[str] | None = None

INT64 = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _run_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["run_id"], ["runs.run_id"], ondelete="CASCADE", name=f"fk_{table}_run_id_runs"
    )


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("run_id", sa.Text(), nullable=True),
        sa.Column("root_hash", sa.Text(), nullable=False),
        sa.Column("stage", sa.Text(), nullable=False),
        sa.Column("lookup_key", sa.Text(), nullable=False),
        sa.Column("change_name", sa.Text(), nullable=True),
        sa.Column("provisional_key", sa.Text(), nullable=True),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("sequence", INT64, nullable=False),
        sa.Column("event_hash", sa.Text(), nullable=False),
        sa.Column("delivery_revision", INT64, nullable=True),
        sa.Column("projection_json", sa.Text(), nullable=False),
        sa.Column("terminal_tombstone", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("run_id", name="pk_runs"),
        sa.UniqueConstraint(
            "root_hash", "stage", "lookup_key", name="uq_runs_root_hash_stage_lookup_key"
        ),
        sqlite_strict=True,
    )
    op.create_table(
        "delivery_bindings",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("gate", sa.Text(), nullable=False),
        sa.Column("revision", INT64, nullable=False),
        sa.Column("receipt_hash", sa.Text(), nullable=False),
        sa.Column("operation_id", sa.Text(), nullable=False),
        _run_fk("delivery_bindings"),
        sa.PrimaryKeyConstraint("run_id", "gate", "revision", name="pk_delivery_bindings"),
        sa.UniqueConstraint(
            "run_id", "operation_id", name="uq_delivery_bindings_run_id_operation_id"
        ),
        sqlite_strict=True,
    )
    op.create_table(
        "events",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("sequence", INT64, nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("payload_json", sa.Text(), nullable=False),
        sa.Column("prior_hash", sa.Text(), nullable=False),
        sa.Column("event_hash", sa.Text(), nullable=False),
        _run_fk("events"),
        sa.PrimaryKeyConstraint("run_id", "sequence", name="pk_events"),
        sa.UniqueConstraint("run_id", "event_hash", name="uq_events_run_id_event_hash"),
        sqlite_strict=True,
    )
    op.create_table(
        "operations",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("operation_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("outcome_json", sa.Text(), nullable=True),
        sa.Column("lease_token", sa.Text(), nullable=True),
        sa.Column("lease_expires_at", INT64, nullable=True),
        _run_fk("operations"),
        sa.PrimaryKeyConstraint("run_id", "operation_id", name="pk_operations"),
        sqlite_strict=True,
    )


def downgrade() -> None:
    for table in ("operations", "events", "delivery_bindings", "runs"):
        op.drop_table(table)
    # the fences a later revision's downgrade kept (cs0002_lease_fence): no lease is left
    op.execute("DROP TABLE IF EXISTS cadence_store_lease_fences")
