"""Issue 11: operation receipts are verified, by every verification path.

A journal receipt (`operations.outcome_json` of a start, bind or transition) is what a
replay of its operation id returns, so it must be a projection the chain really produced,
at a sequence and event hash of that run's chain. Lease rows must have a known kind and
state and consistent columns. Each forged or malformed row below is edited behind the
store's back in its own run and must be caught by all four paths — `verify_integrity`,
`cadence-store verify`, `cadence-store verify --file` and `cadence-store import` (which
refuses the whole file and writes nothing) — naming the run and the operation id.
SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import Connection, Engine, create_engine, func, select, text

import cadence_store
from cadence_store import JournalIntegrityError, RunStore
from cadence_store.cli import main
from cadence_store.storage.models import delivery_bindings, events, operations, runs
from cadence_store.transfer import check_record, import_store, parse_record, verify_export

ROOT_HASH = "ab" * 32
A, B, C = "a" * 64, "b" * 64, "c" * 64
MISMATCH = "operation-receipt-mismatch"
STATE_INVALID = "operation-state-invalid"
KIND_INVALID = "operation-kind-invalid"
OUTCOME_INVALID = "operation-outcome-invalid"


def build_run(store: RunStore, name: str) -> str:
    """created, bound, two moves, and three lease operations (running, committed,
    interrupted): every kind of operations row."""
    run = store.start_run("abel-implement", change=name, operation_id=f"{name}-start")
    store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="bind")
    store.transition(run.run_id, "validating-delivery", operation_id="validate")
    store.transition(run.run_id, "ready", operation_id="ready")
    store.acquire_lease(run.run_id, "running-lease", 60_000)
    committed = store.acquire_lease(run.run_id, "committed-lease", 60_000)
    store.commit_lease(committed, {"applied": True})
    interrupted = store.acquire_lease(run.run_id, "interrupted-lease", 60_000)
    store.interrupt_lease(interrupted)
    store.verify_integrity(run.run_id)
    return run.run_id


def _outcome(c: Connection, run_id: str, operation_id: str) -> Any:
    return c.execute(
        text("SELECT outcome_json FROM operations WHERE run_id = :r AND operation_id = :o"),
        {"r": run_id, "o": operation_id},
    ).scalar_one()


def set_operation(operation_id: str, column: str, value: Any) -> Callable[[Connection, str], None]:
    assert column in {"kind", "state", "outcome_json", "lease_token", "lease_expires_at"}

    def tamper(c: Connection, run_id: str) -> None:
        c.execute(
            text(f"UPDATE operations SET {column} = :v WHERE run_id = :r AND operation_id = :o"),
            {"v": value, "r": run_id, "o": operation_id},
        )

    return tamper


def edit_receipt(
    operation_id: str, change: Callable[[dict[str, Any]], None]
) -> Callable[[Connection, str], None]:
    def tamper(c: Connection, run_id: str) -> None:
        receipt = json.loads(_outcome(c, run_id, operation_id))
        change(receipt)
        set_operation(operation_id, "outcome_json", json.dumps(receipt, separators=(",", ":")))(
            c, run_id
        )

    return tamper


def receipt_of(source: str) -> Callable[[Connection, str], None]:
    """Copy another operation's (genuine) receipt over the transition's."""

    def tamper(c: Connection, run_id: str) -> None:
        set_operation("ready", "outcome_json", _outcome(c, run_id, source))(c, run_id)

    return tamper


def _put(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(receipt: dict[str, Any]) -> None:
        receipt[key] = value

    return change


@dataclass(frozen=True)
class Case:
    name: str
    tamper: Callable[[Connection, str], None]
    operation_id: str
    code: str


CASES = [
    # the forgery: a transition receipt with its state changed
    Case("forged-state", edit_receipt("ready", _put("state", "completed")), "ready", MISMATCH),
    Case("forged-pause", edit_receipt("validate", _put("pauseCode", "x")), "validate", MISMATCH),
    Case("forged-hash", edit_receipt("bind", _put("eventHash", C)), "bind", MISMATCH),
    Case("future-sequence", edit_receipt("ready", _put("sequence", 9)), "ready", MISMATCH),
    Case("other-run", edit_receipt("bind", _put("runId", "elsewhere")), "bind", MISMATCH),
    Case("not-json", set_operation("bind", "outcome_json", "{oops"), "bind", MISMATCH),
    Case("no-outcome", set_operation("validate", "outcome_json", None), "validate", MISMATCH),
    Case("receipt-running", set_operation("ready", "state", "running"), "ready", STATE_INVALID),
    Case("receipt-token", set_operation("bind", "lease_token", "t"), "bind", STATE_INVALID),
    Case("made-up-kind", set_operation("bind", "kind", "made-up"), "bind", KIND_INVALID),
    Case(
        "bogus-lease-state",
        set_operation("committed-lease", "state", "bogus"),
        "committed-lease",
        STATE_INVALID,
    ),
    Case(
        "running-without-token",
        set_operation("running-lease", "lease_token", None),
        "running-lease",
        STATE_INVALID,
    ),
    Case(
        "running-without-expiry",
        set_operation("running-lease", "lease_expires_at", None),
        "running-lease",
        STATE_INVALID,
    ),
    Case(
        "interrupted-with-token",
        set_operation("interrupted-lease", "lease_token", "t"),
        "interrupted-lease",
        STATE_INVALID,
    ),
    Case(
        "committed-with-expiry",
        set_operation("committed-lease", "lease_expires_at", 5),
        "committed-lease",
        STATE_INVALID,
    ),
    Case(
        "committed-outcome-not-object",
        set_operation("committed-lease", "outcome_json", "[1]"),
        "committed-lease",
        OUTCOME_INVALID,
    ),
]


@pytest.fixture
def store_url(database_url: str) -> str:
    cadence_store.upgrade(database_url)
    return database_url


@pytest.fixture
def store(store_url: str) -> Iterator[RunStore]:
    run_store = RunStore(store_url, root_hash=ROOT_HASH, clock=lambda: 1_000)
    try:
        yield run_store
    finally:
        run_store.close()


@pytest.fixture
def db(store_url: str) -> Iterator[Engine]:
    engine = create_engine(store_url)
    try:
        yield engine
    finally:
        engine.dispose()


def _cli(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(main, list(args), input=input)


def _counts(db: Engine) -> dict[str, int]:
    with db.connect() as connection:
        return {
            table.name: connection.execute(select(func.count()).select_from(table)).scalar_one()
            for table in (runs, events, operations, delivery_bindings)
        }


def test_genuine_receipts_of_every_kind_verify(store: RunStore, store_url: str) -> None:
    run_id = build_run(store, "intact")
    # a receipt that replays an older projection (a bind of an already stored binding)
    store.bind_delivery(run_id, "gate-a", 1, A, operation_id="bind-again")
    assert store.verify_integrity(run_id).sequence == 4
    assert _cli("verify", "--url", store_url).exit_code == 0


def test_every_forged_or_malformed_operation_row_is_caught_by_all_four_paths(
    store: RunStore, store_url: str, db: Engine, tmp_path: Path
) -> None:
    intact = build_run(store, "intact")
    run_ids = {case.name: build_run(store, f"case-{i}") for i, case in enumerate(CASES)}
    for case in CASES:
        with db.begin() as connection:
            case.tamper(connection, run_ids[case.name])
    problems: list[str] = []

    # 1. verify_integrity
    for case in CASES:
        run_id = run_ids[case.name]
        try:
            store.verify_integrity(run_id)
            problems.append(f"{case.name}: not detected by verify_integrity")
        except JournalIntegrityError as error:
            if (error.code, error.run_id, error.operation_id) != (
                case.code,
                run_id,
                case.operation_id,
            ):
                problems.append(f"{case.name}: {error.code} {error.run_id} {error.operation_id}")
            if case.operation_id not in str(error) or run_id not in str(error):
                problems.append(f"{case.name}: message {error}")
    store.verify_integrity(intact)

    # 2. cadence-store verify
    result = _cli("verify", "--url", store_url)
    assert result.exit_code == 1, result.output
    problems += _named(result.output, run_ids, "cadence-store verify")
    assert f"BROKEN run {intact}" not in result.output

    # 3. cadence-store verify --file (and the offline API)
    export = tmp_path / "export.jsonl"
    assert _cli("export", "--url", store_url, "--out", str(export)).exit_code == 0
    result = _cli("verify", "--file", str(export))
    assert result.exit_code == 1, result.output
    problems += _named(result.output, run_ids, "verify --file")
    assert f"{len(CASES)} broken" in result.output
    lines = export.read_text(encoding="utf-8").splitlines()
    by_run = {check.run_id: check for check in verify_export(lines)}
    for case in CASES:
        check = by_run[run_ids[case.name]]
        if check.ok or check.code != case.code or check.operation_id != case.operation_id:
            problems.append(f"{case.name}: verify_export said {check}")
    assert not problems, "\n".join(problems)

    # 4. import: the whole file is refused, nothing written
    with db.begin() as connection:
        for table in (operations, delivery_bindings, events, runs):
            connection.execute(table.delete())
    for case in CASES:
        one = [line for line in lines if run_ids[case.name] in line or intact in line]
        result = _cli("import", "-", "--url", store_url, input="\n".join(one) + "\n")
        assert result.exit_code == 1, (case.name, result.output)
        assert f"error: {case.code}" in result.stderr, (case.name, result.stderr)
        assert case.operation_id in result.stderr and run_ids[case.name] in result.stderr
        with pytest.raises(JournalIntegrityError) as raised:
            import_store(store_url, one)
        assert raised.value.operation_id == case.operation_id
        assert _counts(db) == {name: 0 for name in _counts(db)}, case.name


def _named(output: str, run_ids: dict[str, str], path: str) -> list[str]:
    problems = []
    for case in CASES:
        lines = [
            line
            for line in output.splitlines()
            if line.startswith(f"BROKEN run {run_ids[case.name]}")
        ]
        if len(lines) != 1 or case.code not in lines[0] or case.operation_id not in lines[0]:
            problems.append(f"{case.name}: {path} said {lines}")
    return problems


@pytest.mark.parametrize(
    ("tampers", "operation_id", "code"),
    [
        # two located receipts: "ready" (sequence 4) before "validate" (3) by id
        (
            [set_operation("ready", "state", "running"), set_operation("validate", "kind", "x")],
            "ready",
            STATE_INVALID,
        ),
        # ...and an unlocated lease row before both by id
        (
            [
                set_operation("ready", "state", "running"),
                set_operation("validate", "kind", "x"),
                set_operation("committed-lease", "state", "bogus"),
            ],
            "committed-lease",
            STATE_INVALID,
        ),
    ],
)
def test_of_several_bad_operations_rows_the_first_by_operation_id_is_named(
    store: RunStore,
    db: Engine,
    tampers: list[Callable[[Connection, str], None]],
    operation_id: str,
    code: str,
) -> None:
    """Rows the sequence index locates and rows it does not are judged in one order, the
    operation ids', whichever read meets them first (issue 27: the located ones are no
    longer read by a scan of every row of the run)."""
    run_id = build_run(store, "several")
    with db.begin() as connection:
        for tamper in tampers:
            tamper(connection, run_id)
    with pytest.raises(JournalIntegrityError) as raised:
        store.verify_integrity(run_id)
    assert (raised.value.code, raised.value.operation_id) == (code, operation_id)


def test_a_genuine_receipt_copied_to_another_operation_is_still_a_chain_projection(
    store: RunStore, db: Engine
) -> None:
    """The rule is "a projection the chain produced": an older genuine one passes (a
    replay returns it, as a bind of an already stored binding does)."""
    run_id = build_run(store, "copied")
    with db.begin() as connection:
        receipt_of("validate")(connection, run_id)
    store.verify_integrity(run_id)


def test_an_export_with_a_made_up_kind_or_bogus_state_is_refused(
    store: RunStore, store_url: str
) -> None:
    run_id = build_run(store, "exported")
    with RunStore(store_url) as reader, reader.engine.connect() as connection:
        from cadence_store.transfer import read_record

        record = read_record(connection, run_id)
    assert record is not None and check_record(record).ok
    for column, value, code in (
        ("kind", "made-up", KIND_INVALID),
        ("state", "bogus", STATE_INVALID),
    ):
        edited = json.loads(json.dumps(record))
        row = next(r for r in edited["operations"] if r["operation_id"] == "committed-lease")
        row[column] = value
        check = check_record(parse_record(json.dumps(edited)))
        assert not check.ok and check.code == code and check.operation_id == "committed-lease"
        with pytest.raises(JournalIntegrityError) as raised:
            import_store(store_url, [json.dumps(edited)])
        assert raised.value.code == code


def test_receipts_with_escaped_text_verify_and_their_forgeries_do_not(
    store: RunStore, db: Engine
) -> None:
    """A pause code with a lone surrogate, U+2028 and a quote: the receipt holds
    `JSON.stringify`'s escapes, which the quick comparison does not produce."""
    run = store.start_run("abel-implement", change="escaped", operation_id="escaped-start")
    store.transition(run.run_id, "paused", operation_id="odd", code='\ud800 \u2028 "x"')
    store.verify_integrity(run.run_id)
    with db.begin() as connection:
        edit_receipt("odd", _put("pauseCode", "plain"))(connection, run.run_id)
    with pytest.raises(JournalIntegrityError) as raised:
        store.verify_integrity(run.run_id)
    assert raised.value.code == MISMATCH and raised.value.operation_id == "odd"
    assert "outcome_json.pauseCode" in str(raised.value)


# Rows cadence 1.x wrote in ordinary use, which an adopted store keeps: its acquireLease
# upserted over a journal receipt's operation id (keeping the receipt's kind), and it
# granted TTLs up to 2**53 - 1, so an expiry may pass that.
TAKEN_OVER = {"state": "running", "outcome_json": None, "lease_token": "t-1"}
LEGACY_ROWS = [
    ("ready", {**TAKEN_OVER, "lease_expires_at": 61_000}),
    ("validate", {**TAKEN_OVER, "state": "interrupted", "lease_token": None}),
    ("running-lease", {"lease_expires_at": 2**53 + 1_000}),
]


def test_rows_cadence1x_wrote_in_ordinary_use_verify_by_every_path(
    store: RunStore, store_url: str, db: Engine, tmp_path: Path
) -> None:
    run_id = build_run(store, "legacy")
    with db.begin() as connection:
        for operation_id, values in LEGACY_ROWS:
            for column, value in values.items():
                set_operation(operation_id, column, value)(connection, run_id)
    assert store.verify_integrity(run_id).sequence == 4
    assert _cli("verify", "--url", store_url).exit_code == 0
    export = tmp_path / "export.jsonl"
    assert _cli("export", "--url", store_url, "--out", str(export)).exit_code == 0
    result = _cli("verify", "--file", str(export))
    assert result.exit_code == 0, result.output
    # the same shapes stay refused where cadence 1.x never wrote them
    with db.begin() as connection:
        set_operation("ready", "lease_token", None)(connection, run_id)
    with pytest.raises(JournalIntegrityError) as raised:
        store.verify_integrity(run_id)
    assert (raised.value.code, raised.value.operation_id) == (STATE_INVALID, "ready")
