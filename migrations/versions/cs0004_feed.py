"""The journal feed: a position for every event, and the followers' recorded positions.

Revision ID: cs0004_feed
Revises: cs0003_timestamps
Create Date: 2026-12-02

`events.feed_position` orders every committed event for followers (`RunStore.follow`).
Events already stored get positions here, in a deterministic order:

- SQLite (cadence 1.x's stores, and cadence-store's own): the row's rowid, which is the
  order the single writer inserted them in;
- PostgreSQL: `recorded_at` (NULL first), then run id, then sequence.

Only the new column is written: `payload_json`, the hashes and `projection_json` are
untouched, so an adopted store verifies byte for byte as before. The column stays
nullable: on PostgreSQL an event is numbered after its transaction commits (see
`README.md`, "Following the journal"). `follower_positions` holds what hosts record with
`record_position`, one row per follower name.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "cs0004_feed"
down_revision: str | Sequence[str] | None = "cs0003_timestamps"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INT64 = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column("events", sa.Column("feed_position", INT64, nullable=True))
    if op.get_bind().dialect.name == "sqlite":
        op.execute("UPDATE events SET feed_position = rowid")
    else:
        op.execute(
            "UPDATE events SET feed_position = numbered.position FROM ("
            " SELECT run_id, sequence, row_number() OVER ("
            "  ORDER BY recorded_at NULLS FIRST, run_id, sequence) AS position"
            " FROM events) AS numbered"
            " WHERE events.run_id = numbered.run_id AND events.sequence = numbered.sequence"
        )
    op.create_index("ix_events_feed_position", "events", ["feed_position"], unique=True)
    op.create_table(
        "follower_positions",
        sa.Column("follower", sa.Text(), nullable=False),
        sa.Column("position", INT64, nullable=False),
        sa.PrimaryKeyConstraint("follower", name="pk_follower_positions"),
        sqlite_strict=True,
    )


def downgrade() -> None:
    op.drop_table("follower_positions")
    op.drop_index("ix_events_feed_position", table_name="events")
    op.drop_column("events", "feed_position")
