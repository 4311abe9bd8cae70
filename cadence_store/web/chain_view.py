"""A run's whole chain as its page shows it, read once: the store's own verification
(`RunReads.verify_integrity`, every event and receipt, on every request), handed each
page of event rows it reads, which are then the rows folded into the state timeline
and counted per hour.

Only a chain that verifies is shown from those rows: verification read it whole, in
sequence order, in this snapshot. A chain that does not verify may have stopped the
replay early, so its rows are read again (by the primary key, up to the run's head).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import JournalIntegrityError
from ..journal.views import EventFields
from ..journal.vocabulary import STATE_SETTING_EVENTS
from ..repository.core import JournalAccess
from ..repository.reading import RunReads
from ..repository.run_repository import RunRepository
from ..storage.failures import READ, database_errors
from ..storage.read_statements import EVENTS_OF_RUN_AFTER
from .reads import per_hour

_LONG_NUMBER = re.compile(r"[0-9]{16}")
_UNPARSED: Any = object()
_PARSED_KEPT = 256  # distinct payload texts a fold remembers


@dataclass(frozen=True)
class Verification:
    """The chain's verification, computed for this request: intact, or the code and the
    sequence where it broke."""

    intact: bool
    code: str | None = None
    sequence: int | None = None


@dataclass(frozen=True)
class VerifiedChain:
    """The verification, and the chain's event rows (`iter_event_rows`' columns:
    sequence, type, payload_json, prior_hash, event_hash, recorded_at) in pages, oldest
    first."""

    verification: Verification
    pages: list[list[tuple[Any, ...]]]

    def fold_fields(self, last: int) -> Iterator[EventFields]:
        """The events up to sequence `last`, their payloads parsed, for `state_path`."""
        parsed: dict[str, Any] = {}
        for page in self.pages:
            for sequence, type_, payload_json, _, event_hash, recorded_at in page:
                if sequence > last:
                    return
                yield sequence, type_, _parsed(payload_json, parsed), event_hash, recorded_at

    def state_changes_per_hour(self) -> dict[int, int]:
        """How many events set the run's state in each hour (events without a time
        left out)."""
        return per_hour(
            row[5] for page in self.pages for row in page if row[1] in STATE_SETTING_EVENTS
        )


def verified_chain(runs: RunRepository, run_id: str, head: int) -> VerifiedChain:
    """Verify the run's chain in `runs`' snapshot (a broken chain is not an error of the
    page) and keep its rows; `head`: the run's stored sequence, up to which a chain that
    does not verify is read again."""
    pages: list[list[tuple[Any, ...]]] = []
    reads = RunReads(JournalAccess(runs.transaction, None))
    try:
        with database_errors(READ):
            reads.verify_integrity(run_id, pages.append)
    except JournalIntegrityError as error:
        verification = Verification(intact=False, code=error.code, sequence=error.sequence)
        sql = runs.transaction.statements(write=False)
        with database_errors(READ):
            rows = sql.raw_rows(EVENTS_OF_RUN_AFTER, run_id=run_id, after=0, limit=head)
        return VerifiedChain(verification, [rows])
    return VerifiedChain(Verification(intact=True), pages)


def _parsed(payload_json: Any, parsed: dict[str, Any]) -> Any:
    # the fold reads a payload's top-level fields only; one that is no JSON ends the
    # path where it cannot apply (verification names the fault). orjson reads most (a
    # page may fold thousands); the stdlib what it refuses, and integers of 16 digits
    # or more (orjson makes those beyond 64 bits floats). `parsed`: the texts read so
    # far (a chain repeats a few payload texts thousands of times; the fold reads a
    # payload, never changes it, so one value serves them all)
    if not isinstance(payload_json, str):
        return None
    value = parsed.get(payload_json, _UNPARSED)
    if value is not _UNPARSED:
        return value
    value = _loaded(payload_json)
    if len(parsed) >= _PARSED_KEPT:
        parsed.clear()
    parsed[payload_json] = value
    return value


def _loaded(payload_json: str) -> Any:
    if _LONG_NUMBER.search(payload_json) is None:
        try:
            return orjson.loads(payload_json)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(payload_json)
    except (ValueError, RecursionError):
        return None


__all__ = ["Verification", "VerifiedChain", "verified_chain"]
