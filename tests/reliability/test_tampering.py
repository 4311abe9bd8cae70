"""Issue 7: no tampering goes unnoticed.

Stored rows are edited behind the store's back — an event's payload, hash or prior hash,
an event deleted (first, middle, last), two events' sequences swapped, a chain truncated,
a projection field or a mirrored run column changed — and both ``verify_integrity``
(``JournalIntegrityError`` with ``.run_id`` and ``.sequence`` = the first bad sequence;
``run-projection-integrity-mismatch`` for projection edits) and
``cadence-store verify --url URL`` (exit code 1, naming the run and the sequence) must
notice. Untouched runs beside them still verify. SQLite and PostgreSQL.

Every case tampers with its own run, so one database per engine holds them all and one
``cadence-store verify`` run checks every verdict at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, Engine, text

from cadence_store import JournalIntegrityError, RunStore
from cadence_store.cli import main
from cadence_store.journal import hash_event

ROOT_HASH = "ab" * 32
A, B, C = "a" * 64, "b" * 64, "c" * 64
CHAIN = 6  # events in every tampered run
MISMATCH = "run-projection-integrity-mismatch"
CHAIN_CODES = {
    "event-integrity-hash-chain",
    "event-integrity-empty",
    "event-integrity-duplicate-create",
    "event-integrity-missing-run",
}


def build_run(store: RunStore, name: str) -> str:
    """created, delivery-bound (with a proof), three moves, paused with a code: 6 events."""
    run = store.start_run("abel-implement", change=name, operation_id=f"{name}-start")
    store.bind_delivery(
        run.run_id,
        "gate-a",
        1,
        A,
        operation_id=f"{name}-bind",
        approval_proof={"revision": 1, "contract_hash": B, "record_hash": C},
    )
    for state in ("validating-delivery", "ready", "running"):
        store.transition(run.run_id, state, operation_id=f"{name}-{state}")
    store.transition(run.run_id, "paused", operation_id=f"{name}-pause", code="hold")
    assert store.verify_integrity(run.run_id).sequence == CHAIN
    return run.run_id


# -- tampering, with plain SQL on a separate connection -----------------------------------------


def _event(c: Connection, run_id: str, sequence: int) -> dict[str, Any]:
    row = c.execute(
        text(
            "SELECT type, payload_json, prior_hash, event_hash FROM events "
            "WHERE run_id = :r AND sequence = :s"
        ),
        {"r": run_id, "s": sequence},
    ).one()
    return dict(row._mapping)


def _set_event(c: Connection, run_id: str, sequence: int, column: str, value: Any) -> None:
    assert column in {"payload_json", "prior_hash", "event_hash", "type", "sequence"}
    c.execute(
        text(f"UPDATE events SET {column} = :v WHERE run_id = :r AND sequence = :s"),
        {"v": value, "r": run_id, "s": sequence},
    )


def _other_hash(value: str) -> str:
    return value[:-1] + ("0" if value[-1] != "0" else "1")


def edit_payload(k: int) -> Callable[[Connection, str], None]:
    def tamper(c: Connection, run_id: str) -> None:
        payload = json.loads(_event(c, run_id, k)["payload_json"])
        payload["tampered"] = True
        _set_event(c, run_id, k, "payload_json", json.dumps(payload, separators=(",", ":")))

    return tamper


def edit_payload_value(k: int) -> Callable[[Connection, str], None]:
    """Change a value the projection depends on (same keys, same length)."""

    def tamper(c: Connection, run_id: str) -> None:
        raw = _event(c, run_id, k)["payload_json"]
        edited = raw.replace("gate-a", "gate-b").replace('"ready"', '"rEady"')
        edited = edited.replace("abel-implement", "abel-implemenT").replace('"hold"', '"hol!"')
        assert edited != raw, raw
        _set_event(c, run_id, k, "payload_json", edited)

    return tamper


def edit_payload_and_rehash(k: int) -> Callable[[Connection, str], None]:
    """A forger who also recomputes the edited event's own hash."""

    def tamper(c: Connection, run_id: str) -> None:
        event = _event(c, run_id, k)
        payload = json.loads(event["payload_json"])
        payload["tampered"] = True
        _set_event(c, run_id, k, "payload_json", json.dumps(payload, separators=(",", ":")))
        forged = hash_event(k, event["type"], payload, event["prior_hash"])
        _set_event(c, run_id, k, "event_hash", forged)

    return tamper


def edit_hash(k: int) -> Callable[[Connection, str], None]:
    def tamper(c: Connection, run_id: str) -> None:
        _set_event(c, run_id, k, "event_hash", _other_hash(_event(c, run_id, k)["event_hash"]))

    return tamper


def edit_prior_hash(k: int) -> Callable[[Connection, str], None]:
    def tamper(c: Connection, run_id: str) -> None:
        _set_event(c, run_id, k, "prior_hash", _other_hash(_event(c, run_id, k)["prior_hash"]))

    return tamper


def edit_type(k: int) -> Callable[[Connection, str], None]:
    def tamper(c: Connection, run_id: str) -> None:
        _set_event(c, run_id, k, "type", "operation-interrupted")

    return tamper


def delete_event(k: int) -> Callable[[Connection, str], None]:
    def tamper(c: Connection, run_id: str) -> None:
        c.execute(
            text("DELETE FROM events WHERE run_id = :r AND sequence = :s"),
            {"r": run_id, "s": k},
        )

    return tamper


def truncate(count: int) -> Callable[[Connection, str], None]:
    def tamper(c: Connection, run_id: str) -> None:
        c.execute(
            text("DELETE FROM events WHERE run_id = :r AND sequence > :s"),
            {"r": run_id, "s": CHAIN - count},
        )

    return tamper


def swap(k: int) -> Callable[[Connection, str], None]:
    """Events k and k+1 trade sequence numbers (through a free number: the key is unique)."""

    def tamper(c: Connection, run_id: str) -> None:
        _set_event(c, run_id, k, "sequence", 1000)
        _set_event(c, run_id, k + 1, "sequence", k)
        _set_event(c, run_id, 1000, "sequence", k + 1)

    return tamper


def edit_projection(change: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[..., None]:
    def tamper(c: Connection, run_id: str) -> None:
        stored = c.execute(
            text("SELECT projection_json FROM runs WHERE run_id = :r"), {"r": run_id}
        ).scalar_one()
        edited = change(json.loads(stored))
        c.execute(
            text("UPDATE runs SET projection_json = :v WHERE run_id = :r"),
            {"v": json.dumps(edited, separators=(",", ":")), "r": run_id},
        )

    return tamper


def set_projection_text(value: str) -> Callable[[Connection, str], None]:
    def tamper(c: Connection, run_id: str) -> None:
        c.execute(
            text("UPDATE runs SET projection_json = :v WHERE run_id = :r"),
            {"v": value, "r": run_id},
        )

    return tamper


def set_column(column: str, value: Any) -> Callable[[Connection, str], None]:
    allowed = {
        "state",
        "sequence",
        "event_hash",
        "delivery_revision",
        "terminal_tombstone",
        "root_hash",
        "stage",
        "change_name",
        "lookup_key",
    }
    assert column in allowed

    def tamper(c: Connection, run_id: str) -> None:
        c.execute(
            text(f"UPDATE runs SET {column} = :v WHERE run_id = :r"), {"v": value, "r": run_id}
        )

    return tamper


def _with(key: str, value: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda projection: {**projection, key: value}


def _without(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda projection: {k: v for k, v in projection.items() if k != key}


def _reordered(projection: dict[str, Any]) -> dict[str, Any]:
    state = projection.pop("state")
    return {**projection, "state": state}


@dataclass(frozen=True)
class Case:
    name: str
    tamper: Callable[[Connection, str], None]
    sequence: int  # the first bad sequence
    code: str | set[str]

    def matches(self, code: str) -> bool:
        return code == self.code if isinstance(self.code, str) else code in self.code


CHAINED = CHAIN_CODES | {"event-integrity-delivery-binding", "event-integrity-state-mismatch"}

CASES = [
    # an event's payload
    Case("payload-first", edit_payload(1), 1, "event-integrity-hash-chain"),
    Case("payload-middle", edit_payload(3), 3, "event-integrity-hash-chain"),
    Case("payload-last", edit_payload(CHAIN), CHAIN, "event-integrity-hash-chain"),
    Case("payload-value-first", edit_payload_value(1), 1, "event-integrity-hash-chain"),
    Case("payload-value-binding", edit_payload_value(2), 2, "event-integrity-hash-chain"),
    Case("payload-value-last", edit_payload_value(CHAIN), CHAIN, "event-integrity-hash-chain"),
    Case("payload-not-json", lambda c, r: _set_event(c, r, 4, "payload_json", "{"), 4, CHAINED),
    Case("payload-rehashed-middle", edit_payload_and_rehash(3), 4, "event-integrity-hash-chain"),
    Case("payload-rehashed-last", edit_payload_and_rehash(CHAIN), CHAIN, MISMATCH),
    Case("type-middle", edit_type(3), 3, "event-integrity-hash-chain"),
    # hashes
    Case("hash-first", edit_hash(1), 1, "event-integrity-hash-chain"),
    Case("hash-middle", edit_hash(3), 3, "event-integrity-hash-chain"),
    Case("hash-last", edit_hash(CHAIN), CHAIN, "event-integrity-hash-chain"),
    Case("hash-not-hex", lambda c, r: _set_event(c, r, 2, "event_hash", "zz"), 2, CHAINED),
    Case("prior-hash-first", edit_prior_hash(1), 1, "event-integrity-hash-chain"),
    Case("prior-hash-middle", edit_prior_hash(4), 4, "event-integrity-hash-chain"),
    Case("prior-hash-last", edit_prior_hash(CHAIN), CHAIN, "event-integrity-hash-chain"),
    # deleting and reordering events
    Case("delete-first", delete_event(1), 1, CHAINED),
    Case("delete-second", delete_event(2), 2, "event-integrity-hash-chain"),
    Case("delete-middle", delete_event(4), 4, "event-integrity-hash-chain"),
    Case("delete-all", truncate(CHAIN), 1, CHAINED),
    Case("swap-first-two", swap(1), 1, CHAINED),
    Case("swap-middle", swap(3), 3, "event-integrity-hash-chain"),
    Case("swap-last-two", swap(CHAIN - 1), CHAIN - 1, "event-integrity-hash-chain"),
    # the stored projection
    Case("projection-state", edit_projection(_with("state", "completed")), CHAIN, MISMATCH),
    Case("projection-sequence", edit_projection(_with("sequence", 99)), CHAIN, MISMATCH),
    Case("projection-event-hash", edit_projection(_with("eventHash", C)), CHAIN, MISMATCH),
    Case("projection-run-id", edit_projection(_with("runId", "other")), CHAIN, MISMATCH),
    Case("projection-root-hash", edit_projection(_with("rootHash", "cd" * 32)), CHAIN, MISMATCH),
    Case("projection-stage", edit_projection(_with("stage", "abel-design")), CHAIN, MISMATCH),
    Case("projection-change", edit_projection(_with("change", "other")), CHAIN, MISMATCH),
    Case("projection-revision", edit_projection(_with("deliveryRevision", 7)), CHAIN, MISMATCH),
    Case("projection-bindings", edit_projection(_with("deliveryBindings", [])), CHAIN, MISMATCH),
    Case("projection-pause-code", edit_projection(_with("pauseCode", "go")), CHAIN, MISMATCH),
    Case("projection-pause-code-gone", edit_projection(_without("pauseCode")), CHAIN, MISMATCH),
    Case("projection-terminal-added", edit_projection(_with("terminal", "x")), CHAIN, MISMATCH),
    Case("projection-extra-field", edit_projection(_with("extra", 1)), CHAIN, MISMATCH),
    Case("projection-key-order", edit_projection(_reordered), CHAIN, MISMATCH),
    # the run columns that mirror the projection
    Case("column-state", set_column("state", "running"), CHAIN, MISMATCH),
    Case("column-sequence", set_column("sequence", CHAIN + 1), CHAIN, MISMATCH),
    Case("column-event-hash", set_column("event_hash", C), CHAIN, MISMATCH),
    Case("column-delivery-revision", set_column("delivery_revision", 9), CHAIN, MISMATCH),
    Case("column-terminal", set_column("terminal_tombstone", "completed"), CHAIN, MISMATCH),
]

# The brief's rule, "the first bad sequence", for a chain that lost its tail: the first
# missing sequence.
TRUNCATIONS = [
    Case("delete-last", delete_event(CHAIN), CHAIN, CHAINED | {MISMATCH}),
    Case("truncate-1", truncate(1), CHAIN, CHAINED | {MISMATCH}),
    Case("truncate-2", truncate(2), CHAIN - 1, CHAINED | {MISMATCH}),
    Case("truncate-all-but-one", truncate(CHAIN - 1), 2, CHAINED | {MISMATCH}),
]

# A stored projection that does not parse: detected, but the error carries no run / sequence.
UNPARSEABLE = [
    Case("projection-not-json", set_projection_text("{"), CHAIN, MISMATCH),
    Case("projection-not-an-object", set_projection_text("[]"), CHAIN, MISMATCH),
    Case("projection-without-run-id", edit_projection(_without("runId")), CHAIN, MISMATCH),
]

# Run columns that mirror projection fields but are not compared by verify_integrity.
COLUMN_GAPS = [
    Case("column-root-hash", set_column("root_hash", "cd" * 32), CHAIN, MISMATCH),
    Case("column-stage", set_column("stage", "abel-design"), CHAIN, MISMATCH),
    Case("column-change-name", set_column("change_name", "someone-else"), CHAIN, MISMATCH),
]


# Fixtures store_url, store and db: tests/store_fixtures.py


def tamper_runs(store: RunStore, db: Engine, cases: list[Case]) -> dict[str, str]:
    """One fresh run per case, tampered; returns case name -> run id."""
    runs = {case.name: build_run(store, f"tamper-{i}") for i, case in enumerate(cases)}
    for case in cases:
        with db.begin() as connection:
            case.tamper(connection, runs[case.name])
    return runs


def check_verify_integrity(store: RunStore, case: Case, run_id: str) -> list[str]:
    try:
        store.verify_integrity(run_id)
    except JournalIntegrityError as error:
        problems = []
        if not case.matches(error.code):
            problems.append(f"code {error.code}, expected {case.code}")
        if error.run_id != run_id:
            problems.append(f"run_id {error.run_id!r}")
        if error.sequence != case.sequence:
            problems.append(f"sequence {error.sequence}, expected {case.sequence}")
        return [f"{case.name}: {p}" for p in problems]
    return [f"{case.name}: NOT DETECTED by verify_integrity"]


def cli_verify(url: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["verify", "--url", url])
    return result.exit_code, result.output


def check_cli(output: str, case: Case, run_id: str) -> list[str]:
    lines = [line for line in output.splitlines() if line.startswith(f"BROKEN run {run_id}")]
    if len(lines) != 1:
        return [f"{case.name}: cadence-store verify does not name the run ({len(lines)} lines)"]
    if not re.search(rf"\bsequence {case.sequence}\b", lines[0]):
        return [f"{case.name}: cadence-store verify said {lines[0]!r}"]
    return []


# -- the tests ------------------------------------------------------------------------------------


def test_every_kind_of_tampering_is_detected(store_url: str, store: RunStore, db: Engine) -> None:
    intact = build_run(store, "untouched")
    runs = tamper_runs(store, db, CASES)
    problems: list[str] = []
    for case in CASES:
        problems += check_verify_integrity(store, case, runs[case.name])
    assert store.verify_integrity(intact).sequence == CHAIN  # tampering stayed local
    exit_code, output = cli_verify(store_url)
    assert exit_code == 1, output
    for case in CASES:
        problems += check_cli(output, case, runs[case.name])
    assert f"BROKEN run {intact}" not in output
    assert f"{len(CASES)} broken" in output, output[-300:]
    assert not problems, "\n".join(problems)


def test_a_named_run_is_verified_alone(store_url: str, store: RunStore, db: Engine) -> None:
    intact = build_run(store, "untouched")
    case = CASES[1]
    runs = tamper_runs(store, db, [case])
    exit_code, output = cli_one(store_url, runs[case.name])
    assert exit_code == 1, output
    assert not check_cli(output, case, runs[case.name])
    exit_code, output = cli_one(store_url, intact)
    assert exit_code == 0, output
    assert "1 ok, 0 broken" in output


def cli_one(url: str, run_id: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["verify", run_id, "--url", url])
    return result.exit_code, result.output


def test_a_truncated_chain_names_its_first_missing_sequence(
    store_url: str, store: RunStore, db: Engine
) -> None:
    runs = tamper_runs(store, db, TRUNCATIONS)
    problems: list[str] = []
    for case in TRUNCATIONS:
        problems += check_verify_integrity(store, case, runs[case.name])
    exit_code, output = cli_verify(store_url)
    assert exit_code == 1
    for case in TRUNCATIONS:
        problems += check_cli(output, case, runs[case.name])
    assert not problems, "\n".join(problems)


def test_a_truncated_chain_is_detected(store_url: str, store: RunStore, db: Engine) -> None:
    """Detection itself (whatever the sequence reported) works today."""
    runs = tamper_runs(store, db, TRUNCATIONS)
    for case in TRUNCATIONS:
        with pytest.raises(JournalIntegrityError) as info:
            store.verify_integrity(runs[case.name])
        assert case.matches(info.value.code) and info.value.run_id == runs[case.name]
    exit_code, output = cli_verify(store_url)
    assert exit_code == 1
    assert f"{len(TRUNCATIONS)} broken" in output
    for run_id in runs.values():
        assert f"BROKEN run {run_id}" in output


def test_an_unparseable_projection_is_detected(store_url: str, store: RunStore, db: Engine):
    runs = tamper_runs(store, db, UNPARSEABLE)
    for case in UNPARSEABLE:
        with pytest.raises(JournalIntegrityError) as info:
            store.verify_integrity(runs[case.name])
        assert info.value.code == MISMATCH
    exit_code, output = cli_verify(store_url)
    assert exit_code == 1
    problems = [p for case in UNPARSEABLE for p in check_cli(output, case, runs[case.name])]
    assert not problems, problems


def test_an_unparseable_projection_names_the_run_and_sequence(
    store_url: str, store: RunStore, db: Engine
) -> None:
    runs = tamper_runs(store, db, UNPARSEABLE)
    problems: list[str] = []
    for case in UNPARSEABLE:
        problems += check_verify_integrity(store, case, runs[case.name])
    assert not problems, "\n".join(problems)


def test_mirrored_identity_columns_are_verified(store_url: str, store: RunStore, db: Engine):
    runs = tamper_runs(store, db, COLUMN_GAPS)
    problems: list[str] = []
    for case in COLUMN_GAPS:
        problems += check_verify_integrity(store, case, runs[case.name])
    assert not problems, "\n".join(problems)


def test_delivery_binding_rows_are_verified(store_url: str, store: RunStore, db: Engine) -> None:
    deleted, edited = build_run(store, "binding-deleted"), build_run(store, "binding-edited")
    with db.begin() as c:
        c.execute(text("DELETE FROM delivery_bindings WHERE run_id = :r"), {"r": deleted})
        c.execute(
            text("UPDATE delivery_bindings SET receipt_hash = :h WHERE run_id = :r"),
            {"h": C, "r": edited},
        )
    undetected = []
    for run_id in (deleted, edited):
        try:
            store.verify_integrity(run_id)
            undetected.append(run_id)
        except JournalIntegrityError:
            pass
    assert not undetected


# -- hypothesis: random chains, random single edits ------------------------------------------------

KINDS = ("payload", "value", "hash", "prior", "delete", "swap")
TAMPER = settings(
    max_examples=8,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@st.composite
def chains_and_edits(draw: st.DrawFn, kind: str) -> tuple[list[tuple[str, Any]], str, int, Any]:
    steps = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("bind"), st.integers(1, 5)),
                st.tuples(st.just("pause"), st.text(min_size=1, max_size=12)),
                st.tuples(st.just("resume"), st.none()),
            ),
            min_size=1,
            max_size=8,
        )
    )
    length = 1 + len(steps)
    limit = length - 1 if kind in ("delete", "swap") else length
    assume(limit >= 1)
    position = draw(st.integers(1, limit))
    value = draw(
        st.one_of(
            st.integers(-(2**60), 2**60),
            st.text(max_size=10),
            st.booleans(),
            st.none(),
            st.lists(st.integers(), max_size=3),
        )
    )
    return steps, kind, position, value


def _grow(store: RunStore, name: str, steps: list[tuple[str, Any]]) -> str:
    run = store.start_run("abel-implement", change=name, operation_id=f"{name}-start")
    paused = False
    for i, (step, argument) in enumerate(steps):
        op = f"{name}-{i}"
        if step == "bind":
            store.bind_delivery(run.run_id, "gate-b", argument + 10 * i, B, operation_id=op)
        elif step == "pause" or not paused:
            store.transition(run.run_id, "paused", operation_id=op, code=argument)
            paused = True
        else:
            store.transition(run.run_id, "ready", operation_id=op)
            paused = False
    return run.run_id


def test_random_single_edits_are_detected_at_their_sequence(store: RunStore, db: Engine) -> None:
    counter = iter(range(10_000))
    seen: list[str] = []
    for tamper_kind in KINDS:
        _random_edits(store, db, tamper_kind, counter, seen)
    assert set(seen) == set(KINDS)


def _random_edits(
    store: RunStore, db: Engine, tamper_kind: str, counter: Iterator[int], seen: list[str]
) -> None:
    @TAMPER
    @given(chains_and_edits(tamper_kind))
    def check(example: tuple[list[tuple[str, Any]], str, int, Any]) -> None:
        steps, kind, k, value = example
        run_id = _grow(store, f"random-{next(counter)}", steps)
        with db.begin() as c:
            event = _event(c, run_id, k)
            if kind == "payload":
                payload = json.loads(event["payload_json"])
                before = json.dumps(payload, sort_keys=True)
                payload["tampered"] = value
                assume(json.dumps(payload, sort_keys=True) != before)
                _set_event(c, run_id, k, "payload_json", json.dumps(payload))
            elif kind == "value":
                payload = json.loads(event["payload_json"])
                key = sorted(payload)[0]
                assume(payload[key] != value)
                payload[key] = value
                _set_event(c, run_id, k, "payload_json", json.dumps(payload))
            elif kind == "hash":
                _set_event(c, run_id, k, "event_hash", _other_hash(event["event_hash"]))
            elif kind == "prior":
                _set_event(c, run_id, k, "prior_hash", _other_hash(event["prior_hash"]))
            elif kind == "delete":
                delete_event(k)(c, run_id)
            else:
                swap(k)(c, run_id)
        with pytest.raises(JournalIntegrityError) as info:
            store.verify_integrity(run_id)
        assert info.value.run_id == run_id
        assert info.value.sequence == k, (kind, k, info.value)
        seen.append(kind)

    check()
