"""The hot loop of verification: a run's event rows fed to a `ChainVerifier`, and its
journal receipts checked as the replay passes the sequences they name. Pure: the caller
reads the rows.

Once hashing and JSON are in C, function calls are most of a replay's cost per event, so
the usual event (a state transition to a legal state, whose payload text the verifier
has decoded before, linking to the previous event) is checked and folded here inline,
with the verifier's state in locals. Every other event goes through
`ChainVerifier.feed_json`, which is the rule and decides each case this loop does not
take (a new payload text, a break, a mismatch, another event type).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from hashlib import sha256
from typing import Any, Final

from .events import EVENT_TYPE_JSON, MAX_SAFE
from .projection import ChainVerifier, Document
from .receipts import LocatedReceipts, ReceiptVerifier, orjson_dumps
from .states import LEGAL_TRANSITIONS, TERMINAL_STATES
from .vocabulary import STATE_TRANSITIONED

# (sequence, type, payload_json, prior_hash, event_hash, recorded_at), as stored
EventRows = Iterable[tuple[Any, Any, Any, Any, Any, Any]]
# the first sequence whose recorded_at is below an earlier one, its time, the earlier one
TimeDecrease = tuple[int, int, int]

_TRANSITION_JSON: Final = EVENT_TYPE_JSON[STATE_TRANSITIONED]
# a transition's hashed text (`hash_canonical_event`) around its canonical payload
_TRANSITION: Final = (
    b'{"payload":%b,"priorHash":"%b","sequence":%d,"type":' + _TRANSITION_JSON + b"}"
)
_TRANSITIONS_KEPT: Final = 256  # distinct transition payload texts remembered
_UNSEEN: Final[Any] = object()


# payload text -> what folding it takes: (canonical JSON, from, to, pause code or None,
# whether `to` is terminal); only for a dict payload whose canonical JSON the fast path
# proved and whose move is legal
Transition = tuple[bytes, str, str, str | None, bool]


def _transition(cached: tuple[Any, bytes | None]) -> Transition | None:
    payload, canonical = cached
    if canonical is None or type(payload) is not dict:
        return None
    source, target, code = payload.get("from"), payload.get("to"), payload.get("code")
    if type(source) is not str or target not in LEGAL_TRANSITIONS.get(source, ()):
        return None
    code = code if isinstance(code, str) else None
    return canonical, source, target, code, target in TERMINAL_STATES


def replay_rows(
    verifier: ChainVerifier,
    rows: EventRows,
    receipts: ReceiptVerifier | None = None,
    located: LocatedReceipts | None = None,
) -> TimeDecrease | None:
    """Feed `rows` (in sequence order) to `verifier`; after each event, check the receipts
    `located` streams at its sequence and those `receipts` waits for there.

    Raises what `feed_json` raises, with the verifier's state at the event at fault.
    Returns where recorded_at first decreases (times are outside the hash: the caller
    reports it, never a failure), or None.
    """
    waiting = {} if receipts is None else receipts.waiting
    decoded = verifier.decoded
    feed = verifier.feed_json
    transitions: dict[str, Any] = {}  # Transition, or None: the rule decides
    projection: Document | None = verifier.projection
    prior = verifier.prior_hash
    prior_ascii = verifier.prior_ascii
    count = verifier.count
    # the next receipt streamed in chain order, its sequence (inf: none), the rest
    pending = None if located is None else located.pending
    following = math.inf if pending is None else pending[0]
    streamed = iter(()) if located is None else located.rows
    dumps = orjson_dumps
    latest = -1  # the latest recorded_at so far (-1: none yet)
    decrease: TimeDecrease | None = None
    try:
        for sequence, type_, payload_json, prior_hash, event_hash, recorded_at in rows:
            move = None
            if type(payload_json) is str:
                move = transitions.get(payload_json, _UNSEEN)
                if move is _UNSEEN:  # known once the verifier has decoded the text
                    cached = decoded.get(payload_json)
                    move = None if cached is None else _transition(cached)
                    if cached is not None:
                        if len(transitions) >= _TRANSITIONS_KEPT:
                            transitions.clear()
                        transitions[payload_json] = move
            if (
                move is not None
                and type_ == STATE_TRANSITIONED
                and projection is not None
                and prior_hash == prior
                and type(sequence) is int
                and sequence == count + 1
                and sequence <= MAX_SAFE
                and projection["state"] == move[1]
                and sha256(_TRANSITION % (move[0], prior_ascii, sequence)).hexdigest() == event_hash
            ):
                # `ChainVerifier._enter`, inline: old markers move to the end
                _, _, target, code, terminal = move
                projection.pop("pauseCode", None)
                projection.pop("terminal", None)
                projection["state"] = target
                if code is not None:
                    projection["pauseCode"] = code
                if terminal:
                    projection["terminal"] = target
                projection["sequence"] = sequence
                projection["eventHash"] = event_hash
                prior = event_hash
                prior_ascii = event_hash.encode("ascii")  # equals a hexdigest
                count += 1
            else:  # the rule decides
                verifier.prior_hash, verifier.prior_ascii, verifier.count = (
                    prior,
                    prior_ascii,
                    count,
                )
                feed(sequence, type_, payload_json, event_hash, prior_hash)
                projection = verifier.projection
                prior, prior_ascii, count = (
                    verifier.prior_hash,
                    verifier.prior_ascii,
                    verifier.count,
                )
            if following <= sequence:
                assert located is not None and pending is not None
                if (
                    following == sequence
                    and dumps is not None
                    and projection is not None
                    and not projection["deliveryBindings"]
                    and located.fault is None
                    and (len(pending) == 3 or pending[3] is None)
                ):
                    # the usual receipt: the one at this sequence is the projection, as
                    # orjson writes it (`receipts._fast_stringify`: proven the same bytes
                    # as JSON.stringify without approval proofs; it refuses lone surrogates)
                    try:
                        encoded: str | None = dumps(projection).decode()
                    except (TypeError, ValueError):
                        encoded = None
                    if pending[2] == encoded:
                        pending = next(streamed, None)
                        following = math.inf if pending is None else pending[0]
                if following <= sequence:  # anything else: the rule decides
                    located.pending = pending
                    following = located.observe(sequence, projection)
                    pending = located.pending
            if sequence in waiting:
                receipts.observe(sequence, projection)  # type: ignore[union-attr]
            if recorded_at is not None:
                if recorded_at < latest and decrease is None:
                    decrease = (sequence, recorded_at, latest)
                latest = recorded_at
    finally:
        # the locals are the verifier's state (a failed `feed` changed nothing)
        verifier.prior_hash, verifier.prior_ascii, verifier.count = prior, prior_ascii, count
        if located is not None:
            located.pending = pending
    return decrease


__all__ = ["EventRows", "TimeDecrease", "Transition", "replay_rows"]
