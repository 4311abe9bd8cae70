"""Where each receipt sits on its chain: `operations.sequence`, indexed with `run_id`.

Revision ID: cs0005_receipt_sequence
Revises: cs0004_feed
Create Date: 2026-12-02

A journal receipt records the projection its call returned, which names the sequence of
the event that call appended. Verification compares every receipt with the replay at that
sequence; with the sequence stored and indexed it streams the receipts in chain order
beside the events, instead of keeping a digest per receipt until the replay reaches it
(memory flat in the run's length). The column only locates a receipt: the comparison is
still byte for byte against the replay, so a wrong value is caught like a wrong receipt.

Existing journal receipts (a cadence 1.x store being adopted, an older cadence-store) are
filled from their own text by verification's rule: the first `"sequence":<digits>`
followed by `,` or `}`. Lease rows, and receipts whose text names no sequence, stay NULL
and are checked as before.
"""

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "cs0005_receipt_sequence"
down_revision: str | Sequence[str] | None = "cs0004_feed"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INT64 = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JOURNAL_KINDS = ("start", "change-bound", "delivery-bound", "state-transitioned")
# frozen here: the rule `journal.receipts` used when this revision was written
CLAIMED_SEQUENCE = re.compile(r'"sequence":(\d{1,16})[,}]')
BATCH = 2_000


def _fill(connection: sa.Connection) -> None:
    operations = sa.table(
        "operations",
        sa.column("run_id", sa.Text),
        sa.column("operation_id", sa.Text),
        sa.column("kind", sa.Text),
        sa.column("outcome_json", sa.Text),
        sa.column("sequence", INT64),
    )
    page = (
        sa.select(operations.c.run_id, operations.c.operation_id, operations.c.outcome_json)
        .where(operations.c.kind.in_(JOURNAL_KINDS))
        .order_by(operations.c.run_id, operations.c.operation_id)
        .limit(BATCH)
    )
    update = (
        sa.update(operations)
        .where(
            operations.c.run_id == sa.bindparam("key_run_id"),
            operations.c.operation_id == sa.bindparam("key_operation_id"),
        )
        .values(sequence=sa.bindparam("located"))
    )
    after: tuple[str, str] | None = None
    while True:
        statement = page
        if after is not None:
            # keyset pagination: the rows being updated are never read twice
            statement = page.where(
                sa.tuple_(operations.c.run_id, operations.c.operation_id) > sa.tuple_(*after)
            )
        rows = connection.execute(statement).all()
        if not rows:
            return
        located = []
        for run_id, operation_id, outcome_json in rows:
            found = CLAIMED_SEQUENCE.search(outcome_json) if isinstance(outcome_json, str) else None
            if found is not None:
                located.append(
                    {
                        "key_run_id": run_id,
                        "key_operation_id": operation_id,
                        "located": int(found.group(1)),
                    }
                )
        if located:
            connection.execute(update, located)
        after = (rows[-1][0], rows[-1][1])


_KINDS_SQL = ", ".join(f"'{kind}'" for kind in JOURNAL_KINDS)


def _fill_in_sql(dialect: str) -> None:
    """The fill as one statement: PostgreSQL's regular expressions are the rule's (ASCII
    digits); offline SQLite has none, so there the first `"sequence":` is taken."""
    if dialect == "postgresql":
        located = "CAST(substring(outcome_json FROM '\"sequence\":([0-9]{1,16})[,}]') AS BIGINT)"
        where = ""
    else:
        located = "CAST(substr(outcome_json, instr(outcome_json, '\"sequence\":') + 11) AS INTEGER)"
        where = " AND instr(outcome_json, '\"sequence\":') > 0"
    # every piece is a constant of this revision: nothing from outside reaches the text
    statement = f"UPDATE operations SET sequence = {located} WHERE kind IN ({_KINDS_SQL}){where}"  # noqa: S608
    op.execute(statement)


def upgrade() -> None:
    # A nullable column at the end: a plain ADD COLUMN on both engines (STRICT is kept).
    op.add_column("operations", sa.Column("sequence", INT64, nullable=True))
    dialect = op.get_context().dialect.name
    if dialect == "sqlite" and not op.get_context().as_sql:
        _fill(op.get_bind())  # the rule itself, row by row
    else:
        _fill_in_sql(dialect)
    op.create_index("ix_operations_run_id_sequence", "operations", ["run_id", "sequence"])


def downgrade() -> None:
    op.drop_index("ix_operations_run_id_sequence", table_name="operations")
    # SQLite >= 3.35 drops a column in place; no table rebuild is needed.
    op.drop_column("operations", "sequence")
