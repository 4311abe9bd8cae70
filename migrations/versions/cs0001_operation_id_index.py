"""Index operations by operation id (cadence-store's first own revision).

Revision ID: cs0001_operation_id_index
Revises: cadence1x_current
Create Date: 2026-11-29

start_run looks an operation id up across every run of a root and stage; without this
index that lookup scans all receipts, and start_run slows down as runs accumulate.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "cs0001_operation_id_index"
down_revision: str | Sequence[str] | None = "cadence1x_current"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_operations_operation_id", "operations", ["operation_id"])


def downgrade() -> None:
    op.drop_index("ix_operations_operation_id", table_name="operations")
