"""`to_dict()` is exactly the object cadence 1.x returned (DESIGN.md, third round).

manifest.json records what the real cadence 1.x code returned for the stores under
tests/fixtures/cadence-1x/: every run's status and events, and `inspectOperation` of its
leases. After adoption, cadence-store's values give those objects from `to_dict()`, with
cadence-store's additions (`fence`) as attributes and in `model_dump()` only.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from integration.conftest_migrations import copy_fixture, sqlite_url, store_entry

import cadence_store
from cadence_store import OperationLease, RunStore

ADOPTABLE_STORES = ("current.sqlite3", "legacy-v4.sqlite3", "legacy-v2.sqlite3")


@pytest.mark.parametrize("file", ADOPTABLE_STORES)
def test_statuses_and_events_are_cadence_1x_objects(tmp_path: Path, file: str) -> None:
    entry = store_entry(file)
    url = sqlite_url(copy_fixture(file, tmp_path))
    cadence_store.upgrade(url)
    with RunStore(url, root_hash=entry["consumerRootHash"], clock=lambda: 0) as store:
        for run in entry["runs"]:
            status = store.status(run["runId"])
            assert status.to_dict() == run["status"]
            assert list(status.to_dict()) == list(run["status"])  # cadence 1.x key order
            assert [event.to_dict() for event in store.list_events(run["runId"])] == run["events"]
            for binding, recorded in zip(
                status.delivery_bindings, run["status"]["deliveryBindings"], strict=True
            ):
                assert binding.to_dict() == recorded


def test_operation_statuses_and_leases_are_cadence_1x_objects(tmp_path: Path) -> None:
    entry = store_entry("current.sqlite3")
    url = sqlite_url(copy_fixture("current.sqlite3", tmp_path))
    cadence_store.upgrade(url)
    observed = entry["observations"]["inspectOperation"]
    leases = {row["operation_id"]: row for row in entry["operations"] if row["kind"] == "lease"}
    now = entry["clock"]["endMs"]
    with RunStore(url, root_hash=entry["consumerRootHash"], clock=lambda: now) as store:
        for operation_id in ("lease-commit", "lease-running", "lease-interrupt"):
            status = store.inspect_operation(leases[operation_id]["run_id"], operation_id)
            assert status is not None
            assert status.to_dict() == observed[operation_id]
            assert status.fence == 1  # the addition: an attribute, in model_dump() only
            assert status.model_dump()["fence"] == 1
            assert "fence" not in status.to_dict()

        running = leases["lease-running"]
        lease = store.acquire_lease(running["run_id"], "lease-running", 1_000)
        # cadence 1.x's acquireLease returned the live lease as it stood
        assert lease.to_dict() == {
            "runId": running["run_id"],
            "operationId": "lease-running",
            "token": running["lease_token"],
            "expiresAt": running["lease_expires_at"],
        }
        assert lease.fence == 1
        assert OperationLease.model_validate(lease.to_dict()).fence == 0  # cadence 1.x shape
        store.assert_lease(lease.to_dict())
