"""The Python half of `tools/differential_cadence1x.py`, without Node or cadence 1.x's
sources: its seeded choice of calls, every call made on a real SQLite store, and the
classing of differences by the README's list."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import cadence_store
from cadence_store import CadenceStoreError, RunStore

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from differential_calls import Call, Chooser, Knowledge
from differential_findings import TYPED, classify, classify_verification
from differential_sides import HostRefused, call_cadence_store, python_outcome

ROOT_HASH = "ab" * 32


def _calls(seed: int, count: int) -> list[tuple[str, Any, str | None]]:
    chooser = Chooser(seed, Knowledge())
    return [(call.name, call.args, call.write) for call in (chooser.next() for _ in range(count))]


def test_a_seed_makes_the_same_calls_and_another_seed_others() -> None:
    assert _calls(7, 300) == _calls(7, 300)
    assert _calls(7, 300) != _calls(8, 300)


def test_every_call_is_made_and_answers_with_a_value_or_a_code(sqlite_database_url: str) -> None:
    """3,000 calls learning from the store's answers: every kind is made, runs and leases
    are learned, and every bad input is a coded error (or the host's own exception)."""
    cadence_store.upgrade(sqlite_database_url)
    known = Knowledge()
    chooser = Chooser(11, known, bad_inputs=0.2)
    outcomes: Counter[str] = Counter()
    with RunStore(sqlite_database_url, root_hash=ROOT_HASH, clock=lambda: known.now) as store:
        for _ in range(3_000):
            call = chooser.next()
            if call.name == "clock":
                known.now = call.args[0]
                continue
            try:
                value = call_cadence_store(store, call, [0])
            except (CadenceStoreError, HostRefused):
                outcomes[f"{call.name} error"] += 1
                continue
            python_outcome(value)  # every value the store returns has its comparable form
            known.learn(call, value)
            outcomes[f"{call.name} ok"] += 1
    assert set(Chooser.WEIGHTS) - {"clock"} <= {key.split()[0] for key in outcomes}
    assert outcomes["startRun ok"] and outcomes["transition ok"] and outcomes["acquireLease ok"]
    assert outcomes["transition error"] and outcomes["startRun error"]
    assert len(known.runs) > 5 and len(known.leases) > 5
    assert len(known.tokens) == len({lease["token"] for lease, _ in known.leases})


LEASE = {"runId": "r", "operationId": "o", "token": "t", "expiresAt": 5}
OK = ("ok", '{"sequence":2}')


@pytest.mark.parametrize(
    ("call", "cadence_store_answer", "cadence_1x_answer", "context", "label"),
    [
        (
            Call("bindDeliveryAtomically", [{}], "count"),
            OK,
            OK,
            {"writes_py": 0, "writes_js": 1, "sequence_before": 2, "sequence_after": 2},
            "replayed-binds-skip-write",
        ),
        (  # the write ran and the bind appended: not a replay
            Call("bindDeliveryAtomically", [{}], "count"),
            OK,
            OK,
            {"writes_py": 0, "writes_js": 1, "sequence_before": 1, "sequence_after": 2},
            "undocumented",
        ),
        (
            Call("acquireLease", [{"ttlMs": 5}]),
            ("error", "operation-id-conflict"),
            OK,
            {"operation_kind_before": "start"},
            "journal-receipt-never-becomes-lease",
        ),
        (
            Call("acquireLease", [{"ttlMs": 5}]),
            ("error", "operation-id-conflict"),
            OK,
            {"operation_kind_before": "lease"},
            "undocumented",
        ),
        (
            Call("acquireLease", [{"ttlMs": 2**53 - 1}]),
            ("error", "invalid-lease-ttl"),
            OK,
            {"now": 10},
            "lease-ttls-and-times-past-2**53-refused",
        ),
        (
            Call("transitionAtomically", [{}], "sql"),
            ("error", "run-store-host-write-failed"),
            ("error", "sqlite-error: no such table: differential_missing_host_table"),
            {},
            "a-hosts-failure-is-the-hosts",
        ),
        (
            Call("assertLease", [LEASE], tags=("malformed-lease",)),
            ("error", "invalid-lease"),
            OK,
            {},
            "lease-mappings-are-checked",
        ),
        (
            Call("assertLease", [LEASE]),
            ("error", "invalid-lease"),
            OK,
            {},
            "undocumented",
        ),
        (  # a number as an operation id, refused with its code; 1.x took it
            Call("startRun", [{"stage": "abel-implement", "change": "a", "operationId": 7}]),
            ("error", "invalid-operation-id"),
            OK,
            {},
            TYPED,
        ),
        (  # and where 1.x refused it otherwise
            Call("transition", [{"runId": "r", "to": "paused", "operationId": "m", "code": 5}]),
            ("error", "invalid-transition-code"),
            ("error", "run-not-found"),
            {},
            TYPED,
        ),
        (
            Call("status", [5]),
            ("error", "invalid-run-id"),
            ("error", "run-not-found"),
            {},
            TYPED,
        ),
        (
            Call("acquireLease", [{"runId": "r", "operationId": "o", "ttlMs": 5, "preempt": 1}]),
            ("error", "invalid-lease-option"),
            OK,
            {},
            TYPED,
        ),
        (
            Call("commitLease", [LEASE, None]),
            ("error", "operation-outcome-invalid"),
            ("error", "lease-fenced"),
            {},
            TYPED,
        ),
        (  # a change of another type with a key: start_run's lookup-key code
            Call("startRun", [{"stage": "abel-design", "provisionalKey": "k", "change": 7}]),
            ("error", "invalid-run-lookup-key"),
            OK,
            {},
            TYPED,
        ),
        (  # the tag says so, the values do not: well-typed
            Call(
                "transition",
                [{"runId": "r", "to": "paused", "operationId": "m", "code": "5"}],
                tags=("code a number",),
            ),
            ("error", "invalid-transition-code"),
            OK,
            {},
            "undocumented",
        ),
        (  # another type, but another code than that field's
            Call("startRun", [{"stage": "abel-implement", "change": "a", "operationId": 7}]),
            ("error", "invalid-change"),
            OK,
            {},
            "undocumented",
        ),
        (  # the same answer: not this case
            Call("status", [5]),
            ("error", "invalid-run-id"),
            ("error", "invalid-run-id"),
            {},
            "undocumented",
        ),
        (  # a revision of another type is not among the README's fields
            Call("bindDelivery", [{"runId": "r", "revision": "1", "operationId": "b"}]),
            ("error", "invalid-delivery-binding"),
            OK,
            {},
            "undocumented",
        ),
    ],
)
def test_a_difference_is_documented_only_when_it_is_exactly_the_readmes_case(
    call: Call,
    cadence_store_answer: tuple[str, str],
    cadence_1x_answer: tuple[str, str],
    context: dict[str, Any],
    label: str,
) -> None:
    full = {
        "writes_py": 0,
        "writes_js": 0,
        "sequence_before": None,
        "sequence_after": None,
        "operation_kind_before": None,
        "now": 0,
        **context,
    }
    assert classify(call, cadence_store_answer, cadence_1x_answer, full) == label


RUN = "01a24d94-ae04-7c1a-8fec-6665057fd359"
OUTCOME_PROBLEM = (
    f"operation-outcome-invalid: run {RUN}: operation lease-1: outcome_json: "
    "expected 'a JSON object', stored '\"text\"'"
)
LEASE_1 = {"runId": RUN, "operationId": "lease-1", "token": "t", "expiresAt": 5}
CHANGE_PROBLEM = "run-projection-integrity-mismatch: runs.change_name: expected None, stored '7.0'"
STARTED = ("ok", f'{{"runId":"{RUN}","stage":"abel-design","state":"created"}}')


@pytest.mark.parametrize(
    ("problem", "answered", "label"),
    [
        (OUTCOME_PROBLEM, [(Call("commitLease", [LEASE_1, "text"]), ("ok", "text"))], TYPED),
        # cadence 1.x refused the odd commit: something else wrote the row
        (
            OUTCOME_PROBLEM,
            [(Call("commitLease", [LEASE_1, "text"]), ("error", "x"))],
            "undocumented",
        ),
        # another operation, another outcome, or no such call at all
        (
            OUTCOME_PROBLEM,
            [
                (
                    Call("commitLease", [{**LEASE_1, "operationId": "lease-2"}, "text"]),
                    ("ok", "text"),
                )
            ],
            "undocumented",
        ),
        (OUTCOME_PROBLEM, [(Call("commitLease", [LEASE_1, 5]), ("ok", 5))], "undocumented"),
        (OUTCOME_PROBLEM, [], "undocumented"),
        (
            CHANGE_PROBLEM,
            [
                (
                    Call(
                        "startRun", [{"stage": "abel-design", "provisionalKey": "k", "change": 7}]
                    ),
                    STARTED,
                )
            ],
            TYPED,
        ),
        (  # a well-typed start of that run
            CHANGE_PROBLEM,
            [(Call("startRun", [{"stage": "abel-design", "provisionalKey": "k"}]), STARTED)],
            "undocumented",
        ),
        (  # the odd start made another run
            CHANGE_PROBLEM,
            [
                (
                    Call(
                        "startRun", [{"stage": "abel-design", "provisionalKey": "k", "change": 7}]
                    ),
                    ("ok", '{"runId":"another"}'),
                )
            ],
            "undocumented",
        ),
        (  # a verification problem of no odd input
            f"operation-state-invalid: run {RUN}: operation start-1: state: expected "
            "'committed', stored 'running'",
            [(Call("commitLease", [LEASE_1, "text"]), ("ok", "text"))],
            "undocumented",
        ),
    ],
)
def test_a_verification_difference_is_typed_only_when_the_log_shows_the_odd_call_that_wrote_it(
    problem: str, answered: list[tuple[Call, tuple[str, Any]]], label: str
) -> None:
    assert classify_verification(problem, RUN, answered) == label
