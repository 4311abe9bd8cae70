"""Fence numbers for operation leases (cadence-store's own revision).

Revision ID: cs0002_lease_fence
Revises: cs0001_operation_id_index
Create Date: 2026-11-30

`operations.lease_fence`: the number of the current or last lease granted for an
operation; each new grant takes the next number, so an external resource can refuse a
holder whose fence is lower than the highest it has seen. Receipts (journal operation
ids) have none.

Rows that were already leases (adopted cadence 1.x stores, or stores made before this
revision) get fence 1, whatever their state: each had at least one grant, none of which
was ever shown a number, so the first grant after the upgrade gets 2 and every lease row
has a fence.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "cs0002_lease_fence"
down_revision: str | Sequence[str] | None = "cs0001_operation_id_index"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INT64 = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # A nullable column at the end: a plain ADD COLUMN on both engines (STRICT is kept).
    op.add_column("operations", sa.Column("lease_fence", INT64, nullable=True))
    operations = sa.table(
        "operations", sa.column("kind", sa.Text()), sa.column("lease_fence", INT64)
    )
    op.execute(operations.update().where(operations.c.kind == "lease").values(lease_fence=1))


def downgrade() -> None:
    # SQLite >= 3.35 drops a column in place; no table rebuild is needed.
    op.drop_column("operations", "lease_fence")
