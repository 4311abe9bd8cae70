"""Adopting cadence 1.x stores (issue 3): every entry point, every refusal, atomic failure.

The stores under tests/fixtures/cadence-1x/ were written by the real cadence 1.x code;
manifest.json records what cadence 1.x returned for them. Every test works on a copy.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from integration.conftest_migrations import (
    ADOPTABLE,
    FIXTURES,
    VERSION_TABLE,
    alembic,
    cadence_cli,
    column_names,
    copy_fixture,
    edit_sqlite,
    manifest,
    open_worker,
    query,
    run_in_processes,
    sha256_file,
    sqlite_url,
    store_entry,
    table_names,
    table_rows,
    upgrade_worker,
    version_rows,
)
from support import adopted_operation

import cadence_store
from cadence_store import MigrationError, RunStore, StoreFormatError
from cadence_store.journal.states import LEGAL_TRANSITIONS, TERMINAL_STATES
from cadence_store.storage.legacy import (
    LEGACY_TABLES,
    PROOF_COLUMNS,
    RUN_SCHEMA_CURRENT,
    RUN_SCHEMA_V2,
    describe_table,
    reference_shapes,
)
from cadence_store.storage.schema import head_revision
from cadence_store.store.state_root import prepare_state_root, resolve_state_root

ENTRY_POINTS = ("api", "cli", "alembic")


def _upgrade_through(entry_point: str, url: str) -> None:
    if entry_point == "api":
        assert cadence_store.upgrade(url) == head_revision()
    elif entry_point == "cli":
        result = cadence_cli("upgrade", "--url", url)
        assert result.returncode == 0, result.stderr
        assert head_revision() in result.stdout
    else:
        result = alembic("-x", f"url={url}", "upgrade", "head")
        assert result.returncode == 0, result.stderr


def _js_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _assert_runs_match_manifest(store: RunStore, entry: dict[str, Any]) -> None:
    for run in entry["runs"]:
        run_id = run["runId"]
        assert store.status(run_id).to_json() == _js_json(run["status"]), run["label"]
        assert [event.to_dict() for event in store.list_events(run_id)] == run["events"]
        verified = store.verify_integrity(run_id)
        assert verified.to_json() == _js_json(run["status"]), run["label"]


def _rowids(path: Path, keys: list[str]) -> list[int]:
    """The events' rowids, in the order `table_rows` sorts them (by `keys` as text)."""
    with sqlite3.connect(path) as connection:
        found = connection.execute(f"SELECT rowid, {', '.join(keys)} FROM events").fetchall()
    return [row[0] for row in sorted(found, key=lambda row: tuple(str(v) for v in row[1:]))]


def _legal_move(state: str) -> str:
    for target in LEGAL_TRANSITIONS[state]:
        if target not in TERMINAL_STATES and target not in ("paused", "approval-needed"):
            return target
    raise AssertionError(f"no plain move from {state}")


# ---------------------------------------------------------------------------------------------
# 1. Adoption through each entry point, byte for byte
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
@pytest.mark.parametrize("file", ADOPTABLE)
def test_cadence1x_store_adopts_through_every_entry_point(
    file: str, entry_point: str, tmp_path: Path
) -> None:
    entry = store_entry(file)
    path = copy_fixture(file, tmp_path)
    url = sqlite_url(path)

    _upgrade_through(entry_point, url)

    # At head, stamped once, cadence 1.x's own marker gone, every cadence 1.x table kept.
    assert version_rows(path) == [head_revision()]
    assert table_names(path) == set(entry["openResult"]["tablesAfter"]) | {
        VERSION_TABLE,
        "follower_positions",  # cadence-store's own (revision cs0004)
        "tree_tiles",  # and (revision cs0007)
        "checkpoints",
        "kept_leaves",  # and (revision cs0008)
        "archived_runs",
        "archived_operations",
    }
    assert "schema_meta" not in table_names(path)
    assert "alembic_version" not in table_names(path)
    assert not any(name.startswith("_alembic_tmp") for name in table_names(path))

    # Rows: receipts, bindings (v2 gains three NULL proof columns at the end), the journal.
    # cadence 1.x's operation rows, plus cadence-store's fence column: 1 for every lease
    # (the grant made under cadence 1.x, running or finished), none for receipts; and its
    # receipt sequence column (cs0005): the sequence a receipt's text names, none for leases
    assert table_rows(path, "operations", "run_id", "operation_id") == sorted(
        (adopted_operation(row) for row in entry["operations"]),
        key=lambda row: (row["run_id"], row["operation_id"]),
    )
    after = entry["openResult"]["deliveryBindingsAfter"]
    assert (
        column_names(path, "delivery_bindings")
        == (entry["openResult"]["deliveryBindingsColumnsAfter"])
    )
    bindings = table_rows(path, "delivery_bindings", "run_id", "gate", "revision")
    assert bindings == sorted(after, key=lambda r: (r["run_id"], r["gate"], str(r["revision"])))
    assert [list(row) for row in bindings] == [list(row) for row in after]  # column order
    if file == "legacy-v2.sqlite3":
        assert all(row[column] is None for row in bindings for column in PROOF_COLUMNS)
    # cadence-store's times (revision cs0003): NULL for every row cadence 1.x wrote
    added = {"runs": ("created_at", "updated_at"), "events": ("recorded_at",)}
    for table, rows in entry["tables"].items():
        if table == "schema_meta":
            continue
        keys = sorted(rows[0]) if rows else []
        stored = table_rows(path, table, *keys)
        if table == "events":
            # and their feed positions (revision cs0004): the order they were written in
            assert [row.pop("feed_position") for row in stored] == _rowids(path, keys)
        assert stored == sorted(
            ({**row, **dict.fromkeys(added.get(table, ()))} for row in rows),
            key=lambda row: tuple(str(row[key]) for key in keys),
        ), table
    for table in set(LEGACY_TABLES) - set(entry["tables"]) - {"operations", "delivery_bindings"}:
        assert query(path, f'SELECT count(*) AS n FROM "{table}"') == [{"n": 0}], table
    if "copiedRowCounts" in entry:
        for table, count in entry["copiedRowCounts"].items():
            assert query(path, f'SELECT count(*) AS n FROM "{table}"') == [{"n": count}]

    # Every run reads back exactly as cadence 1.x returned it, and verifies.
    clock = entry["clock"]["endMs"] + 60_000
    store = RunStore(url, root_hash=entry["consumerRootHash"], clock=lambda: clock)
    try:
        _assert_runs_match_manifest(store, entry)

        # A new event chains onto an adopted run's head.
        run = next(r for r in entry["runs"] if r["status"]["state"] not in TERMINAL_STATES)
        run_id, head = run["runId"], run["status"]
        target = _legal_move(head["state"])
        moved = store.transition(run_id, target, operation_id="adopted-move-1")
        assert moved.state == target
        assert moved.sequence == head["sequence"] + 1
        events = store.list_events(run_id)
        assert events[-1].prior_hash == head["eventHash"]
        assert events[-1].sequence == head["sequence"] + 1
        assert moved.event_hash == events[-1].hash
        assert store.verify_integrity(run_id).to_json() == moved.to_json()
        assert [e.to_dict() for e in events[:-1]] == run["events"]
    finally:
        store.close()


def test_upgrade_of_an_adopted_store_is_idempotent(tmp_path: Path) -> None:
    path = copy_fixture("legacy-v2.sqlite3", tmp_path)
    url = sqlite_url(path)
    assert cadence_store.upgrade(url) == head_revision()
    dump = _dump(path)
    assert cadence_store.upgrade(url) == head_revision()
    assert _dump(path) == dump
    assert version_rows(path) == [head_revision()]


def test_adopted_leases_get_fences(tmp_path: Path) -> None:
    """An adopted running lease is grant 1 of its operation; finished leases keep 1 as
    their last fence, and the next grant of any of them is 2."""
    entry = store_entry("current.sqlite3")
    url = sqlite_url(copy_fixture("current.sqlite3", tmp_path))
    cadence_store.upgrade(url)
    running = next(row for row in entry["operations"] if row["operation_id"] == "lease-running")
    committed = next(row for row in entry["operations"] if row["operation_id"] == "lease-commit")
    now = running["lease_expires_at"]  # the adopted lease is live at its last millisecond
    with RunStore(url, root_hash=entry["consumerRootHash"], clock=lambda: now) as store:
        status = store.inspect_operation(running["run_id"], "lease-running")
        assert (status.state, status.fence) == ("running", 1)
        held = store.acquire_lease(running["run_id"], "lease-running", 1_000)
        assert (held.token, held.fence) == (running["lease_token"], 1)
        store.assert_lease(held)
        assert (
            store.acquire_lease(running["run_id"], "lease-running", 1_000, preempt=True).fence == 2
        )
        assert store.inspect_operation(committed["run_id"], "lease-commit").fence == 1
        assert store.acquire_lease(committed["run_id"], "lease-commit", 1_000).fence == 2


def _dump(path: Path) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        return list(connection.iterdump())
    finally:
        connection.close()


# ---------------------------------------------------------------------------------------------
# 2. Legacy detection probes: refused untouched, or adopted
# ---------------------------------------------------------------------------------------------

SCHEMA_META = "CREATE TABLE schema_meta (version INTEGER PRIMARY KEY CHECK (version = {v})) STRICT"


def _schema_meta(version: int) -> tuple[str, ...]:
    return (SCHEMA_META.format(v=version), f"INSERT INTO schema_meta (version) VALUES ({version})")


# probe name (manifest) -> (base fixture, sqlite edits)
PROBES: dict[str, tuple[str, tuple[str, ...]]] = {
    "v2-tables-with-schema_meta-4": (
        "legacy-v2.sqlite3",
        ("DROP TABLE schema_meta", *_schema_meta(4)),
    ),
    "current-tables-with-schema_meta-2": ("current.sqlite3", _schema_meta(2)),
    "current-tables-with-schema_meta-3": ("current.sqlite3", _schema_meta(3)),
    "current-tables-with-two-schema_meta-rows": (
        "current.sqlite3",
        (
            "CREATE TABLE schema_meta (version INTEGER) STRICT",
            "INSERT INTO schema_meta (version) VALUES (4)",
            "INSERT INTO schema_meta (version) VALUES (4)",
        ),
    ),
    "current-tables-with-schema_meta-extra-column": (
        "current.sqlite3",
        (
            "CREATE TABLE schema_meta (version INTEGER PRIMARY KEY, note TEXT) STRICT",
            "INSERT INTO schema_meta (version, note) VALUES (4, 'extra')",
        ),
    ),
    "v2-tables-without-schema_meta": ("legacy-v2.sqlite3", ("DROP TABLE schema_meta",)),
    "current-plus-unrelated-table": (
        "current.sqlite3",
        (
            "CREATE TABLE host_notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL) STRICT",
            "INSERT INTO host_notes (id, body) VALUES (1, 'kept as is')",
        ),
    ),
    "current-missing-bootstrap_handoffs": ("current.sqlite3", ("DROP TABLE bootstrap_handoffs",)),
    "current-delivery_bindings-extra-column": (
        "current.sqlite3",
        (
            "ALTER TABLE delivery_bindings ADD COLUMN host_note TEXT",
            "UPDATE delivery_bindings SET host_note = 'n-' || operation_id",
        ),
    ),
}

REJECTED = sorted(
    name
    for name, probe in manifest()["legacyDetectionProbes"].items()
    if probe["action"] == "rejected"
)
ACCEPTED = sorted(
    name
    for name, probe in manifest()["legacyDetectionProbes"].items()
    if probe["action"] != "rejected"
)


def _build_probe(name: str, directory: Path) -> Path:
    base, statements = PROBES[name]
    path = copy_fixture(base, directory, name=f"{name}.sqlite3")
    edit_sqlite(path, *statements)
    return path


def test_every_manifest_probe_is_built() -> None:
    assert set(PROBES) == set(manifest()["legacyDetectionProbes"])
    assert all(manifest()["legacyDetectionProbes"][n]["code"] is None for n in ACCEPTED)
    assert ACCEPTED == ["current-delivery_bindings-extra-column", "current-plus-unrelated-table"]


def _assert_reset_required(error: StoreFormatError, database_path: str) -> None:
    assert error.code == "run-store-reset-required"
    assert error.database_path == database_path
    recovery = store_entry("foreign.sqlite3")["openResult"]["recovery"]
    assert error.recovery == recovery
    assert database_path in error.hint


@pytest.mark.parametrize("name", REJECTED)
def test_rejected_probe_is_refused_byte_for_byte_untouched(name: str, tmp_path: Path) -> None:
    assert manifest()["legacyDetectionProbes"][name]["code"] == "run-store-reset-required"
    path = _build_probe(name, tmp_path / "probe")
    digest, listing = sha256_file(path), sorted(os.listdir(path.parent))

    with pytest.raises(StoreFormatError) as caught:
        cadence_store.upgrade(sqlite_url(path))

    _assert_reset_required(caught.value, str(path))
    assert sha256_file(path) == digest
    assert sorted(os.listdir(path.parent)) == listing  # no -wal/-shm/-journal left behind


@pytest.mark.parametrize("name", REJECTED)
def test_rejected_probe_is_refused_by_state_root_open(name: str, tmp_path: Path) -> None:
    consumer = tmp_path / "consumer"
    consumer.mkdir()
    root = prepare_state_root(resolve_state_root(consumer, xdg_state_home=str(tmp_path / "st")))
    probe = _build_probe(name, tmp_path / "probe")
    os.replace(probe, root.database_path)
    digest = sha256_file(root.database_path)

    with pytest.raises(StoreFormatError) as caught:
        RunStore.open(root)

    _assert_reset_required(caught.value, root.database_path)
    assert sha256_file(root.database_path) == digest
    assert sorted(os.listdir(root.root_dir)) == [
        "artifacts",
        "control.sqlite3",
        "transactions",
        "workspaces",
    ]


def test_rejected_probe_is_refused_by_plain_alembic(tmp_path: Path) -> None:
    path = _build_probe("v2-tables-without-schema_meta", tmp_path)
    digest = sha256_file(path)
    result = alembic("-x", f"url={sqlite_url(path)}", "upgrade", "head")
    assert result.returncode != 0
    assert "run-store-reset-required" in result.stderr
    assert sha256_file(path) == digest
    assert VERSION_TABLE not in table_names(path)


def test_rejected_probe_is_refused_by_cli(tmp_path: Path) -> None:
    path = _build_probe("current-tables-with-schema_meta-3", tmp_path)
    digest = sha256_file(path)
    result = cadence_cli("upgrade", "--url", sqlite_url(path))
    assert result.returncode != 0
    assert "run-store-reset-required" in result.stderr
    assert sha256_file(path) == digest


# Refusals the DESIGN names beyond cadence 1.x's recorded probes.
EVENTS_WITHOUT_CASCADE = (
    "CREATE TABLE events_plain (run_id TEXT NOT NULL REFERENCES runs(run_id),"
    " sequence INTEGER NOT NULL, type TEXT NOT NULL, payload_json TEXT NOT NULL,"
    " prior_hash TEXT NOT NULL, event_hash TEXT NOT NULL, PRIMARY KEY (run_id, sequence),"
    " UNIQUE (run_id, event_hash)) STRICT",
    "INSERT INTO events_plain SELECT * FROM events",
    "DROP TABLE events",
    "ALTER TABLE events_plain RENAME TO events",
)
EXTRA_REJECTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "v2-claim-with-a-proof-column": (
        "legacy-v2.sqlite3",
        ("ALTER TABLE delivery_bindings ADD COLUMN approval_revision INTEGER",),
    ),
    "current-missing-tasks": ("current.sqlite3", ("DROP TABLE tasks",)),
    "current-events-without-on-delete-cascade": ("current.sqlite3", EVENTS_WITHOUT_CASCADE),
    "current-missing-a-unique-key": (
        "current.sqlite3",
        (
            "CREATE TABLE ops2 (run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,"
            " operation_id TEXT NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL,"
            " outcome_json TEXT, lease_token TEXT, lease_expires_at INTEGER) STRICT",
            "INSERT INTO ops2 SELECT * FROM operations",
            "DROP TABLE operations",
            "ALTER TABLE ops2 RENAME TO operations",
        ),
    ),
    "current-runs-missing-a-column": (
        "current.sqlite3",
        ("ALTER TABLE runs DROP COLUMN terminal_tombstone",),
    ),
    "v4-missing-runs": (
        "legacy-v4.sqlite3",
        ("DROP TABLE runs",),
    ),
}


@pytest.mark.parametrize("name", sorted(EXTRA_REJECTED))
def test_other_damaged_stores_are_refused_untouched(name: str, tmp_path: Path) -> None:
    base, statements = EXTRA_REJECTED[name]
    path = copy_fixture(base, tmp_path, name=f"{name}.sqlite3")
    edit_sqlite(path, *statements)
    digest = sha256_file(path)
    with pytest.raises(StoreFormatError) as caught:
        cadence_store.upgrade(sqlite_url(path))
    _assert_reset_required(caught.value, str(path))
    assert sha256_file(path) == digest


def test_refusal_leaves_a_wal_mode_store_untouched(tmp_path: Path) -> None:
    """cadence 1.x stores are WAL databases; refusing one must not touch it either."""
    path = _build_probe("current-tables-with-schema_meta-3", tmp_path)
    connection = sqlite3.connect(path)
    assert connection.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
    connection.close()
    assert not Path(f"{path}-wal").exists()
    digest = sha256_file(path)
    with pytest.raises(StoreFormatError):
        cadence_store.upgrade(sqlite_url(path))
    assert sha256_file(path) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


@pytest.mark.postgres
def test_postgresql_cadence_tables_without_a_version_are_refused(pg_database_url: str) -> None:
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(pg_database_url)
    try:
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE runs (run_id TEXT PRIMARY KEY, note TEXT)"))
            connection.execute(text("INSERT INTO runs VALUES ('r1', 'a host''s table')"))
        with pytest.raises(StoreFormatError) as caught:
            cadence_store.upgrade(pg_database_url)
        assert caught.value.code == "run-store-reset-required"
        with engine.connect() as connection:
            assert set(inspect(connection).get_table_names()) == {"runs"}
            rows = connection.execute(text("SELECT * FROM runs")).all()
        assert [tuple(row) for row in rows] == [("r1", "a host's table")]
    finally:
        engine.dispose()


def test_run_store_refuses_an_unadopted_store_without_touching_it(tmp_path: Path) -> None:
    """RunStore never runs DDL: a cadence 1.x store must be upgraded first."""
    from cadence_store import SchemaOutOfDateError

    path = copy_fixture("legacy-v4.sqlite3", tmp_path)
    edit_sqlite(path)
    digest = sha256_file(path)
    with pytest.raises(SchemaOutOfDateError) as caught:
        RunStore(sqlite_url(path), root_hash=store_entry("legacy-v4.sqlite3")["consumerRootHash"])
    assert caught.value.code == "run-store-upgrade-required"
    assert "cadence-store upgrade --url" in caught.value.command
    assert sha256_file(path) == digest
    assert VERSION_TABLE not in table_names(path)


@pytest.mark.parametrize("name", ACCEPTED)
def test_accepted_probe_is_adopted(name: str, tmp_path: Path) -> None:
    entry = store_entry("current.sqlite3")
    path = _build_probe(name, tmp_path)
    url = sqlite_url(path)
    before_bindings = table_rows(path, "delivery_bindings", "run_id", "gate", "revision")

    assert cadence_store.upgrade(url) == head_revision()

    assert version_rows(path) == [head_revision()]
    assert table_rows(path, "delivery_bindings", "run_id", "gate", "revision") == before_bindings
    if name == "current-plus-unrelated-table":
        assert query(path, "SELECT * FROM host_notes") == [{"id": 1, "body": "kept as is"}]
    else:
        assert "host_note" in column_names(path, "delivery_bindings")
        assert all(row["host_note"] == f"n-{row['operation_id']}" for row in before_bindings)
    store = RunStore(url, root_hash=entry["consumerRootHash"])
    try:
        _assert_runs_match_manifest(store, entry)
    finally:
        store.close()


def test_foreign_store_is_refused_by_state_root_open_untouched(tmp_path: Path) -> None:
    entry = store_entry("foreign.sqlite3")
    assert entry["openResult"]["code"] == "run-store-reset-required"
    consumer = tmp_path / "consumer"
    consumer.mkdir()
    root = prepare_state_root(resolve_state_root(consumer, xdg_state_home=str(tmp_path / "st")))
    copy_fixture("foreign.sqlite3", Path(root.root_dir), name="control.sqlite3")
    assert sha256_file(root.database_path) == entry["sha256"]

    with pytest.raises(StoreFormatError) as caught:
        RunStore.open(root)

    _assert_reset_required(caught.value, root.database_path)
    # cadence 1.x switched the file to WAL before refusing it; cadence-store does not.
    assert sha256_file(root.database_path) == entry["sha256"]
    assert not Path(f"{root.database_path}-wal").exists()
    assert (
        query(root.database_path, "SELECT * FROM foreign_state")
        == (entry["tables"]["foreign_state"])
    )


def test_upgrade_treats_a_database_without_cadence_tables_as_a_fresh_host(tmp_path: Path) -> None:
    """By design `upgrade(url)` installs beside a host's tables and leaves them alone."""
    entry = store_entry("foreign.sqlite3")
    path = copy_fixture("foreign.sqlite3", tmp_path)
    schema_before = query(path, "SELECT sql FROM sqlite_master WHERE name = 'foreign_state'")

    assert cadence_store.upgrade(sqlite_url(path)) == head_revision()

    assert table_names(path) == {"foreign_state", VERSION_TABLE, *cadence_store.OWNED_TABLES}
    assert query(path, "SELECT * FROM foreign_state") == entry["tables"]["foreign_state"]
    assert query(path, "SELECT sql FROM sqlite_master WHERE name = 'foreign_state'") == (
        schema_before
    )
    assert version_rows(path) == [head_revision()]


# ---------------------------------------------------------------------------------------------
# 3. A failing step rolls the whole upgrade back
# ---------------------------------------------------------------------------------------------

BLOCKER = "CREATE TABLE migration_blocker (version INTEGER REFERENCES schema_meta(version))"


@pytest.mark.parametrize("entry_point", ["api", "alembic"])
@pytest.mark.parametrize(("file", "version"), [("legacy-v4.sqlite3", 4), ("legacy-v2.sqlite3", 2)])
def test_failed_migration_rolls_back_every_step(
    file: str, version: int, entry_point: str, tmp_path: Path
) -> None:
    """Dropping schema_meta (the cadence1x_current step) fails on a foreign key.

    For v2 that step comes after the ADD COLUMN step (cadence1x_v4): the columns must be
    rolled back too, and the adoption stamp with them.
    """
    entry = store_entry(file)
    path = copy_fixture(file, tmp_path)
    edit_sqlite(path, BLOCKER, f"INSERT INTO migration_blocker (version) VALUES ({version})")
    digest = sha256_file(path)
    columns = column_names(path, "delivery_bindings")
    url = sqlite_url(path)

    if entry_point == "api":
        with pytest.raises(MigrationError) as caught:
            cadence_store.upgrade(url)
        assert caught.value.code == "run-store-migration-failed"
    else:
        result = alembic("-x", f"url={url}", "upgrade", "head")
        assert result.returncode != 0
        assert "run-store-migration-failed" in result.stderr

    assert sha256_file(path) == digest
    names = table_names(path)
    assert "schema_meta" in names
    assert VERSION_TABLE not in names
    assert not any(name.startswith("_alembic_tmp") for name in names)
    assert column_names(path, "delivery_bindings") == columns
    if version == 2:
        assert not set(PROOF_COLUMNS) & set(columns)
    assert query(path, "SELECT version FROM schema_meta") == [{"version": version}]

    # Still the same adoptable store: without the blocker it adopts and verifies.
    edit_sqlite(path, "DROP TABLE migration_blocker")
    assert cadence_store.upgrade(url) == head_revision()
    store = RunStore(url, root_hash=entry["consumerRootHash"])
    try:
        _assert_runs_match_manifest(store, entry)
    finally:
        store.close()


# ---------------------------------------------------------------------------------------------
# 4. Two processes upgrading the same file at once
# ---------------------------------------------------------------------------------------------


def _assert_all_ok(outcomes: list[tuple[str, str, str]]) -> None:
    assert [(tag, status) for tag, status, _ in outcomes] == [("p0", "ok"), ("p1", "ok")], outcomes
    assert {revision for _, _, revision in outcomes} == {head_revision()}


def test_concurrent_upgrade_of_a_fresh_file(tmp_path: Path) -> None:
    path = tmp_path / "fresh.sqlite3"
    _assert_all_ok(run_in_processes(upgrade_worker, sqlite_url(path)))
    assert version_rows(path) == [head_revision()]
    assert table_names(path) == {VERSION_TABLE, *cadence_store.OWNED_TABLES}
    store = RunStore(sqlite_url(path), root_hash="ab" * 32, clock=lambda: 1_000)
    try:
        run = store.start_run("abel-design", operation_id="after-race", change="race-check")
        assert store.verify_integrity(run.run_id).sequence == 1
    finally:
        store.close()


def test_concurrent_upgrade_of_a_legacy_file(tmp_path: Path) -> None:
    entry = store_entry("legacy-v2.sqlite3")
    path = copy_fixture("legacy-v2.sqlite3", tmp_path)
    _assert_all_ok(run_in_processes(upgrade_worker, sqlite_url(path)))
    assert version_rows(path) == [head_revision()]
    assert "schema_meta" not in table_names(path)
    for table, count in entry["copiedRowCounts"].items():
        assert query(path, f'SELECT count(*) AS n FROM "{table}"') == [{"n": count}], table
    assert (
        column_names(path, "delivery_bindings")
        == (entry["openResult"]["deliveryBindingsColumnsAfter"])
    )
    store = RunStore(sqlite_url(path), root_hash=entry["consumerRootHash"])
    try:
        _assert_runs_match_manifest(store, entry)
    finally:
        store.close()


def test_concurrent_open_of_one_state_root_holding_a_legacy_store(tmp_path: Path) -> None:
    entry = store_entry("legacy-v4.sqlite3")
    consumer, xdg = tmp_path / "consumer", tmp_path / "xdg"
    consumer.mkdir()
    root = prepare_state_root(resolve_state_root(consumer, xdg_state_home=str(xdg)))
    copy_fixture("legacy-v4.sqlite3", Path(root.root_dir), name="control.sqlite3")
    spec = json.dumps({"consumer": str(consumer), "xdg": str(xdg)})
    outcomes = run_in_processes(open_worker, spec)
    runs = str(len(entry["runs"]))
    assert outcomes == [("p0", "ok", runs), ("p1", "ok", runs)], outcomes
    assert version_rows(root.database_path) == [head_revision()]
    assert "schema_meta" not in table_names(root.database_path)
    for table in ("runs", "events"):
        count = len(entry["tables"][table])
        assert query(root.database_path, f"SELECT count(*) AS n FROM {table}") == [{"n": count}]


@pytest.mark.postgres
def test_concurrent_upgrade_of_a_fresh_postgresql_database(pg_database_url: str) -> None:
    from sqlalchemy import create_engine, text

    _assert_all_ok(run_in_processes(upgrade_worker, pg_database_url))
    engine = create_engine(pg_database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).all()
            assert [row[0] for row in rows] == [head_revision()]
    finally:
        engine.dispose()


# ---------------------------------------------------------------------------------------------
# 9. The frozen cadence 1.x DDL is what the fixtures hold
# ---------------------------------------------------------------------------------------------


def _shapes_of(path: Path | str) -> dict[str, Any]:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:

        def run(sql: str, params: Any) -> list[tuple[Any, ...]]:
            return connection.execute(sql, tuple(params)).fetchall()

        return {table: describe_table(run, table) for table in LEGACY_TABLES}
    finally:
        connection.close()


def _columns_in(schema: str, table: str) -> list[str]:
    connection = sqlite3.connect(":memory:")
    try:
        connection.executescript(schema)
        return [row[1] for row in connection.execute(f'PRAGMA table_info("{table}")')]
    finally:
        connection.close()


def test_run_schema_v2_lacks_exactly_the_proof_columns() -> None:
    current = _columns_in(RUN_SCHEMA_CURRENT, "delivery_bindings")
    v2 = _columns_in(RUN_SCHEMA_V2, "delivery_bindings")
    assert set(PROOF_COLUMNS) <= set(current)
    assert not set(PROOF_COLUMNS) & set(v2)
    assert v2 == [c for c in current if c not in PROOF_COLUMNS]
    v2_shapes, current_shapes = (
        reference_shapes(RUN_SCHEMA_V2),
        reference_shapes(RUN_SCHEMA_CURRENT),
    )
    assert set(v2_shapes) == set(current_shapes) == set(LEGACY_TABLES)
    for table in LEGACY_TABLES:
        if table != "delivery_bindings":
            assert v2_shapes[table] == current_shapes[table], table


@pytest.mark.parametrize(
    ("file", "schema"),
    [
        ("current.sqlite3", RUN_SCHEMA_CURRENT),
        ("legacy-v4.sqlite3", RUN_SCHEMA_CURRENT),
        ("legacy-v2.sqlite3", RUN_SCHEMA_V2),
    ],
)
def test_frozen_reference_shapes_match_the_fixture_exactly(
    file: str, schema: str, tmp_path: Path
) -> None:
    path = copy_fixture(file, tmp_path)
    assert _shapes_of(path) == reference_shapes(schema)


def test_frozen_current_schema_matches_cadence1x_ddl_text() -> None:
    """cadence 1.x's own CREATE TABLE text (recorded in the manifest) has the same shapes."""
    master: list[dict[str, str]] = store_entry("current.sqlite3")["sqliteMaster"]
    assert {row["name"] for row in master} == set(LEGACY_TABLES)
    connection = sqlite3.connect(":memory:")
    try:
        connection.executescript(";\n".join(row["sql"] for row in master) + ";")

        def run(sql: str, params: Any) -> list[tuple[Any, ...]]:
            return connection.execute(sql, tuple(params)).fetchall()

        shapes = {table: describe_table(run, table) for table in LEGACY_TABLES}
    finally:
        connection.close()
    assert shapes == reference_shapes(RUN_SCHEMA_CURRENT)


def test_fixtures_are_the_recorded_bytes() -> None:
    for entry in manifest()["stores"]:
        path = FIXTURES / entry["file"]
        assert path.stat().st_size == entry["sizeBytes"]
        assert sha256_file(path) == entry["sha256"]
