"""Issue 26: fences never go backwards across a schema downgrade and upgrade.

Grants of one (run, operation) are given fences 1..5; the schema is downgraded to the
revision before the fence column (``cs0002_lease_fence``) and upgraded again. The next
grant's fence must be above every fence handed out before, or a resource that keeps the
highest fence it has seen would accept a stale holder. A downgrade that refuses (a coded
error, the store left at head) while fences exist is fine too; a backwards fence is not.
"""

from __future__ import annotations

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine
from support import ROOT_HASH, FakeClock

import cadence_store
from cadence_store import CadenceStoreError, RunStore
from cadence_store.storage import schema

FENCE_REVISION = "cs0002_lease_fence"
GRANTS_BEFORE = 5
TTL_MS = 60_000


def revision_before_fences() -> str:
    script = ScriptDirectory.from_config(schema.alembic_config())
    down = script.get_revision(FENCE_REVISION).down_revision
    assert isinstance(down, str), down
    return down


def _grant(store: RunStore, run_id: str, operation_id: str) -> int:
    lease = store.acquire_lease(run_id, operation_id, TTL_MS, preempt=True)
    return lease.fence


@pytest.mark.parametrize("lease_state", ["live", "interrupted"])
def test_the_next_fence_after_a_downgrade_and_upgrade_is_above_all_before(
    database_url: str, clock: FakeClock, lease_state: str
) -> None:
    cadence_store.upgrade(database_url)
    with RunStore(database_url, root_hash=ROOT_HASH, clock=clock) as store:
        run = store.start_run("abel-implement", change="fences", operation_id="s1")
        handed_out = [_grant(store, run.run_id, "apply") for _ in range(GRANTS_BEFORE)]
        if lease_state == "interrupted":
            lease = store.acquire_lease(run.run_id, "apply", TTL_MS, preempt=True)
            handed_out.append(lease.fence)
            store.interrupt_lease(lease)
    assert handed_out == sorted(set(handed_out)) and handed_out[-1] >= GRANTS_BEFORE

    try:
        schema.downgrade(database_url, revision_before_fences())
    except CadenceStoreError as refused:  # refusing while fences exist is allowed
        assert isinstance(refused.code, str) and refused.code, refused
        assert schema.head_revision() == _current(database_url)
    cadence_store.upgrade(database_url)

    with RunStore(database_url, root_hash=ROOT_HASH, clock=clock) as store:
        clock.advance(TTL_MS + 1)  # the old lease has expired: a plain grant takes over
        fence = _grant(store, run.run_id, "apply")
        assert fence > max(handed_out), (
            f"fence {fence} granted after fences up to {max(handed_out)} were handed out"
        )
        status = store.inspect_operation(run.run_id, "apply")
        assert status is not None and status.fence == fence


def _current(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return schema.current_revision(connection)
    finally:
        engine.dispose()
