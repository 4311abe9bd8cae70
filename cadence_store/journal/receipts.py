"""What an `operations` row may hold, checked against the replayed chain. Pure: no I/O.

A journal receipt (kinds `start`, `change-bound`, `delivery-bound`,
`state-transitioned`) records the projection its call returned, as `JSON.stringify` of
it, and a replay of its operation id returns that projection again. So it must be a
projection the chain really produced: byte for byte the replay at the sequence it names
(whose event hash it carries). `ReceiptVerifier` checks that during the one streaming pass
over the chain, at a small cost: each receipt is kept only as a 16-byte digest under the
sequence it names, and the pass serialises the projection only at those sequences.

A lease row (kind `lease`) must have a known state and consistent columns: a token and
an expiry exactly when `running`, a JSON object outcome exactly when `committed`. A
journal receipt's row that is `running` or `interrupted` is a cadence 1.x lease that took
over the receipt's operation id (its upsert kept the kind): it is checked as a lease.

Codes (all `JournalIntegrityError`): `operation-receipt-mismatch` (a receipt the chain
did not produce), `operation-kind-invalid`, `operation-state-invalid`,
`operation-outcome-invalid`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..errors import JournalIntegrityError
from .canonical import JsonValueError, is_nested_too_deep, js_stringify, js_stringify_likely
from .verification import Difference
from .vocabulary import (
    COMMITTED,
    JOURNAL_RECEIPT_KIND_VALUES,
    KIND_LEASE,
    OPERATION_STATE_VALUES,
    RUNNING,
)

Document = dict[str, Any]
Rows = Iterable[Sequence[Any]]

JOURNAL_RECEIPT_KINDS: Final = JOURNAL_RECEIPT_KIND_VALUES
LEASE_KIND: Final = KIND_LEASE
OPERATION_STATES: Final = OPERATION_STATE_VALUES
# the columns of an operations row a check needs, in this order
OPERATION_COLUMNS: Final = (
    "operation_id",
    "kind",
    "state",
    "outcome_json",
    "lease_token",
    "lease_expires_at",
    "lease_fence",
)

_INT64_MAX: Final = 2**63 - 1

RECEIPT_MISMATCH: Final = "operation-receipt-mismatch"
KIND_INVALID: Final = "operation-kind-invalid"
STATE_INVALID: Final = "operation-state-invalid"
OUTCOME_INVALID: Final = "operation-outcome-invalid"

# The first "sequence" key of a stringified projection: keys before it (runId, rootHash,
# stage, change / provisionalKey, state) cannot hold it, and inside a string value its
# quotes would be escaped. A forged text that fools this still fails the digest.
_SEQUENCE: Final = re.compile(r'"sequence":(\d{1,16})[,}]')


_sha256: Final = hashlib.sha256

orjson_dumps: Callable[[Any], bytes] | None
try:  # a dependency; the stdlib's exact path stands in without it
    import orjson

    orjson_dumps = orjson.dumps
except ImportError:  # pragma: no cover
    orjson_dumps = None


def _digest(text: str) -> bytes:
    try:
        data = text.encode()
    except UnicodeEncodeError:  # a lone surrogate: still compared, byte for byte
        data = text.encode("utf-8", "surrogatepass")
    return _sha256(data).digest()


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
    if state == RUNNING:
        if not isinstance(token, str) or token == "":
            return ReceiptProblem(operation_id, STATE_INVALID, "lease_token", "a token", token)
        if not _is_stored_int(expires_at, 0):
            return ReceiptProblem(
                operation_id, STATE_INVALID, "lease_expires_at", "a millisecond time", expires_at
            )
    elif token is not None or expires_at is not None:
        field, value = (
            ("lease_token", token) if token is not None else ("lease_expires_at", expires_at)
        )
        return ReceiptProblem(operation_id, STATE_INVALID, field, None, value)
    if state == COMMITTED:
        outcome = _object(outcome_json)
        if outcome is None or is_nested_too_deep(outcome):
            return ReceiptProblem(
                operation_id, OUTCOME_INVALID, "outcome_json", "a JSON object", outcome_json
            )
    elif outcome_json is not None:
        return ReceiptProblem(operation_id, STATE_INVALID, "outcome_json", None, outcome_json)
    return None


def _is_stored_int(value: object, least: int) -> bool:
    # any 64-bit value: cadence 1.x granted TTLs up to 2**53 - 1, so an adopted expiry
    # may pass it (new grants are refused there; see `invalid-lease-ttl`)
    return isinstance(value, int) and not isinstance(value, bool) and least <= value <= _INT64_MAX


def _receipt_shape(
    operation_id: str, kind: object, state: object, token: object, expires_at: object
) -> ReceiptProblem | None:
    if kind not in JOURNAL_RECEIPT_KINDS:
        kinds = sorted({*JOURNAL_RECEIPT_KINDS, LEASE_KIND})
        return ReceiptProblem(operation_id, KIND_INVALID, "kind", kinds, kind)
    # a journal receipt is written committed, without a lease, in one statement
    for field, value, wanted in (
        ("state", state, COMMITTED),
        ("lease_token", token, None),
        ("lease_expires_at", expires_at, None),
    ):
        if value != wanted:
            return ReceiptProblem(operation_id, STATE_INVALID, field, wanted, value)
    return None


def claimed_sequence(outcome_json: object) -> int | None:
    """The sequence a receipt's text names (where verification looks for it), or None."""
    match = _SEQUENCE.search(outcome_json) if isinstance(outcome_json, str) else None
    return None if match is None else int(match.group(1))


class ReceiptVerifier:
    """Checks one run's operations rows during the replay of its chain.

    `add(row)` for every row (`OPERATION_COLUMNS` order; they may be streamed), then
    `observe(sequence, projection)` after each event of the pass, then `result(rows)`.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.problem: ReceiptProblem | None = None
        # sequence -> digest(s) of the receipts naming it; the pass looks each one up
        self.waiting: dict[int, bytes | tuple[bytes, ...]] = {}
        self._mismatch: tuple[int, Document | None] | None = None

    def add(self, row: Sequence[Any]) -> None:
        if self.problem is not None:
            return
        operation_id, kind, state, outcome_json, token, expires_at, fence = row
        if (
            state == COMMITTED
            and token is None
            and expires_at is None
            and fence is None
            and kind in JOURNAL_RECEIPT_KINDS
            and isinstance(outcome_json, str)
            and self.expect(outcome_json)  # the usual receipt: its digest is kept
        ):
            return
        if kind == LEASE_KIND:
            self.problem = _lease_problem(operation_id, state, outcome_json, token, expires_at)
            if self.problem is None and not _is_stored_int(fence, 1):
                # every grant has a fence (adopted and pre-fence leases got 1)
                self.problem = ReceiptProblem(
                    operation_id, STATE_INVALID, "lease_fence", "a fence >= 1", fence
                )
            return
        if kind in JOURNAL_RECEIPT_KINDS and state != COMMITTED:
            # cadence 1.x's acquireLease took this receipt's operation id over
            self.problem = _lease_problem(operation_id, state, outcome_json, token, expires_at)
            if self.problem is None and fence is not None and not _is_stored_int(fence, 1):
                self.problem = ReceiptProblem(
                    operation_id, STATE_INVALID, "lease_fence", "a fence >= 1", fence
                )
            return
        self.problem = _receipt_shape(operation_id, kind, state, token, expires_at)
        if self.problem is None and fence is not None:
            self.problem = ReceiptProblem(operation_id, STATE_INVALID, "lease_fence", None, fence)
        if self.problem is not None:
            return
        # a committed receipt whose outcome names no sequence: not a projection
        self.problem = ReceiptProblem(
            operation_id,
            RECEIPT_MISMATCH,
            "outcome_json",
            f"a projection of run {self.run_id}",
            outcome_json,
        )

    def add_out_of_order(self, row: Sequence[Any]) -> None:
        """`add` for a row that is not a journal receipt's usual shape, met outside
        operation id order (located by its sequence column): the problem kept is the
        first by operation id, as `add` keeps over rows read in that order."""
        alone = ReceiptVerifier(self.run_id)
        alone.add(row)
        found = alone.problem
        if found is not None and (
            self.problem is None or found.operation_id < self.problem.operation_id
        ):
            self.problem = found

    def expect(self, outcome_json: str) -> bool:
        """Keep a receipt's digest under the sequence its text names, to be compared when
        the pass gets there; False when it names none."""
        match = _SEQUENCE.search(outcome_json)
        if match is None:
            return False
        sequence = int(match.group(1))
        digest = _digest(outcome_json)
        known = self.waiting.setdefault(sequence, digest)
        if known is not digest:
            self.waiting[sequence] = (
                (known, digest) if isinstance(known, bytes) else (*known, digest)
            )
        return True

    def observe(self, sequence: int, projection: Mapping[str, Any] | None) -> None:
        """The projection the chain produced at `sequence` (call it for each event, or
        only when `sequence in waiting`)."""
        known = self.waiting.pop(sequence, None)
        if known is None or self._mismatch is not None:
            return
        produced = _digest(js_stringify_likely(projection))
        if known == produced:  # the usual case: one genuine receipt
            return
        digests = (known,) if isinstance(known, bytes) else known
        if all(digest == produced for digest in digests):
            return
        try:
            exact = _digest(js_stringify(projection))
        except JsonValueError:
            exact = b""
        if any(digest != exact for digest in digests):
            self._mismatch = (sequence, None if projection is None else dict(projection))

    def result(self, rows: Callable[[], Rows]) -> ReceiptProblem | None:
        """The first row that does not verify, after the whole chain was observed.

        `rows()` reads the operations rows again, only to name the receipt at fault.
        """
        if self.problem is not None:
            return self.problem
        if self._mismatch is not None:
            sequence, projection = self._mismatch
            return _explain(rows(), sequence, projection)
        if self.waiting:
            sequence = min(self.waiting)
            return _explain(rows(), sequence, None)
        return None


class LocatedReceipts:
    """Receipts streamed in sequence order, checked as the replay passes each sequence.

    `rows` yields `(sequence, operation_id, outcome_json)` of the run's journal receipts
    whose stored `operations.sequence` column locates them, ascending by that column;
    or `(sequence, operation_id, outcome_json, other_shape)` of every row it locates,
    `other_shape` None for a journal receipt's usual row (committed, no lease): the
    others are never compared, only listed in `other_shapes` for the caller to check as
    operations rows (`ReceiptVerifier.add_out_of_order`).
    Nothing is kept per receipt (memory stays flat in the run's length): at each event
    the receipts naming its sequence must be, byte for byte, `JSON.stringify` of the
    projection there. The column only locates: a receipt it places wrongly differs from
    the projection it is compared with. Receipts it does not locate (a NULL column) and
    rows of other shapes go through `ReceiptVerifier.add` as before.
    """

    def __init__(self, rows: Iterable[tuple[Any, ...]]) -> None:
        self.other_shapes: list[str] = []  # operation ids (none in a store it wrote)
        # the rows after `pending`, and the next receipt to check (None: none is left);
        # `replay_rows` takes the usual receipt past them itself
        self.rows = iter(rows)
        self.pending = next(self.rows, None)
        self.fault: ReceiptProblem | None = None
        # (operation_id, sequence its text names, text) of receipts stored at another
        # sequence than their text names (never written so): the caller checks them with
        # a `ReceiptVerifier` in a second pass
        self.elsewhere: list[tuple[str, int, str]] = []

    @property
    def next_sequence(self) -> int | float:
        """The sequence of the next receipt to check (infinity: none is left)."""
        return math.inf if self.pending is None else self.pending[0]

    def observe(self, sequence: int, projection: Document | None) -> int | float:
        """Check the receipts located at or before `sequence` (call it, in chain order,
        when `next_sequence <= sequence`); returns the new `next_sequence`."""
        encoded: str | None = None
        pending = self.pending
        while pending is not None and pending[0] <= sequence:
            located, operation_id, text, *shape = pending
            if shape and shape[0] is not None:
                self.other_shapes.append(operation_id)
            elif self.fault is None:
                if located != sequence:  # before the first event: not on the chain
                    self._misplaced(operation_id, located, text, None)
                else:
                    if encoded is None:
                        encoded = _fast_stringify(projection)
                    if text != encoded:
                        problem = _located_difference(operation_id, sequence, projection, text)
                        if problem is not None:
                            self._misplaced(operation_id, sequence, text, problem)
            pending = next(self.rows, None)
        self.pending = pending
        return math.inf if pending is None else pending[0]

    def _misplaced(
        self, operation_id: str, located: int, text: object, problem: ReceiptProblem | None
    ) -> None:
        """A receipt that is not the replay where it is stored: at fault, unless its text
        names another sequence. The rule is "a projection the chain produced" at the
        sequence it names, so that one decides (`elsewhere`)."""
        claimed = claimed_sequence(text)
        if claimed is not None and claimed != located:
            self.elsewhere.append((operation_id, claimed, text))  # type: ignore[arg-type]
        else:
            self.fault = problem or _off_chain(operation_id, located)

    def finish(self) -> ReceiptProblem | None:
        """After the last event: the first fault, or a receipt located beyond the head
        (then also see `elsewhere`)."""
        while self.pending is not None:
            located, operation_id, text, *shape = self.pending
            if shape and shape[0] is not None:
                self.other_shapes.append(operation_id)
            elif self.fault is None:
                self._misplaced(operation_id, located, text, None)
            self.pending = next(self.rows, None)
        return self.fault


def _fast_stringify(projection: Document | None) -> str | None:
    """`JSON.stringify(projection)` by orjson where that is proven the same bytes, else
    None (then the exact path decides). Every value of a projection is validated
    (enumerations, sha256 hex, safe integers, strings) except the extra keys an approval
    proof may carry; orjson writes such strings as JSON.stringify does (tested for every
    code point) and raises on lone surrogates."""
    if projection is None or orjson_dumps is None:
        return None
    for binding in projection.get("deliveryBindings") or ():
        proof = binding.get("approvalProof")
        if proof is not None and len(proof) != 3:  # revision, contractHash, recordHash
            return None
    try:
        return orjson_dumps(projection).decode()
    except (TypeError, ValueError):
        return None


def _located_difference(
    operation_id: str, sequence: int, projection: Document | None, text: object
) -> ReceiptProblem | None:
    """None when the receipt is the projection after all (the exact path agrees)."""
    if projection is None:
        return _off_chain(operation_id, sequence)
    try:
        exact = js_stringify(projection)
    except JsonValueError:
        exact = None
    if text == exact:
        return None
    if not isinstance(text, str):
        return ReceiptProblem(
            operation_id, RECEIPT_MISMATCH, "outcome_json", "a projection", text, sequence
        )
    return _difference(operation_id, sequence, projection, text)


def _off_chain(operation_id: str, sequence: int) -> ReceiptProblem:
    return ReceiptProblem(
        operation_id,
        RECEIPT_MISMATCH,
        "outcome_json.sequence",
        "a sequence on the chain",
        sequence,
        sequence,
    )


def _explain(rows: Rows, sequence: int, projection: Document | None) -> ReceiptProblem:
    """Which receipt naming `sequence` differs from `projection` (None: not on the chain),
    and where."""
    exact = None
    if projection is not None:
        try:
            exact = js_stringify(projection)
        except JsonValueError:
            pass
    for operation_id, kind, _, outcome_json, *_ in rows:
        if kind not in JOURNAL_RECEIPT_KINDS or claimed_sequence(outcome_json) != sequence:
            continue
        if projection is None:
            return _off_chain(operation_id, sequence)
        if outcome_json != exact:
            return _difference(operation_id, sequence, projection, outcome_json)
    return ReceiptProblem(  # pragma: no cover - the rows changed under the reader
        "?", RECEIPT_MISMATCH, "outcome_json", projection, None, sequence
    )


def _difference(
    operation_id: str, sequence: int, projection: Document, text: str
) -> ReceiptProblem:
    receipt = _object(text)
    if receipt is None:
        return ReceiptProblem(
            operation_id, RECEIPT_MISMATCH, "outcome_json", "a projection", text, sequence
        )
    for key in dict.fromkeys([*projection, *receipt]):
        if (key in projection) != (key in receipt) or js_stringify(
            projection.get(key)
        ) != js_stringify(receipt.get(key)):
            return ReceiptProblem(
                operation_id,
                RECEIPT_MISMATCH,
                f"outcome_json.{key}",
                projection.get(key),
                receipt.get(key),
                sequence,
            )
    return ReceiptProblem(  # same values, other bytes (key order, spacing)
        operation_id,
        RECEIPT_MISMATCH,
        "outcome_json",
        js_stringify(projection),
        text,
        sequence,
    )


def receipt_error(run_id: str, problem: ReceiptProblem) -> JournalIntegrityError:
    """The error naming the run, the operation id and what differs."""
    found = Difference(problem.field, problem.expected, problem.actual, problem.sequence)
    where = f"run {run_id}: operation {problem.operation_id}: "
    return found.error(problem.code, run_id, where, problem.operation_id)


__all__ = [
    "JOURNAL_RECEIPT_KINDS",
    "LEASE_KIND",
    "LocatedReceipts",
    "OPERATION_COLUMNS",
    "OPERATION_STATES",
    "RECEIPT_MISMATCH",
    "ReceiptProblem",
    "claimed_sequence",
    "ReceiptVerifier",
    "receipt_error",
]
