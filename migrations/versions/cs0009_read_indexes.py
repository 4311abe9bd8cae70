"""Indexes that the store's filtered reads use: no read walks `runs` or `operations` whole.

Revision ID: cs0009_read_indexes
Revises: cs0008_retention
Create Date: 2026-12-07

Found by tests/integration/test_statement_plans.py (every statement of a workload of
every public call, explained on a store of thousands of runs):

- `recover_expired_leases` read every operation row for the running leases past their
  expiry: `ix_operations_lease_expires_at`, partial (`lease_expires_at IS NOT NULL`:
  only a live lease has one, so a journal receipt, what every append writes, adds no
  entry; `lease_expires_at < :now` implies it on both engines).
- `list_runs(change=...)` read every run: `ix_runs_change_name`, partial (a design run
  without a change has no entry; set once, by the start or `bind_change`).
- `list_runs(state=...)`, `stage=`, `root_hash=` walked the runs in run id order,
  filtering: `ix_runs_state_run_id`, `ix_runs_stage_run_id`, `ix_runs_root_hash_run_id`
  give each filter's runs in run id order (a keyset page starts at its `after`). Stage
  and root hash never change; the state index is rewritten by a transition that changes
  the state.

No table or row is touched; the downgrade drops the five indexes.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "cs0009_read_indexes"
down_revision: str | Sequence[str] | None = "cs0008_retention"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LEASE_EXPIRY = sa.text("lease_expires_at IS NOT NULL")
HAS_CHANGE = sa.text("change_name IS NOT NULL")
INDEXES: tuple[tuple[str, str, list[str], sa.TextClause | None], ...] = (
    ("ix_operations_lease_expires_at", "operations", ["lease_expires_at"], LEASE_EXPIRY),
    ("ix_runs_change_name", "runs", ["change_name"], HAS_CHANGE),
    ("ix_runs_state_run_id", "runs", ["state", "run_id"], None),
    ("ix_runs_stage_run_id", "runs", ["stage", "run_id"], None),
    ("ix_runs_root_hash_run_id", "runs", ["root_hash", "run_id"], None),
)


def upgrade() -> None:
    for name, table, columns, where in INDEXES:
        op.create_index(name, table, columns, sqlite_where=where, postgresql_where=where)


def downgrade() -> None:
    for name, table, _columns, _where in reversed(INDEXES):
        op.drop_index(name, table_name=table)
