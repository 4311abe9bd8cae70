"""When things happened: `events.recorded_at`, `runs.created_at`, `runs.updated_at`.

Revision ID: cs0003_timestamps
Revises: cs0002_lease_fence
Create Date: 2026-12-01

Milliseconds by the store's clock (the PostgreSQL server's where leases use it), set
inside the appending transaction. They are never part of an event's hash or of
`projection_json`, so a cadence 1.x store adopted and upgraded verifies exactly as before;
rows written before this revision (by cadence 1.x or an older cadence-store) keep NULL:
nobody knows when they happened, and the store does not guess.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "cs0003_timestamps"
down_revision: str | Sequence[str] | None = "cs0002_lease_fence"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INT64 = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # Nullable columns at the end: a plain ADD COLUMN on both engines (STRICT is kept).
    op.add_column("runs", sa.Column("created_at", INT64, nullable=True))
    op.add_column("runs", sa.Column("updated_at", INT64, nullable=True))
    op.add_column("events", sa.Column("recorded_at", INT64, nullable=True))


def downgrade() -> None:
    # SQLite >= 3.35 drops a column in place; no table rebuild is needed.
    op.drop_column("events", "recorded_at")
    op.drop_column("runs", "updated_at")
    op.drop_column("runs", "created_at")
