"""Issue 27: verification's fast paths decide exactly what the rule decides.

- `ChainVerifier.feed_json` folds the usual transition inline and decodes a repeated
  payload text once: every step equals `apply_event` (or raises what it raises);
- `LocatedReceipts` checks receipts streamed in sequence order: it accepts exactly the
  receipts that are `JSON.stringify` of the replay at their sequence, names the first that
  is not, and takes orjson's bytes only where they are proven to be JSON.stringify's.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadence_store import InvalidTransitionError, JournalIntegrityError
from cadence_store.journal import ChainVerifier, apply_event, js_stringify
from cadence_store.journal.events import ZERO_EVENT_HASH, hash_event
from cadence_store.journal.receipts import RECEIPT_MISMATCH, LocatedReceipts
from cadence_store.journal.states import RUN_STATES

A = "a" * 64
CREATED = {"runId": "run-1", "rootHash": A, "stage": "abel-implement", "change": "c"}


def _error(action: Any, *args: Any) -> tuple[type, str] | None:
    try:
        action(*args)
    except (JournalIntegrityError, InvalidTransitionError) as error:
        return type(error), error.code
    return None


steps = st.lists(
    st.tuples(
        st.sampled_from([*RUN_STATES, "made-up"]),
        st.one_of(st.none(), st.sampled_from(["wait", "grow"]), st.integers(0, 2)),
        st.booleans(),  # a wrong "from"
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_the_inline_transition_fold_is_apply_event(moves: list[tuple[str, Any, bool]]) -> None:
    verifier = ChainVerifier()
    prior = ZERO_EVENT_HASH
    created = hash_event(1, "run-created", CREATED, prior)
    verifier.feed_json(1, "run-created", js_stringify(CREATED), created, prior)
    expected = apply_event(None, 1, "run-created", CREATED, created)
    prior = created
    for sequence, (target, code, wrong_from) in enumerate(moves, start=2):
        assert expected is not None
        payload: dict[str, Any] = {
            "from": "paused" if wrong_from else expected["state"],
            "to": target,
        }
        if code is not None:
            payload["code"] = code
        digest = hash_event(sequence, "state-transitioned", payload, prior)
        wanted = _error(apply_event, expected, sequence, "state-transitioned", payload, digest)
        text = js_stringify(payload)
        got = _error(verifier.feed_json, sequence, "state-transitioned", text, digest, prior)
        assert got == wanted
        if wanted is not None:
            return
        expected = apply_event(expected, sequence, "state-transitioned", payload, digest)
        assert js_stringify(verifier.result()) == js_stringify(expected)  # key order too
        prior = digest


def test_a_repeated_payload_text_verifies_each_time_and_memory_stays_bounded() -> None:
    verifier = ChainVerifier()
    prior = ZERO_EVENT_HASH
    digest = hash_event(1, "run-created", CREATED, prior)
    verifier.feed_json(1, "run-created", js_stringify(CREATED), digest, prior)
    prior = digest
    for sequence in range(2, 2_000):
        # a few texts repeated, and a thousand seen once
        code = f"c{sequence % 3}" if sequence % 2 else f"once-{sequence}"
        payload = {"from": verifier.result()["state"], "to": "paused", "code": code}
        digest = hash_event(sequence, "state-transitioned", payload, prior)
        verifier.feed_json(sequence, "state-transitioned", js_stringify(payload), digest, prior)
        assert verifier.result()["pauseCode"] == code
        prior = digest
    assert len(verifier._decoded) <= 256
    # a repeated text with a wrong hash is still refused
    payload = {"from": "paused", "to": "paused", "code": "c1"}
    with pytest.raises(JournalIntegrityError) as raised:
        verifier.feed_json(2_000, "state-transitioned", js_stringify(payload), A, prior)
    assert raised.value.field == "hash" and raised.value.sequence == 2_000


def _chain(length: int, proof: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The projections of a chain: created, then transitions (one bind with `proof`)."""
    document = apply_event(None, 1, "run-created", CREATED, "1" * 64)
    assert document is not None
    projections = [dict(document)]
    for sequence in range(2, length + 1):
        if proof is not None and sequence == 2:
            payload: dict[str, Any] = {
                "gate": "gate-a",
                "revision": 1,
                "receiptHash": A,
                "approvalProof": proof,
            }
            digest = f"{sequence:064x}"
            document = apply_event(document, sequence, "delivery-bound", payload, digest)
        else:
            payload = {"from": document["state"], "to": "paused", "code": f"c{sequence}"}
            document = apply_event(
                document, sequence, "state-transitioned", payload, f"{sequence:064x}"
            )
        assert document is not None
        projections.append(dict(document))
    return projections


def _check(projections: list[dict[str, Any]], rows: list[tuple[int, str, Any]]) -> Any:
    located = LocatedReceipts(rows)
    following = located.next_sequence
    for sequence, projection in enumerate(projections, start=1):
        if following <= sequence:
            following = located.observe(sequence, projection)
    return located.finish(), located.elsewhere


def test_genuine_receipts_in_sequence_order_verify_including_two_at_one_sequence() -> None:
    chain = _chain(6)
    rows = [(n, f"op-{n}", js_stringify(p)) for n, p in enumerate(chain, start=1)]
    rows.insert(3, (3, "op-3-again", js_stringify(chain[2])))  # a replayed bind's receipt
    assert _check(chain, rows) == (None, [])
    assert _check(chain, []) == (None, [])


@pytest.mark.parametrize(
    ("tamper", "field"),
    [
        (lambda text: text.replace('"paused"', '"completed"'), "outcome_json.state"),
        (lambda text: text.replace('"runId":"run-1"', '"runId":"other"'), "outcome_json.runId"),
        (lambda text: text.replace("{", "{ ", 1), "outcome_json"),  # same values, other bytes
        (lambda text: "{oops", "outcome_json"),
        (lambda text: None, "outcome_json"),
    ],
)
def test_the_first_receipt_that_is_not_the_replay_is_named(tamper: Any, field: str) -> None:
    chain = _chain(6)
    rows = [(n, f"op-{n}", js_stringify(p)) for n, p in enumerate(chain, start=1)]
    rows[3] = (4, "op-4", tamper(rows[3][2]))
    rows[4] = (5, "op-5", "{}")  # a later fault is not the one named
    fault, elsewhere = _check(chain, rows)
    assert elsewhere == []
    assert (fault.code, fault.operation_id, fault.sequence) == (RECEIPT_MISMATCH, "op-4", 4)
    assert fault.field == field


@pytest.mark.parametrize("located", [0, -3, 7, 99])
def test_a_receipt_located_off_the_chain_is_named(located: int) -> None:
    chain = _chain(6)
    rows = [(n, f"op-{n}", js_stringify(p)) for n, p in enumerate(chain, start=1)]
    rows.append((located, "stray", js_stringify({**chain[0], "sequence": located})))
    rows.sort(key=lambda row: row[0])
    fault, elsewhere = _check(chain, rows)
    assert elsewhere == []
    assert (fault.operation_id, fault.field, fault.sequence) == (
        "stray",
        "outcome_json.sequence",
        located,
    )


def test_a_receipt_stored_at_another_sequence_than_its_text_names_is_handed_on() -> None:
    chain = _chain(6)
    rows = [(n, f"op-{n}", js_stringify(p)) for n, p in enumerate(chain, start=1)]
    rows[4] = (5, "op-5", js_stringify(chain[2]))  # a genuine older projection
    assert _check(chain, rows) == (None, [("op-5", 3, js_stringify(chain[2]))])
    # stored before the first event or beyond the head, naming a sequence on the chain
    for located in (0, 9):
        stray = [*rows[:4], (located, "stray", js_stringify(chain[1]))]
        stray.sort(key=lambda row: row[0])
        assert _check(chain, stray) == (None, [("stray", 2, js_stringify(chain[1]))])


def test_orjson_is_trusted_only_where_its_bytes_are_json_stringify() -> None:
    # an approval proof may carry extra values, which orjson writes otherwise (1e+16)
    proof = {"revision": 1, "contractHash": A, "recordHash": A, "extra": 1e16, "0": 1}
    chain = _chain(3, proof)
    exact = js_stringify(chain[1])
    assert '"extra":10000000000000000' in exact
    assert orjson.dumps(chain[1]).decode() != exact
    assert _check(chain, [(2, "bind", exact)]) == (None, [])
    fault, _ = _check(chain, [(2, "bind", orjson.dumps(chain[1]).decode())])
    assert fault is not None and fault.operation_id == "bind"
    # the three proven keys of a proof take the fast path and still compare exactly
    plain = _chain(3, {"revision": 1, "contractHash": A, "recordHash": A})
    assert _check(plain, [(2, "bind", js_stringify(plain[1]))]) == (None, [])


def test_orjson_writes_every_string_as_json_stringify_does() -> None:
    """What `_fast_stringify` relies on: for every code point but lone surrogates (which
    orjson refuses), orjson's string escapes are JSON.stringify's."""
    points = [*range(0xD800), *range(0xE000, 0x10000), 0x10000, 0x1F600, 0x10FFFF]
    texts = ["a" + chr(point) + "b" for point in points]
    assert [orjson.dumps(text).decode() for text in texts] == [js_stringify(t) for t in texts]
    with pytest.raises(TypeError):
        orjson.dumps("\ud800")
