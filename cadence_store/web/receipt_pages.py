"""A run's receipts, a keyset page at a time (`RECEIPTS_PER_PAGE`, by operation id): the
cursor of a request's `operations_after` / `operations_before`, the reads of one page,
and the window the page and its JSON twin show. A run has one receipt per call, so a
long run's receipts are never read or sent whole; its leases (few) show on every page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from ..errors import InvalidInputError
from ..journal.validation import is_storable
from ..storage.read_statements import RECEIPT_ROWS_OF_RUN_AFTER, RECEIPT_ROWS_OF_RUN_BEFORE
from ..storage.statements import Query

RECEIPTS_PER_PAGE = 100
CURSOR_CHARACTERS = 1024  # longer is no operation id's cursor
OPERATIONS_AFTER = "operations_after"
OPERATIONS_BEFORE = "operations_before"
# sorts before any operation id (one starts with a letter or digit): the first page's bound
_BEFORE_ANY_ID = ""

Read = tuple[Query[Any], Mapping[str, Any]]


@dataclass(frozen=True)
class OperationCursor:
    """Where a run's page of receipts starts: after an operation id, or just before one
    (at most one of them; neither: the first receipts)."""

    after: str | None = None
    before: str | None = None

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> OperationCursor:
        """The cursor of a request's `operations_after` / `operations_before`."""
        after = _operation_id_of(query.get(OPERATIONS_AFTER), OPERATIONS_AFTER)
        before = _operation_id_of(query.get(OPERATIONS_BEFORE), OPERATIONS_BEFORE)
        if after is not None and before is not None:
            raise InvalidInputError(
                "invalid-operation-cursor", "give operations_after or operations_before, not both"
            )
        return cls(after=after, before=before)

    def page_read(self, run_id: str) -> Read:
        """The read of this page's receipts, one more than a page (whether more follow)."""
        page = {"run_id": run_id, "limit": RECEIPTS_PER_PAGE + 1}
        if self.before is not None:
            return RECEIPT_ROWS_OF_RUN_BEFORE, {**page, "before": self.before}
        return RECEIPT_ROWS_OF_RUN_AFTER, {**page, "after": self.after or _BEFORE_ANY_ID}

    def shown(self, rows: list[tuple[Any, ...]]) -> tuple[list[tuple[Any, ...]], bool]:
        """The page's rows in operation id order, and whether more lie beyond them in the
        direction read."""
        more = len(rows) > RECEIPTS_PER_PAGE
        rows = rows[:RECEIPTS_PER_PAGE]
        if self.before is not None:
            rows.reverse()
        return rows, more

    def beside_read(self, run_id: str, first: str, last: str) -> Read | None:
        """The probe of whether receipts lie on the side of the page the cursor came
        from (one key lookup), or None: the first page has none before it."""
        probe = {"run_id": run_id, "limit": 1}
        if self.before is not None:
            return RECEIPT_ROWS_OF_RUN_AFTER, {**probe, "after": last}
        if self.after is not None:
            return RECEIPT_ROWS_OF_RUN_BEFORE, {**probe, "before": first}
        return None


def _operation_id_of(value: str | None, name: str) -> str | None:
    # any text a database holds: the cursor is a bound in the key's order, and the ids
    # it follows are those stored (a store cadence 1.x wrote may hold others than the
    # library writes)
    if value is None or value == "":
        return None
    if len(value) > CURSOR_CHARACTERS or not is_storable(value):
        raise InvalidInputError("invalid-operation-cursor", f"{name} is an operation id")
    return value


@dataclass(frozen=True)
class ReceiptWindow:
    """The page's receipts: the operation ids of its first and last (None when it has
    none), how many the run has, and whether pages lie before and after it."""

    first: str | None
    last: str | None
    receipts: int
    more_before: bool
    more_after: bool
    size: int = RECEIPTS_PER_PAGE

    @property
    def previous_before(self) -> str | None:
        """`operations_before` of the page before this one (None: this is the first)."""
        return self.first if self.more_before else None

    @property
    def next_after(self) -> str | None:
        """`operations_after` of the page after this one (None: this is the last)."""
        return self.last if self.more_after else None

    def to_dict(self) -> dict[str, Any]:
        """The JSON twin's `operationPage`: the window and its neighbours' query strings."""
        neighbours = {
            "previous": (OPERATIONS_BEFORE, self.previous_before),
            "next": (OPERATIONS_AFTER, self.next_after),
        }
        window: dict[str, Any] = {"size": self.size, "first": self.first, "last": self.last}
        window["receipts"] = self.receipts
        for name, (parameter, operation_id) in neighbours.items():
            window[name] = None if operation_id is None else urlencode({parameter: operation_id})
        return window


__all__ = [
    "OPERATIONS_AFTER",
    "OPERATIONS_BEFORE",
    "RECEIPTS_PER_PAGE",
    "OperationCursor",
    "ReceiptWindow",
]
