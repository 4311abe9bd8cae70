"""What a replayed chain must agree with: the stored projection, run columns, bindings.

One rule for `RunRepository.verify_integrity` (a live database) and for offline checks
of export files (`cadence_store.transfer`). Pure: the caller reads the rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..errors import JournalIntegrityError
from .canonical import is_nested_too_deep, js_stringify

Document = dict[str, Any]

# run-row column -> projection key it mirrors
MIRRORED_COLUMNS: Final = (
    ("root_hash", "rootHash"),
    ("stage", "stage"),
    ("change_name", "change"),
    ("provisional_key", "provisionalKey"),
    ("state", "state"),
    ("sequence", "sequence"),
    ("event_hash", "eventHash"),
    ("delivery_revision", "deliveryRevision"),
    ("terminal_tombstone", "terminal"),
)
BINDING_COLUMNS: Final = (
    "gate",
    "revision",
    "receipt_hash",
    "approval_revision",
    "contract_hash",
    "record_hash",
)


@dataclass(frozen=True)
class Difference:
    """The first stored thing that disagrees with the replay, and the sequence to name."""

    field: str
    expected: Any
    actual: Any
    sequence: int | None

    def error(
        self, code: str, run_id: str, where: str = "", operation_id: str | None = None
    ) -> JournalIntegrityError:
        """The error naming the run, `where` it is (a prefix of the message) and what
        differs: the field, the value the replay expects and the stored one."""
        return JournalIntegrityError(
            code,
            f"{where}{self.field}: expected {self.expected!r}, stored {self.actual!r}",
            run_id=run_id,
            sequence=self.sequence,
            expected=self.expected,
            actual=self.actual,
            operation_id=operation_id,
        )


def first_difference(expected: Document, actual: Document) -> tuple[str, Any, Any] | None:
    """The first key where two projections differ (key order included), or None."""
    if js_stringify(expected) == js_stringify(actual):
        return None
    for key in dict.fromkeys([*expected, *actual]):
        if (
            key not in actual
            or key not in expected
            or js_stringify(expected[key]) != js_stringify(actual[key])
        ):
            return key, expected.get(key), actual.get(key)
    return "(key order)", list(expected), list(actual)


def _bindings_of(projection: Document) -> list[tuple[Any, ...]]:
    rows = []
    for binding in projection.get("deliveryBindings", []):
        proof = binding.get("approvalProof") or {}
        rows.append(
            (
                binding["gate"],
                binding["revision"],
                binding["receiptHash"],
                proof.get("revision"),
                proof.get("contractHash"),
                proof.get("recordHash"),
            )
        )
    return sorted(rows)


def stored_difference(
    rebuilt: Document,
    projection_json: str | None,
    columns: Mapping[str, Any],
    bindings: Iterable[Sequence[Any]],
) -> Difference | None:
    """Compare a replayed projection with what is stored about its run.

    `columns` holds the run row (at least `MIRRORED_COLUMNS`); `bindings` the run's
    delivery_bindings rows as `BINDING_COLUMNS` tuples. The stored projection must equal
    the replay byte for byte (`JSON.stringify`, key order included) — cadence 1.x's rule —
    and the run columns and binding rows must mirror it.
    """
    sequence: int = rebuilt["sequence"]
    try:
        stored = json.loads(projection_json) if projection_json is not None else None
    except (ValueError, RecursionError):
        stored = None
    if not isinstance(stored, dict) or is_nested_too_deep(stored):
        return Difference("projection", "a projection object", projection_json, sequence)
    found = first_difference(rebuilt, stored)
    if found is not None:
        field, expected, actual = found
        field = f"projection.{field}"
    else:
        for column, key in MIRRORED_COLUMNS:
            if columns[column] != rebuilt.get(key):
                field, expected, actual = f"runs.{column}", rebuilt.get(key), columns[column]
                break
        else:
            expected, actual = _bindings_of(rebuilt), sorted(tuple(row) for row in bindings)
            if expected == actual:
                return None
            field = "delivery_bindings"
    head = stored.get("sequence")
    if isinstance(head, int) and head == columns["sequence"] and head > sequence:
        # projection and run row agree on a longer head: the chain lost its tail, so
        # name the first missing event
        sequence += 1
    return Difference(field, expected, actual, sequence)
