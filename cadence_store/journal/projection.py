"""Applying events to a run projection, and verifying whole chains.

A projection here is the plain object cadence 1.x kept (camelCase keys in the order its
history gave them), so that `JSON.stringify` of it matches a cadence 1.x store byte for
byte. `apply_event` is the O(1) step every append uses; `ChainVerifier` and
`reduce_events` replay a chain one event at a time, so a chain is streamed, never loaded
whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InvalidTransitionError, JournalIntegrityError
from .canonical import JsonValueError, canonical_json, compare_canonical_strings
from .events import ZERO_EVENT_HASH, hash_event
from .states import RUN_STATES, TERMINAL_STATES, assert_transition
from .validation import SHA256, is_safe_integer, is_sha256
from .values import RunEvent, RunProjection

Document = dict[str, Any]


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
    if stage not in ("abel-design", "abel-implement"):
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


def _delivery_bound(projection: Document | None, payload: Mapping[str, Any]) -> Document:
    if projection is None:
        raise JournalIntegrityError("event-integrity-missing-run")
    gate = payload.get("gate")
    revision = payload.get("revision")
    receipt_hash = payload.get("receiptHash")
    has_proof = "approvalProof" in payload
    proof = payload.get("approvalProof")
    if (
        gate not in ("gate-a", "gate-b")
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
    result = dict(projection)
    if existing is None:
        result["deliveryBindings"] = sorted([*bindings, binding], key=_binding_order)
    previous = projection.get("deliveryRevision")
    result["deliveryRevision"] = max(previous if previous is not None else 0, revision)  # type: ignore[type-var]
    return result


def _transitioned(projection: Document | None, payload: Mapping[str, Any]) -> Document:
    if projection is None:
        raise JournalIntegrityError("event-integrity-missing-run")
    source = payload.get("from")
    target = payload.get("to")
    if source != projection["state"] or target not in RUN_STATES:
        raise JournalIntegrityError("event-integrity-state-mismatch")
    assert isinstance(target, str)
    assert_transition(projection["state"], target)
    result = {k: v for k, v in projection.items() if k not in ("pauseCode", "terminal")}
    result["state"] = target
    code = payload.get("code")
    if isinstance(code, str):
        result["pauseCode"] = code
    if target in TERMINAL_STATES:
        result["terminal"] = target
    return result


def _interrupted(projection: Document | None) -> Document:
    if projection is None or projection["state"] in TERMINAL_STATES:
        raise JournalIntegrityError("event-integrity-interruption")
    target = "recovering" if projection["state"] == "applying" else "paused"
    if target != projection["state"]:
        assert_transition(projection["state"], target)
    result = dict(projection)
    result["state"] = target
    result["pauseCode"] = "operation-interrupted"
    return result


def apply_event(
    projection: Document | None, sequence: int, type_: str, payload: Mapping[str, Any], hash_: str
) -> Document | None:
    """The projection after one already-verified event (cadence 1.x `applyVerifiedEvent`).

    Returns a new object; `projection` is not modified. An unknown event type yields no
    projection, as it did in cadence 1.x.
    """
    if type_ == "run-created":
        result = _created(projection, sequence, payload)
    elif type_ == "change-bound":
        if projection is None or projection.get("stage") != "abel-design":
            raise JournalIntegrityError("event-integrity-change-binding")
        result = {k: v for k, v in projection.items() if k != "provisionalKey"}
        result["change"] = _require_string(payload, "change")
    elif type_ == "delivery-bound":
        result = _delivery_bound(projection, payload)
    elif type_ == "state-transitioned":
        result = _transitioned(projection, payload)
    elif type_ == "operation-interrupted":
        result = _interrupted(projection)
    else:
        return None
    result["sequence"] = sequence
    result["eventHash"] = hash_
    return result


class ChainVerifier:
    """Replays one run's chain event by event: checks links and hashes, folds the projection."""

    def __init__(self) -> None:
        self.projection: Document | None = None
        self.prior_hash = ZERO_EVENT_HASH
        self.count = 0

    def feed(
        self, sequence: int, type_: str, payload: Mapping[str, Any], hash_: str, prior_hash: str
    ) -> None:
        try:
            expected: str | None = hash_event(sequence, type_, payload, prior_hash)
        except JsonValueError:
            expected = None
        if (
            sequence != self.count + 1
            or isinstance(sequence, bool)
            or prior_hash != self.prior_hash
            or not isinstance(hash_, str)
            or SHA256.fullmatch(hash_) is None
            or expected != hash_
        ):
            raise JournalIntegrityError(
                "event-integrity-hash-chain",
                sequence=self.count + 1,
                expected=expected if prior_hash == self.prior_hash else self.prior_hash,
                actual=hash_ if prior_hash == self.prior_hash else prior_hash,
            )
        fields = payload if isinstance(payload, Mapping) else {}
        try:
            self.projection = apply_event(self.projection, sequence, type_, fields, hash_)
        except (JournalIntegrityError, InvalidTransitionError) as error:
            if isinstance(error, JournalIntegrityError) and error.sequence is None:
                error.sequence = sequence
            raise
        self.prior_hash = hash_
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
    "compare_canonical_strings",
    "reduce_documents",
    "reduce_events",
]
