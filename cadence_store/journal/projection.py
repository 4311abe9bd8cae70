"""Applying events to a run projection, and verifying whole chains.

A projection here is the plain object cadence 1.x kept (camelCase keys in the order its
history gave them), so that `JSON.stringify` of it matches a cadence 1.x store byte for
byte. `apply_event` is the O(1) step every append uses; `ChainVerifier` and
`reduce_events` replay a chain one event at a time, so a chain is streamed, never loaded
whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from hashlib import sha256
from typing import Any

from ..errors import InvalidTransitionError, JournalIntegrityError
from .canonical import (
    JsonValueError,
    canonical_and_stringified,
    canonical_json,
    compare_canonical_strings,
    js_stringify,
)
from .events import (
    EVENT_TYPE_JSON,
    MAX_SAFE,
    ZERO_EVENT_HASH,
    hash_canonical_event,
    hash_event,
)
from .states import LEGAL_TRANSITIONS, RUN_STATES, TERMINAL_STATES, assert_transition
from .stored_json import decode_payload
from .validation import is_safe_integer, is_sha256
from .values import RunEvent, RunProjection
from .vocabulary import (
    CHANGE_BOUND,
    DELIVERY_BOUND,
    DESIGN_STAGE,
    GATE_VALUES,
    OPERATION_INTERRUPTED,
    RUN_CREATED,
    STAGE_VALUES,
    STATE_TRANSITIONED,
)

Document = dict[str, Any]
_DECODED_KEPT = 256  # distinct payload texts a verifier remembers


def _require_string(payload: Mapping[str, Any], key: str) -> str:
    value = payload.get(key)
    if not isinstance(value, str) or not value:
        raise JournalIntegrityError(f"event-integrity-invalid-{key}")
    return value


def _valid_proof(proof: object) -> bool:
    return (
        isinstance(proof, Mapping)
        and is_safe_integer(proof.get("revision"))
        and proof["revision"] >= 1
        and is_sha256(proof.get("contractHash"))
        and is_sha256(proof.get("recordHash"))
    )


def _binding_order(binding: Mapping[str, Any]) -> tuple[Any, bytes]:
    # revision, then gate by UTF-16 code units (cadence 1.x compareCanonicalStrings)
    return binding["revision"], str(binding["gate"]).encode("utf-16-be", "surrogatepass")


def _created(projection: Document | None, sequence: int, payload: Mapping[str, Any]) -> Document:
    if projection is not None or sequence != 1:
        raise JournalIntegrityError("event-integrity-duplicate-create")
    stage = payload.get("stage")
    if stage not in STAGE_VALUES:
        raise JournalIntegrityError("event-integrity-invalid-stage")
    change = payload.get("change")
    provisional_key = payload.get("provisionalKey")
    if (isinstance(change, str) and change != "") == (
        isinstance(provisional_key, str) and provisional_key != ""
    ):
        raise JournalIntegrityError("event-integrity-invalid-run-key")
    document: Document = {
        "runId": _require_string(payload, "runId"),
        "rootHash": _require_string(payload, "rootHash"),
        "stage": stage,
    }
    if isinstance(change, str):
        document["change"] = change
    if isinstance(provisional_key, str):
        document["provisionalKey"] = provisional_key
    # placeholders keep cadence 1.x's key order; apply_event fills them
    document["state"] = "created"
    document["sequence"] = None
    document["eventHash"] = None
    document["deliveryBindings"] = []
    return document


def _delivery_bound(
    projection: Document | None, payload: Mapping[str, Any], owned: bool
) -> Document:
    if projection is None:
        raise JournalIntegrityError("event-integrity-missing-run")
    gate = payload.get("gate")
    revision = payload.get("revision")
    receipt_hash = payload.get("receiptHash")
    has_proof = "approvalProof" in payload
    proof = payload.get("approvalProof")
    if (
        gate not in GATE_VALUES
        or not is_safe_integer(revision)
        or revision < 1  # type: ignore[operator]
        or not is_sha256(receipt_hash)
        or (has_proof and not _valid_proof(proof))
    ):
        raise JournalIntegrityError("event-integrity-delivery-binding")
    binding: Document = {"gate": gate, "revision": revision, "receiptHash": receipt_hash}
    if proof:
        binding["approvalProof"] = dict(proof)
    bindings: list[Document] = projection["deliveryBindings"]
    existing = next(
        (b for b in bindings if b["gate"] == gate and b["revision"] == revision),
        None,
    )
    if existing is not None and (
        existing["receiptHash"] != receipt_hash
        or canonical_json(existing.get("approvalProof"))
        != canonical_json(binding.get("approvalProof"))
    ):
        raise JournalIntegrityError("event-integrity-delivery-conflict")
    result = projection if owned else dict(projection)
    if existing is None:
        result["deliveryBindings"] = sorted([*bindings, binding], key=_binding_order)
    previous = projection.get("deliveryRevision")
    result["deliveryRevision"] = max(previous if previous is not None else 0, revision)  # type: ignore[type-var]
    return result


def _transitioned(projection: Document | None, payload: Mapping[str, Any], owned: bool) -> Document:
    if projection is None:
        raise JournalIntegrityError("event-integrity-missing-run")
    source = payload.get("from")
    target = payload.get("to")
    if source != projection["state"] or target not in RUN_STATES:
        raise JournalIntegrityError("event-integrity-state-mismatch")
    assert isinstance(target, str)
    assert_transition(projection["state"], target)
    if owned:
        # removed and set again below, so they move to the end as in cadence 1.x
        result = projection
        result.pop("pauseCode", None)
        result.pop("terminal", None)
    else:
        result = dict(projection)  # the same order without them, copied in C
        result.pop("pauseCode", None)
        result.pop("terminal", None)
    _enter(result, target, payload)
    return result


def _enter(projection: Document, target: str, payload: Mapping[str, Any]) -> None:
    """Set the state a transition enters, and its pause code and terminal marker (after
    the caller removed the old ones: they move to the end, as in cadence 1.x)."""
    projection["state"] = target
    code = payload.get("code")
    if isinstance(code, str):
        projection["pauseCode"] = code
    if target in TERMINAL_STATES:
        projection["terminal"] = target


def _interrupted(projection: Document | None, owned: bool) -> Document:
    if projection is None or projection["state"] in TERMINAL_STATES:
        raise JournalIntegrityError("event-integrity-interruption")
    target = "recovering" if projection["state"] == "applying" else "paused"
    if target != projection["state"]:
        assert_transition(projection["state"], target)
    result = projection if owned else dict(projection)
    result["state"] = target
    result["pauseCode"] = OPERATION_INTERRUPTED
    return result


def apply_event(
    projection: Document | None, sequence: int, type_: str, payload: Mapping[str, Any], hash_: str
) -> Document | None:
    """The projection after one already-verified event (cadence 1.x `applyVerifiedEvent`).

    Returns a new object; `projection` is not modified. An unknown event type yields no
    projection, as it did in cadence 1.x.
    """
    return _fold(projection, sequence, type_, payload, hash_, owned=False)


def apply_event_in_place(
    projection: Document | None, sequence: int, type_: str, payload: Mapping[str, Any], hash_: str
) -> Document | None:
    """`apply_event` on a projection the caller alone holds, updated in place (no copy
    per event: a fold of a whole chain that keeps only what it reads on the way)."""
    return _fold(projection, sequence, type_, payload, hash_, owned=True)


def event_after(
    projection: Document,
    run_id: str,
    sequence: int,
    type_: str,
    payload: dict[str, Any],
    prior_hash: str,
) -> tuple[str, str, Document, str]:
    """The event `sequence` of type `type_` after the run `run_id`'s head (its event
    `sequence - 1`, hash `prior_hash`, whose stored projection is `projection`), as an
    append writes it: `(payload's JSON, event hash, projection after it, that
    projection's JSON)`. The payload is proved plain once for its canonical JSON
    (hashed) and its text (stored).

    Raises `JournalIntegrityError` when `projection` is not that head's, and like
    `apply_event` for an event the projection does not allow (`InvalidTransitionError`,
    `JournalIntegrityError`)."""
    if projection.get("sequence") != sequence - 1 or projection.get("eventHash") != prior_hash:
        raise JournalIntegrityError(
            "run-projection-integrity-mismatch", run_id=run_id, sequence=sequence - 1
        )
    canonical_payload, payload_json = canonical_and_stringified(payload)
    event_hash = hash_canonical_event(sequence, type_, canonical_payload, prior_hash) or hash_event(
        sequence, type_, payload, prior_hash
    )
    document = _fold(projection, sequence, type_, payload, event_hash, owned=False)
    assert document is not None  # the library appends only the types it folds
    return payload_json, event_hash, document, js_stringify(document)


def _fold(
    projection: Document | None,
    sequence: int,
    type_: str,
    payload: Mapping[str, Any],
    hash_: str,
    *,
    owned: bool,
) -> Document | None:
    """`apply_event`; with `owned`, `projection` belongs to the caller's replay alone and
    is updated in place (no copy per event). Every check runs before anything changes."""
    if type_ == RUN_CREATED:
        result = _created(projection, sequence, payload)
    elif type_ == CHANGE_BOUND:
        if projection is None or projection.get("stage") != DESIGN_STAGE:
            raise JournalIntegrityError("event-integrity-change-binding")
        change = _require_string(payload, "change")
        if owned:
            result = projection
            result.pop("provisionalKey", None)
        else:
            result = {k: v for k, v in projection.items() if k != "provisionalKey"}
        result["change"] = change
    elif type_ == DELIVERY_BOUND:
        result = _delivery_bound(projection, payload, owned)
    elif type_ == STATE_TRANSITIONED:
        result = _transitioned(projection, payload, owned)
    elif type_ == OPERATION_INTERRUPTED:
        result = _interrupted(projection, owned)
    else:
        return None
    result["sequence"] = sequence
    result["eventHash"] = hash_
    return result


def chain_break(
    detail: str | None = None,
    *,
    sequence: int | None,
    field: str,
    expected: Any = None,
    actual: Any = None,
) -> JournalIntegrityError:
    """An event that does not link into its chain: `field` names what differs."""
    return JournalIntegrityError(
        "event-integrity-hash-chain",
        detail,
        sequence=sequence,
        expected=expected,
        actual=actual,
        field=field,
    )


class ChainVerifier:
    """Replays one run's chain event by event: checks links and hashes, folds the projection.

    The projection it folds is its own (updated in place); `result()` hands it over.
    """

    def __init__(self) -> None:
        self.projection: Document | None = None
        self.prior_hash = ZERO_EVENT_HASH
        self.prior_ascii = ZERO_EVENT_HASH.encode("ascii")  # prior_hash, as hashed
        self.count = 0
        # payload text -> (value, canonical JSON or None), see `_decode`
        self._decoded: dict[str, tuple[Any, bytes | None]] = {}

    @property
    def decoded(self) -> dict[str, tuple[Any, bytes | None]]:
        """The payload texts decoded so far (a bounded cache; `replay_rows` reads it)."""
        return self._decoded

    def feed(
        self, sequence: int, type_: str, payload: Mapping[str, Any], hash_: str, prior_hash: str
    ) -> None:
        try:
            expected: str | None = hash_event(sequence, type_, payload, prior_hash)
        except JsonValueError:
            expected = None
        self._check(sequence, hash_, prior_hash, expected)
        self.advance(sequence, type_, payload, hash_)

    def feed_json(
        self, sequence: int, type_: str, payload_json: str, hash_: str, prior_hash: str
    ) -> Any:
        """`feed` an event as stored: its payload as JSON text (decoded on the C fast path
        where that is proven exact, see `stored_json`). Returns the decoded payload, which
        may be shared with other events of the chain (never modify it)."""
        decoded = self._decoded.get(payload_json) if type(payload_json) is str else None
        if decoded is None:
            decoded = self._decode(sequence, payload_json)
        payload, canonical = decoded
        expected = None
        if canonical is not None and prior_hash == self.prior_hash:
            # the hot path of verification, so the header is written here directly
            type_json = EVENT_TYPE_JSON.get(type_)
            if type_json is not None and type(sequence) is int and 0 < sequence <= MAX_SAFE:
                expected = sha256(
                    b'{"payload":%b,"priorHash":"%b","sequence":%d,"type":%b}'
                    % (canonical, self.prior_ascii, sequence, type_json)
                ).hexdigest()
            else:
                expected = hash_canonical_event(sequence, type_, canonical, prior_hash)
        if expected is None:
            try:
                expected = hash_event(sequence, type_, payload, prior_hash)
            except (JsonValueError, RecursionError):
                expected = None
        if (
            expected is None
            or expected != hash_
            or sequence != self.count + 1
            or type(sequence) is bool
            or prior_hash != self.prior_hash
        ):
            self._check(sequence, hash_, prior_hash, expected)  # raises what differs
        projection = self.projection
        if (
            type_ == STATE_TRANSITIONED
            and projection is not None
            and type(payload) is dict
            and type(sequence) is int
        ):
            # the usual event, folded inline (`_transitioned` is the rule, and decides
            # every case this does not take: a mismatch, an illegal target)
            state = projection["state"]
            target = payload.get("to")
            if payload.get("from") == state and target in LEGAL_TRANSITIONS.get(state, ()):
                projection.pop("pauseCode", None)
                projection.pop("terminal", None)
                _enter(projection, target, payload)
                projection["sequence"] = sequence
                projection["eventHash"] = hash_
                self.prior_hash = hash_
                self.prior_ascii = hash_.encode("ascii")  # a checked hexdigest
                self.count += 1
                return payload
        self.advance(sequence, type_, payload, hash_)
        return payload

    def _decode(self, sequence: int, payload_json: str) -> tuple[Any, bytes | None]:
        """`decode_payload`, remembered for the texts a chain repeats (most transitions
        carry one of a few payloads); a bounded cache, so memory stays flat."""
        try:
            decoded = decode_payload(payload_json)
        except (TypeError, ValueError, RecursionError):  # RecursionError: hostile nesting
            raise chain_break("payload is not JSON", sequence=sequence, field="payload") from None
        if type(payload_json) is str:
            if len(self._decoded) >= _DECODED_KEPT:
                self._decoded.clear()
            self._decoded[payload_json] = decoded
        return decoded

    def _check(self, sequence: int, hash_: str, prior_hash: str, expected: str | None) -> None:
        # `expected` is a sha256 hexdigest (or None), so equality also proves `hash_` is one
        if (
            sequence != self.count + 1
            or isinstance(sequence, bool)
            or prior_hash != self.prior_hash
            or expected is None
            or expected != hash_
        ):
            raise self._break(sequence, hash_, prior_hash, expected)

    def _break(
        self, sequence: int, hash_: str, prior_hash: str, expected: str | None
    ) -> JournalIntegrityError:
        """What differs, in the order cadence 1.x checks it."""
        wanted = self.count + 1
        if sequence != wanted or isinstance(sequence, bool):
            return chain_break(
                "event missing or out of order",
                sequence=wanted,
                field="sequence",
                expected=wanted,
                actual=sequence,
            )
        if prior_hash != self.prior_hash:
            return chain_break(
                sequence=wanted, field="priorHash", expected=self.prior_hash, actual=prior_hash
            )
        if expected is None:
            return chain_break("payload not hashable", sequence=wanted, field="payload")
        return chain_break(sequence=wanted, field="hash", expected=expected, actual=hash_)

    def advance(self, sequence: int, type_: str, payload: Any, hash_: str) -> None:
        """Fold one event whose sequence, link and hash the caller has already checked."""
        # `type(...) is dict` first: the ABC check is slow, and payloads are dicts
        fields = payload if type(payload) is dict or isinstance(payload, Mapping) else {}
        try:
            self.projection = _fold(self.projection, sequence, type_, fields, hash_, owned=True)
        except (JournalIntegrityError, InvalidTransitionError) as error:
            if isinstance(error, JournalIntegrityError) and error.sequence is None:
                error.sequence = sequence
            raise
        self.prior_hash = hash_
        self.prior_ascii = hash_.encode("ascii")  # a checked hexdigest
        self.count += 1

    def result(self) -> Document:
        if self.projection is None:
            raise JournalIntegrityError("event-integrity-empty")
        return self.projection


def reduce_documents(events: Iterable[RunEvent | Mapping[str, Any]]) -> Document:
    """The projection object (cadence 1.x key order) of a whole chain; raises on any break."""
    verifier = ChainVerifier()
    for event in events:
        if isinstance(event, RunEvent):
            verifier.feed(event.sequence, event.type, event.payload, event.hash, event.prior_hash)
        else:
            verifier.feed(
                event.get("sequence"),  # type: ignore[arg-type]
                event.get("type"),  # type: ignore[arg-type]
                event.get("payload") or {},
                event.get("hash"),  # type: ignore[arg-type]
                event.get("priorHash", event.get("prior_hash")),
            )
    return verifier.result()


def reduce_events(events: Iterable[RunEvent | Mapping[str, Any]]) -> RunProjection:
    """cadence 1.x `reduceRunEvents`: verify a whole chain and return its projection."""
    return RunProjection.from_document(reduce_documents(events))


__all__ = [
    "ChainVerifier",
    "apply_event",
    "apply_event_in_place",
    "event_after",
    "compare_canonical_strings",
    "reduce_documents",
    "reduce_events",
]
