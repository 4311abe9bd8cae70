"""cadence 1.x current schema: no `schema_meta` table.

Revision ID: cadence1x_current
Revises: cadence1x_v4
Create Date: 2026-11-29

cadence 1.x's last migration dropped its hand-written version marker `schema_meta`;
version tracking is Alembic's (`cadence_store_version`) from here on. Current-schema
cadence 1.x stores are stamped here.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "cadence1x_current"
down_revision: str | Sequence[str] | None = "cadence1x_v4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("DROP TABLE IF EXISTS schema_meta")


def downgrade() -> None:
    # schema_meta only ever marked cadence 1.x's own version; nothing depends on it.
    pass
