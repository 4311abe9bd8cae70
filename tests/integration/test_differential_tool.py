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
from differential_findings import classify
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
