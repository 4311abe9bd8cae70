"""The benchmark harness's interleaving (benchmarks/common.py): every variant gets its
samples, call numbers are unique, and the order of the variants changes between rounds.
Timing itself is never asserted."""

from __future__ import annotations

import random

from benchmarks.common import interleave


def test_interleave_runs_every_variant_in_a_fresh_order_each_round() -> None:
    random.seed(7)
    calls: list[tuple[str, int]] = []

    def variant(name: str):  # type: ignore[no-untyped-def]
        return lambda n: calls.append((name, n))

    samples = interleave({name: variant(name) for name in ("a", "b", "c")}, rounds=12, per_round=3)
    assert {name: len(values) for name, values in samples.items()} == {"a": 36, "b": 36, "c": 36}
    numbers = [n for _, n in calls]
    assert numbers == list(range(1, len(calls) + 1))  # unique, for operation ids
    orders = {tuple(name for name, _ in calls[start : start + 9 : 3]) for start in range(0, 108, 9)}
    assert len(orders) > 1  # not the same order every round
    assert all(sorted(order) == ["a", "b", "c"] for order in orders)
