"""The transparency tree's stored hashes and the signed checkpoints.

Revision ID: cs0007_checkpoints
Revises: cs0006_event_hash_unique
Create Date: 2026-12-06

`tree_tiles` holds the Merkle tree over the journal feed as C2SP tlog-tiles lays it out
(rows of up to 256 hashes of one tree level, every eighth level), so that a checkpoint
hashes only the events since the last one and a proof reads O(log n) rows. `checkpoints`
records each signed checkpoint note. Both start empty: the first `checkpoint` fills the
tiles from the events. No existing table or row is touched.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "cs0007_checkpoints"
down_revision: str | Sequence[str] | None = "cs0006_event_hash_unique"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INT64 = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "tree_tiles",
        sa.Column("tile_level", INT64, nullable=False),
        sa.Column("tile_index", INT64, nullable=False),
        sa.Column("width", INT64, nullable=False),
        sa.Column("hashes", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("tile_level", "tile_index", name="pk_tree_tiles"),
        sqlite_strict=True,
    )
    op.create_table(
        "checkpoints",
        sa.Column("checkpoint_id", INT64, autoincrement=False, nullable=False),
        sa.Column("tree_size", INT64, nullable=False),
        sa.Column("origin", sa.Text(), nullable=False),
        sa.Column("root_hash", sa.Text(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("recorded_at", INT64, nullable=False),
        sa.PrimaryKeyConstraint("checkpoint_id", name="pk_checkpoints"),
        sqlite_strict=True,
    )
    op.create_index("ix_checkpoints_tree_size", "checkpoints", ["tree_size"])


def downgrade() -> None:
    op.drop_index("ix_checkpoints_tree_size", table_name="checkpoints")
    op.drop_table("checkpoints")
    op.drop_table("tree_tiles")
