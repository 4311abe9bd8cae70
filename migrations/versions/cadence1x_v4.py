"""cadence 1.x run schema v4: approval-proof columns on delivery_bindings.

Revision ID: cadence1x_v4
Revises: cadence1x_v2
Create Date: 2026-11-29

Mirrors cadence 1.x's v2 -> v4 migration (three nullable columns added at the end).
cadence 1.x stores that still carry `schema_meta` version 4 are stamped here.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "cadence1x_v4"
down_revision: str | Sequence[str] | None = "cadence1x_v2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INT64 = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
PROOF_COLUMNS = ("approval_revision", "contract_hash", "record_hash")


def upgrade() -> None:
    op.add_column("delivery_bindings", sa.Column("approval_revision", INT64, nullable=True))
    op.add_column("delivery_bindings", sa.Column("contract_hash", sa.Text(), nullable=True))
    op.add_column("delivery_bindings", sa.Column("record_hash", sa.Text(), nullable=True))


def downgrade() -> None:
    # SQLite >= 3.35 drops a column in place; no table rebuild is needed.
    for column in reversed(PROOF_COLUMNS):
        op.drop_column("delivery_bindings", column)
