"""What an `operations` row may hold, checked against the replayed chain. Pure: no I/O.

A journal receipt (kinds `start`, `change-bound`, `delivery-bound`,
`state-transitioned`) records the projection its call returned, and a replay of its
operation id returns that projection again. So it must be a projection the chain really
produced: equal to the replay at the sequence it names, whose event hash it carries.
`ReceiptVerifier` checks that during the one streaming pass over the chain: receipts are
indexed by the sequence they name, and each is compared with the projection when the pass
reaches that sequence.

A lease row (kind `lease`) must have a known state and consistent columns: a token and
an expiry exactly when `running`, a JSON object outcome exactly when `committed`.

Codes (all `JournalIntegrityError`): `operation-receipt-mismatch` (a receipt the chain
did not produce), `operation-kind-invalid`, `operation-state-invalid`,
`operation-outcome-invalid`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..errors import JournalIntegrityError
from .canonical import JsonValueError, canonical_json
from .validation import is_safe_integer, is_sha256

Document = dict[str, Any]

JOURNAL_RECEIPT_KINDS: Final = frozenset(
    {"start", "change-bound", "delivery-bound", "state-transitioned"}
)
LEASE_KIND: Final = "lease"
OPERATION_STATES: Final = ("running", "committed", "interrupted")
# the columns of an operations row a check needs, in this order
OPERATION_COLUMNS: Final = (
    "operation_id",
    "kind",
    "state",
    "outcome_json",
    "lease_token",
    "lease_expires_at",
)

RECEIPT_MISMATCH: Final = "operation-receipt-mismatch"
KIND_INVALID: Final = "operation-kind-invalid"
STATE_INVALID: Final = "operation-state-invalid"
OUTCOME_INVALID: Final = "operation-outcome-invalid"


@dataclass(frozen=True)
class ReceiptProblem:
    """The first operations row that does not verify."""

    operation_id: str
    code: str
    field: str
    expected: Any
    actual: Any
    sequence: int | None = None

    @property
    def where(self) -> str:
        return f"operations({self.operation_id}).{self.field}"


def _object(text: object) -> Document | None:
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _lease_problem(
    operation_id: str, state: object, outcome_json: object, token: object, expires_at: object
) -> ReceiptProblem | None:
    if state not in OPERATION_STATES:
        return ReceiptProblem(operation_id, STATE_INVALID, "state", OPERATION_STATES, state)
    if state == "running":
        if not isinstance(token, str) or token == "":
            return ReceiptProblem(operation_id, STATE_INVALID, "lease_token", "a token", token)
        if not is_safe_integer(expires_at) or isinstance(expires_at, float) or expires_at < 0:  # type: ignore[operator]
            return ReceiptProblem(
                operation_id, STATE_INVALID, "lease_expires_at", "a millisecond time", expires_at
            )
    elif token is not None or expires_at is not None:
        field, value = (
            ("lease_token", token) if token is not None else ("lease_expires_at", expires_at)
        )
        return ReceiptProblem(operation_id, STATE_INVALID, field, None, value)
    if state == "committed":
        if _object(outcome_json) is None:
            return ReceiptProblem(
                operation_id, OUTCOME_INVALID, "outcome_json", "a JSON object", outcome_json
            )
    elif outcome_json is not None:
        return ReceiptProblem(operation_id, STATE_INVALID, "outcome_json", None, outcome_json)
    return None


class ReceiptVerifier:
    """Checks one run's operations rows during the replay of its chain.

    `operations`: rows as `OPERATION_COLUMNS` tuples. Call `observe(sequence,
    projection)` after each event of the pass, then `result()`.
    """

    def __init__(self, run_id: str, operations: Iterable[Sequence[Any]]) -> None:
        self.run_id = run_id
        self.problem: ReceiptProblem | None = None
        # sequence -> [(operation_id, canonical JSON of the receipt)]
        self._pending: dict[int, list[tuple[str, str]]] = {}
        for row in sorted(operations, key=lambda row: str(row[0])):
            self._add(*row)
            if self.problem is not None:
                break

    def _add(
        self,
        operation_id: str,
        kind: object,
        state: object,
        outcome_json: object,
        token: object,
        expires_at: object,
    ) -> None:
        if kind == LEASE_KIND:
            self.problem = _lease_problem(operation_id, state, outcome_json, token, expires_at)
            return
        if kind not in JOURNAL_RECEIPT_KINDS:
            self.problem = ReceiptProblem(
                operation_id,
                KIND_INVALID,
                "kind",
                sorted({*JOURNAL_RECEIPT_KINDS, LEASE_KIND}),
                kind,
            )
            return
        # a journal receipt is written committed, without a lease, in one statement
        if state != "committed" or token is not None or expires_at is not None:
            field, actual = next(
                (name, value)
                for name, value, wanted in (
                    ("state", state, "committed"),
                    ("lease_token", token, None),
                    ("lease_expires_at", expires_at, None),
                )
                if value != wanted
            )
            expected = "committed" if field == "state" else None
            self.problem = ReceiptProblem(operation_id, STATE_INVALID, field, expected, actual)
            return
        receipt = _object(outcome_json)
        sequence = None if receipt is None else receipt.get("sequence")
        if (
            receipt is None
            or receipt.get("runId") != self.run_id
            or not is_safe_integer(sequence)
            or isinstance(sequence, float)
            or not is_sha256(receipt.get("eventHash"))
        ):
            self.problem = ReceiptProblem(
                operation_id,
                RECEIPT_MISMATCH,
                "outcome_json",
                f"a projection of run {self.run_id}",
                outcome_json,
            )
            return
        try:
            text = canonical_json(receipt)
        except JsonValueError:
            self.problem = ReceiptProblem(
                operation_id, RECEIPT_MISMATCH, "outcome_json", "a projection", outcome_json
            )
            return
        self._pending.setdefault(sequence, []).append((operation_id, text))  # type: ignore[arg-type]

    def observe(self, sequence: int, projection: Mapping[str, Any] | None) -> None:
        """The projection the chain produced at `sequence` (called once per event)."""
        waiting = self._pending.pop(sequence, None)
        if waiting is None or self.problem is not None:
            return
        produced = canonical_json(projection)
        for operation_id, text in waiting:
            if text != produced:
                self.problem = _difference(operation_id, sequence, projection, text)
                return

    def result(self) -> ReceiptProblem | None:
        """The first row that does not verify (after the whole chain was observed)."""
        if self.problem is None and self._pending:
            sequence = min(self._pending)
            operation_id = self._pending[sequence][0][0]
            self.problem = ReceiptProblem(
                operation_id,
                RECEIPT_MISMATCH,
                "outcome_json.sequence",
                "a sequence on the chain",
                sequence,
                sequence,
            )
        return self.problem


def receipt_error(run_id: str, problem: ReceiptProblem) -> JournalIntegrityError:
    """The error naming the run, the operation id and what differs."""
    return JournalIntegrityError(
        problem.code,
        f"run {run_id}: operation {problem.operation_id}: {problem.field}: "
        f"expected {problem.expected!r}, stored {problem.actual!r}",
        run_id=run_id,
        sequence=problem.sequence,
        expected=problem.expected,
        actual=problem.actual,
        operation_id=problem.operation_id,
    )


def _difference(
    operation_id: str, sequence: int, projection: Mapping[str, Any] | None, text: str
) -> ReceiptProblem:
    receipt: Document = json.loads(text)
    produced = dict(projection or {})
    for key in dict.fromkeys([*produced, *receipt]):
        if (key in produced) != (key in receipt) or canonical_json(
            produced.get(key)
        ) != canonical_json(receipt.get(key)):
            return ReceiptProblem(
                operation_id,
                RECEIPT_MISMATCH,
                f"outcome_json.{key}",
                produced.get(key),
                receipt.get(key),
                sequence,
            )
    return ReceiptProblem(  # pragma: no cover - the canonical texts differ somewhere
        operation_id, RECEIPT_MISMATCH, "outcome_json", produced, receipt, sequence
    )


__all__ = [
    "JOURNAL_RECEIPT_KINDS",
    "LEASE_KIND",
    "OPERATION_COLUMNS",
    "OPERATION_STATES",
    "RECEIPT_MISMATCH",
    "ReceiptProblem",
    "ReceiptVerifier",
    "receipt_error",
]
