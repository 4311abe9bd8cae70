"""Identifier, change-name and hash rules, checked the same by every method; booleans are
not integers; a rejected input writes nothing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadence_store import InvalidInputError, OperationLease
from cadence_store.journal.validation import require_change, require_operation_id

A = "a" * 64

VALID_OPERATION_IDS = [
    "a",
    "0",
    "Z",
    "start-001",
    "Op.1:retry-2",
    "a..b",
    "a:-.b",
    "a_b",
    "x" * 128,
    "A" + "." * 126 + "z",
    "op-\u212a",  # Kelvin sign: cadence 1.x's /iu folds it to k
    "\u017f",  # long s: folds to s
    "\u212a" * 128,
]
INVALID_OPERATION_IDS = [
    "",
    "-a",
    "a-",
    ".a",
    "a.",
    ":a",
    "a:",
    "_a",
    "a_",
    "a b",
    "a/b",
    "x" * 129,
    "é",
    "\u0130",  # İ: Python's re.IGNORECASE folds it to i, JavaScript's /iu does not
    "\u0131",  # ı
    "\u212a" * 129,
    "a\n",
    "\na",
    "a\x00",
    "０",  # fullwidth zero
    1,
    None,
    b"ab",
]
VALID_CHANGES = ["a", "0", "a-b", "a--b", "1-2-3", "c" * 128]
INVALID_CHANGES = [
    "",
    "A",
    "Change",
    "a.b",
    "a_b",
    "a:b",
    "-a",
    "a-",
    "c" * 129,
    "a\n",
    "\u017f",
    "\u212a",
    "é",
    "a b",
    7,
]
INVALID_HASHES = [
    "A" * 64,
    "a" * 63,
    "a" * 65,
    "g" * 64,
    " " + "a" * 63,
    "a" * 64 + "\n",
    "０" * 64,
    "a" * 32 + "-" + "a" * 31,
]


def test_operation_ids_are_checked_by_every_method(store, rejected, table_rows):
    run = store.start_run("abel-design", provisional_key=A, operation_id="s0")
    calls = {
        "start_run": lambda op: store.start_run("abel-design", provisional_key=A, operation_id=op),
        "bind_change": lambda op: store.bind_change(run.run_id, "named", operation_id=op),
        "bind_delivery": lambda op: store.bind_delivery(
            run.run_id, "gate-a", 1, A, operation_id=op
        ),
        "transition": lambda op: store.transition(run.run_id, "paused", operation_id=op),
        "acquire_lease": lambda op: store.acquire_lease(run.run_id, op, 1_000),
        "inspect_operation": lambda op: store.inspect_operation(run.run_id, op),
    }
    for call in calls.values():
        for operation_id in INVALID_OPERATION_IDS:
            with rejected(InvalidInputError, "invalid-operation-id"):
                call(operation_id)

    # valid ids work; they are kept exactly as given (case included)
    for operation_id in VALID_OPERATION_IDS:
        assert store.start_run(
            "abel-design", provisional_key=A, operation_id=operation_id
        ).run_id == (run.run_id)
        lease = store.acquire_lease(run.run_id, f"lease-{operation_id}"[:128].rstrip("."), 1_000)
        assert isinstance(lease, OperationLease)
    store.start_run("abel-design", provisional_key=A, operation_id="S0")
    stored = {r["operation_id"] for r in table_rows("operations")}
    assert {"s0", "S0", *VALID_OPERATION_IDS} <= stored


def test_change_names(store, rejected):
    design = store.start_run("abel-design", provisional_key=A, operation_id="s0")
    for change in INVALID_CHANGES:
        with rejected(InvalidInputError, "invalid-change"):
            store.start_run("abel-implement", change=change, operation_id="s1")
        with rejected(InvalidInputError, "invalid-change"):
            store.bind_change(design.run_id, change, operation_id="c1")
    for n, change in enumerate(VALID_CHANGES):
        assert store.start_run("abel-implement", change=change, operation_id=f"i{n}").change == (
            change
        )
    assert store.bind_change(design.run_id, "c" * 128, operation_id="c1").change == "c" * 128


def test_hashes_are_64_lowercase_hex(store, store_url, clock, rejected):
    from cadence_store import RunStore

    run = store.start_run("abel-implement", change="ship-it", operation_id="s0")
    proof = {"revision": 1, "contractHash": A, "recordHash": A}
    for bad in INVALID_HASHES:
        with rejected(InvalidInputError, "invalid-provisional-key"):
            store.start_run("abel-design", provisional_key=bad, operation_id="s1")
        with rejected(InvalidInputError, "invalid-provisional-key"):
            store.start_run(
                "abel-design", provisional_key=A, provisional_aliases=[bad], operation_id="s1"
            )
        with rejected(InvalidInputError, "invalid-delivery-binding"):
            store.bind_delivery(run.run_id, "gate-a", 1, bad, operation_id="b1")
        for field in ("contractHash", "recordHash"):
            with rejected(InvalidInputError, "invalid-delivery-binding"):
                store.bind_delivery(
                    run.run_id,
                    "gate-a",
                    1,
                    A,
                    operation_id="b1",
                    approval_proof={**proof, field: bad},
                )
        with rejected(InvalidInputError, "invalid-root-hash"):
            RunStore(store_url, root_hash=bad, clock=clock)
    for not_text in (64, b"a" * 64, ["a" * 64]):
        with rejected(InvalidInputError, "invalid-provisional-key"):
            store.start_run("abel-design", provisional_key=not_text, operation_id="s1")
        with rejected(InvalidInputError, "invalid-delivery-binding"):
            store.bind_delivery(run.run_id, "gate-a", 1, not_text, operation_id="b1")


def test_booleans_are_not_integers(store, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s0")
    lease = store.acquire_lease(run.run_id, "apply-1", 1_000)
    with rejected(InvalidInputError, "invalid-delivery-binding"):
        store.bind_delivery(run.run_id, "gate-a", True, A, operation_id="b1")
    with rejected(InvalidInputError, "invalid-delivery-binding"):
        store.bind_delivery(
            run.run_id,
            "gate-a",
            1,
            A,
            operation_id="b1",
            approval_proof={"revision": True, "contractHash": A, "recordHash": A},
        )
    with rejected(InvalidInputError, "invalid-lease-ttl"):
        store.acquire_lease(run.run_id, "apply-2", True)
    with rejected(InvalidInputError, "invalid-lease-ttl"):
        store.renew_lease(lease, True)
    with rejected(InvalidInputError, "invalid-lease"):
        store.assert_lease({**lease.to_dict(), "expiresAt": True})
    with rejected(InvalidInputError, "invalid-lease-option"):
        store.acquire_lease(run.run_id, "apply-1", 1_000, preempt=1)
    # and the integer forms are fine
    assert store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="b1").sequence == 2


# ---------------------------------------------------------------------------------------
# The pure rules against a character-by-character reading of cadence 1.x's regexes
# ---------------------------------------------------------------------------------------

ALNUM = set("abcdefghijklmnopqrstuvwxyz0123456789")


# JavaScript's /iu case folding: ASCII, and the two code points outside it that fold into
# [a-z] (tests/fixtures/identifier-code-points.json, measured with the real regex)
JS_IU_FOLDS = {"\u212a": "k", "\u017f": "s"}


def reference_operation_id(value: str) -> bool:
    lowered = "".join(c.lower() if c.isascii() else JS_IU_FOLDS.get(c, c) for c in value)
    return (
        1 <= len(value) <= 128
        and lowered[0] in ALNUM
        and lowered[-1] in ALNUM
        and all(c in ALNUM or c in "._:-" for c in lowered)
    )


def reference_change(value: str) -> bool:
    return (
        1 <= len(value) <= 128
        and value[0] in ALNUM
        and value[-1] in ALNUM
        and all(c in ALNUM or c == "-" for c in value)
    )


TRICKY = st.sampled_from(list("azAZ09._:-_ /\n\t") + ["\u0130", "\u0131", "\u212a", "\u017f", "é"])
CANDIDATES = st.one_of(
    st.text(TRICKY, max_size=6),
    st.builds(lambda n, c: "a" * n + c, st.integers(120, 130), st.sampled_from(["", "b", "-"])),
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(CANDIDATES)
def test_identifier_rules_match_cadence_1x(value):
    try:
        require_operation_id(value)
        accepted = True
    except InvalidInputError as error:
        assert error.code == "invalid-operation-id"
        accepted = False
    assert accepted == reference_operation_id(value), repr(value)

    try:
        require_change(value)
        accepted = True
    except InvalidInputError as error:
        assert error.code == "invalid-change"
        accepted = False
    assert accepted == reference_change(value), repr(value)


@pytest.mark.parametrize("value", VALID_OPERATION_IDS)
def test_reference_agrees_with_the_listed_examples(value):
    assert reference_operation_id(value)
