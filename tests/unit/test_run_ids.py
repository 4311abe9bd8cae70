"""New run ids are version 7 UUIDs: the creation millisecond first, then random bits."""

from __future__ import annotations

import uuid

import pytest

from cadence_store.journal import run_ids
from cadence_store.journal.run_ids import new_run_id


def test_a_run_id_is_a_canonical_version_7_uuid() -> None:
    value = new_run_id()
    parsed = uuid.UUID(value)
    assert (parsed.version, parsed.variant) == (7, uuid.RFC_4122)
    assert str(parsed) == value


def test_run_ids_sort_by_creation_time_and_carry_it(monkeypatch: pytest.MonkeyPatch) -> None:
    moments_ms = [1_700_000_000_000, 1_700_000_000_001, 1_700_000_123_456, 2_000_000_000_000]
    ids = []
    for moment in moments_ms:
        monkeypatch.setattr(run_ids.time, "time_ns", lambda moment=moment: moment * 1_000_000)
        ids.append(new_run_id())
    assert sorted(ids) == ids
    assert [uuid.UUID(value).int >> 80 for value in ids] == moments_ms


def test_run_ids_of_one_millisecond_differ_in_their_random_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(run_ids.time, "time_ns", lambda: 1_700_000_000_000 * 1_000_000)
    ids = {new_run_id() for _ in range(1_000)}
    assert len(ids) == 1_000
