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

Fences never go backwards: a downgrade keeps each lease's fence in
`cadence_store_lease_fences` (a table cadence 1.x ignores), and the upgrade after it
gives those leases their fence back, so the next grant is above every fence handed out.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "cs0002_lease_fence"
down_revision: str | Sequence[str] | None = "cs0001_operation_id_index"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INT64 = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


FENCE_KEEPER = "cadence_store_lease_fences"


def _operations() -> sa.TableClause:
    return sa.table(
        "operations",
        sa.column("run_id", sa.Text()),
        sa.column("operation_id", sa.Text()),
        sa.column("kind", sa.Text()),
        sa.column("lease_fence", INT64),
    )


def _keeper() -> sa.TableClause:
    return sa.table(
        FENCE_KEEPER,
        sa.column("run_id", sa.Text()),
        sa.column("operation_id", sa.Text()),
        sa.column("lease_fence", INT64),
    )


def upgrade() -> None:
    # A nullable column at the end: a plain ADD COLUMN on both engines (STRICT is kept).
    op.add_column("operations", sa.Column("lease_fence", INT64, nullable=True))
    operations = _operations()
    op.execute(operations.update().where(operations.c.kind == "lease").values(lease_fence=1))
    # offline (--sql): no database to read kept fences from (a generated script starts
    # fresh); asked of the migration context, which cadence_store.upgrade runs without
    # an EnvironmentContext
    if op.get_context().as_sql:
        return
    schema = op.get_context().version_table_schema  # the store's schema (None: default)
    if not sa.inspect(op.get_bind()).has_table(FENCE_KEEPER, schema=schema):
        return
    # the fences a downgrade kept: the next grant must be above every one handed out
    kept = _keeper()
    same_lease = sa.and_(
        kept.c.run_id == operations.c.run_id, kept.c.operation_id == operations.c.operation_id
    )
    op.execute(
        operations.update()
        .where(
            operations.c.kind == "lease",
            sa.exists().where(same_lease, kept.c.lease_fence > 1),
        )
        .values(lease_fence=sa.select(kept.c.lease_fence).where(same_lease).scalar_subquery())
    )
    op.drop_table(FENCE_KEEPER)


def downgrade() -> None:
    op.create_table(
        FENCE_KEEPER,
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("operation_id", sa.Text(), nullable=False),
        sa.Column("lease_fence", INT64, nullable=False),
    )
    operations = _operations()
    op.execute(
        _keeper()
        .insert()
        .from_select(
            ["run_id", "operation_id", "lease_fence"],
            sa.select(
                operations.c.run_id, operations.c.operation_id, operations.c.lease_fence
            ).where(operations.c.lease_fence.is_not(None)),
        )
    )
    # SQLite >= 3.35 drops a column in place; no table rebuild is needed.
    op.drop_column("operations", "lease_fence")
