"""Issue 11: hostile files and values end in one coded error, never a traceback.

Exit codes of the command: 2 for bad input (a hostile file or URL), 1 for corruption (a
hostile row inside the database), and nothing is written. SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import Engine, create_engine, text
from support import ROOT_HASH, FakeClock, table_snapshot

import cadence_store
from cadence_store import (
    CadenceStoreError,
    InvalidInputError,
    JournalIntegrityError,
    RunStore,
)
from cadence_store.cli import main
from cadence_store.journal.validation import MAX_SAFE_INTEGER
from cadence_store.transfer import import_store, verify_export

DEEP = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 100_000 + "1" + "}" * 100_000
# decodes, but deeper than JSON.stringify writes (the library never stores it)
MID_OBJECT = '{"a":' * 600 + "1" + "}" * 600


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store_url(database_url: str) -> str:
    cadence_store.upgrade(database_url)
    return database_url


@pytest.fixture
def store(store_url: str, clock: FakeClock) -> Iterator[RunStore]:
    with RunStore(store_url, root_hash=ROOT_HASH, clock=clock) as run_store:
        yield run_store


@pytest.fixture
def db(store_url: str) -> Iterator[Engine]:
    engine = create_engine(store_url)
    try:
        yield engine
    finally:
        engine.dispose()


def cli(*args: str, input: bytes | str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input)


def assert_coded(result: Result, exit_code: int, code: str) -> None:
    """A one-line `error: <code>` (plus detail and hint), the exit status, no traceback."""
    assert result.exit_code == exit_code, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.stderr.startswith(f"error: {code}\n"), result.stderr
    assert "Traceback" not in result.output


def _a_run(store: RunStore) -> str:
    run = store.start_run("abel-implement", change="hostile", operation_id="start")
    store.transition(run.run_id, "validating-delivery", operation_id="validate")
    lease = store.acquire_lease(run.run_id, "apply", 60_000)
    store.commit_lease(lease, {"ok": True})
    return run.run_id


# -- deep JSON in a stored row: corruption (exit 1), coded --------------------------------


@pytest.mark.parametrize(
    "deep", [DEEP, DEEP_OBJECT, MID_OBJECT], ids=["list", "object", "600-deep-object"]
)
@pytest.mark.parametrize("column", ["projection_json", "payload_json", "outcome_json"])
def test_deep_json_in_a_stored_row_is_a_coded_integrity_error(
    store: RunStore, store_url: str, db: Engine, column: str, deep: str
) -> None:
    run_id = _a_run(store)
    table, where = {
        "projection_json": ("runs", "run_id = :r"),
        "payload_json": ("events", "run_id = :r AND sequence = 2"),
        "outcome_json": ("operations", "run_id = :r AND operation_id = 'apply'"),
    }[column]
    with db.begin() as connection:
        connection.execute(
            text(f"UPDATE {table} SET {column} = :v WHERE {where}"), {"v": deep, "r": run_id}
        )
    before = table_snapshot(db)
    calls = {
        "projection_json": [store.status, store.verify_integrity],
        "payload_json": [store.list_events, store.verify_integrity, store.rebuild_projection],
        "outcome_json": [
            lambda r: store.inspect_operation(r, "apply"),
            store.verify_integrity,
        ],
    }[column]
    for call in calls:
        with pytest.raises(JournalIntegrityError):
            call(run_id)
    assert table_snapshot(db) == before
    commands = {
        "projection_json": [("show", run_id), ("verify", run_id)],
        "payload_json": [("events", run_id), ("verify", run_id)],
        "outcome_json": [("lease", "status", run_id, "apply"), ("verify", run_id)],
    }[column]
    for command in commands:
        result = cli(*command, "--url", store_url)
        assert result.exit_code == 1, (command, result.output, result.exception)
        assert isinstance(result.exception, SystemExit)
        assert "Traceback" not in result.output
    listing = cli("runs", "--url", store_url)
    assert listing.exit_code in (0, 1) and isinstance(listing.exception, SystemExit | None)


# -- hostile export files: bad input (exit 2), nothing written -----------------------------


def _export_lines(store: RunStore, store_url: str, tmp_path: Path) -> list[str]:
    _a_run(store)
    out = tmp_path / "export.jsonl"
    assert cli("export", "--url", store_url, "--out", str(out)).exit_code == 0
    return out.read_text(encoding="utf-8").splitlines()


def _emptied(db: Engine) -> None:
    with db.begin() as connection:
        for table in ("operations", "delivery_bindings", "events", "runs"):
            connection.execute(text(f"DELETE FROM {table}"))


def _with_payload(line: str, payload_json: str) -> str:
    record = json.loads(line)
    record["events"][0]["payload_json"] = payload_json
    return json.dumps(record)


def _with_expiry(line: str, value: int) -> str:
    record = json.loads(line)
    row = record["operations"][0]
    row.update(state="running", outcome_json=None, lease_token="t", lease_expires_at=value)
    return json.dumps(record)


HOSTILE_FILES: list[tuple[str, Any, str]] = [
    ("deep-line", lambda line: DEEP, "export-record-too-deep"),
    ("deep-object-line", lambda line: DEEP_OBJECT, "export-record-too-deep"),
    ("deep-payload", lambda line: _with_payload(line, DEEP), "export-record-too-deep"),
    ("int64-overflow", lambda line: _with_expiry(line, 2**63), "export-record-out-of-range"),
    (
        "int64-underflow",
        lambda line: _with_expiry(line, -(2**63) - 1),
        "export-record-out-of-range",
    ),
    ("not-utf8", lambda line: line.encode() + b"\xff\xfe", "export-file-not-utf8"),
]


@pytest.mark.parametrize(("name", "make", "code"), HOSTILE_FILES, ids=[h[0] for h in HOSTILE_FILES])
def test_a_hostile_export_file_is_bad_input_and_writes_nothing(
    store: RunStore, store_url: str, db: Engine, tmp_path: Path, name: str, make: Any, code: str
) -> None:
    lines = _export_lines(store, store_url, tmp_path)
    _emptied(db)
    hostile = make(lines[0])
    data = hostile if isinstance(hostile, bytes) else hostile.encode()
    path = tmp_path / "hostile.jsonl"
    path.write_bytes(data + b"\n")
    assert_coded(cli("verify", "--file", str(path)), 2, code)
    assert_coded(cli("import", str(path), "--url", store_url), 2, code)
    assert_coded(cli("import", "-", "--url", store_url, input=data + b"\n"), 2, code)
    if not isinstance(hostile, bytes):
        with pytest.raises(InvalidInputError) as raised:
            import_store(store_url, [hostile])
        assert raised.value.code == code
        with pytest.raises(InvalidInputError):
            verify_export([hostile])
    assert all(rows == [] for rows in table_snapshot(db).values())


def test_a_lone_surrogate_in_a_run_id_is_printed_escaped(
    store: RunStore, store_url: str, db: Engine, tmp_path: Path
) -> None:
    lines = _export_lines(store, store_url, tmp_path)
    _emptied(db)
    record = json.loads(lines[0])
    for key in ("events", "operations", "deliveryBindings"):
        for row in record[key]:
            row["run_id"] = "\ud800"
    record["run"]["run_id"] = "\ud800"
    path = tmp_path / "surrogate.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")  # ASCII: \ud800 escaped
    checked = cli("verify", "--file", str(path))
    assert checked.exit_code == 1 and isinstance(checked.exception, SystemExit), checked.output
    assert "BROKEN run \\ud800" in checked.stdout
    assert_coded(cli("import", str(path), "--url", store_url), 2, "export-record-invalid")
    assert all(rows == [] for rows in table_snapshot(db).values())
    shown = cli("show", "\udcff", "--url", store_url)
    assert_coded(shown, 2, "run-not-found")


# -- odd URLs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://x@[::1",
        "sqlite:///" + "a" * 5000,
        "sqlite:///%00x",
    ],
    ids=["broken-ipv6", "long-path", "nul-path"],
)
@pytest.mark.parametrize("command", ["info", "runs", "verify", "upgrade", "export"])
def test_an_odd_url_is_invalid_database_url(url: str, command: str, tmp_path: Path) -> None:
    assert_coded(cli(command, "--url", url), 2, "invalid-database-url")


def test_an_odd_url_as_copy_destination_is_invalid_database_url(store_url: str) -> None:
    assert_coded(
        cli("copy", "--from", store_url, "--to", "sqlite:///%00x"), 2, "invalid-database-url"
    )


# -- values JSON or cadence 1.x cannot carry ---------------------------------------------


@pytest.mark.parametrize(
    "outcome",
    [{"n": 10**400}, {"n": [-(10**400)]}, {"f": math.nan}, {"f": {"g": math.inf}}],
    ids=["huge-int", "huge-negative", "nan", "inf"],
)
def test_an_outcome_number_json_would_turn_into_null_is_refused(
    store: RunStore, db: Engine, outcome: dict[str, Any]
) -> None:
    run_id = _a_run(store)
    lease = store.acquire_lease(run_id, "second", 60_000)
    before = table_snapshot(db)
    with pytest.raises(InvalidInputError) as raised:
        store.commit_lease(lease, outcome)
    assert raised.value.code == "operation-outcome-invalid"
    assert table_snapshot(db) == before
    # numbers JSON does carry are still stored as JavaScript writes them (2**64 rounded)
    stored = store.commit_lease(lease, {"n": 2**64, "f": 1.5})
    assert stored == {"n": 18446744073709552000, "f": 1.5}


def test_a_lease_expiring_past_the_largest_safe_integer_is_refused(
    store: RunStore, store_url: str, db: Engine, clock: FakeClock
) -> None:
    run_id = _a_run(store)
    too_long = MAX_SAFE_INTEGER - clock.now + 1
    before = table_snapshot(db)
    with pytest.raises(InvalidInputError) as raised:
        store.acquire_lease(run_id, "forever", too_long)
    assert raised.value.code == "invalid-lease-ttl"
    lease = store.acquire_lease(run_id, "forever", too_long - 1)
    assert lease.expires_at == MAX_SAFE_INTEGER
    after_acquire = table_snapshot(db)
    renewable = store.acquire_lease(run_id, "renewed", 1_000)
    with pytest.raises(InvalidInputError) as raised:
        store.renew_lease(renewable, too_long)
    assert raised.value.code == "invalid-lease-ttl"
    assert store.inspect_operation(run_id, "renewed").expires_at == renewable.expires_at
    assert before != after_acquire
    result = cli(
        "lease", "acquire", run_id, "cli-forever", "--ttl-ms", str(too_long), "--url", store_url
    )
    assert result.exit_code == 2, result.output
    assert "invalid-lease-ttl" in result.stderr


def test_every_hostile_failure_is_a_cadence_store_error(store: RunStore) -> None:
    run_id = _a_run(store)
    lease = store.acquire_lease(run_id, "x", 1_000)
    with pytest.raises(CadenceStoreError):
        store.commit_lease(lease, {"n": 10**400})


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("postgresql+psycopg://x@[::1", "invalid-database-url"),
        ("sqlite:///%00x", "invalid-database-url"),
        ("sqlite:///" + "a" * 5000, None),  # no such file: coded, as any missing file
    ],
    ids=["broken-ipv6", "nul-path", "long-path"],
)
def test_an_odd_url_through_the_api_is_a_coded_error(url: str, code: str | None) -> None:
    from cadence_store.transfer import copy_store

    for call in (lambda: RunStore(url), lambda: cadence_store.upgrade(url)):
        with pytest.raises(CadenceStoreError) as raised:
            call()
        if code is not None:
            assert raised.value.code == code
    with pytest.raises(CadenceStoreError):
        copy_store(url, url)


def test_a_file_that_is_not_utf8_through_the_api(store_url: str, db: Engine, tmp_path: Path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"run": "caf\xe9"}\n')
    with path.open(encoding="utf-8") as lines, pytest.raises(InvalidInputError) as raised:
        import_store(store_url, lines)
    assert raised.value.code == "export-file-not-utf8"
    with path.open(encoding="utf-8") as lines, pytest.raises(InvalidInputError):
        verify_export(lines)
    assert all(rows == [] for rows in table_snapshot(db).values())


def test_the_command_refuses_an_outcome_json_would_turn_into_null(
    store: RunStore, store_url: str, db: Engine
) -> None:
    run_id = _a_run(store)
    lease = store.acquire_lease(run_id, "cli-commit", 60_000)
    before = table_snapshot(db)
    presented = json.dumps(lease.model_dump(mode="json", by_alias=True))
    result = cli("lease", "commit", presented, "--outcome", '{"n": 1e400}', "--url", store_url)
    assert_coded(result, 2, "operation-outcome-invalid")
    assert table_snapshot(db) == before
