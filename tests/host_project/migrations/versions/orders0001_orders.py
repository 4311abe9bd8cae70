"""The orders table.

Revision ID: orders0001
Revises:

`-x fail_after=orders0001` makes it fail after creating the table (the tests' failing
revision: nothing of the upgrade may stay).
"""

import sqlalchemy as sa
from alembic import context, op

revision = "orders0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "orders",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("item", sa.String(80), nullable=False),
    )
    if context.get_x_argument(as_dictionary=True).get("fail_after") == revision:
        raise RuntimeError(f"{revision} failed after creating orders")


def downgrade() -> None:
    op.drop_table("orders")
