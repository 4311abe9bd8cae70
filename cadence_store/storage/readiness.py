"""Which engines have passed the open-time checks (head revision, shape), per schema.

Kept per connection pool, so the checks run once per engine; an upgrade or downgrade
through an engine forgets it, and the next use checks again. This module holds only the
record: the checks are `shape.assert_store_ready`'s, and `schema.upgrade` forgets.
"""

from __future__ import annotations

import threading
import weakref
from typing import Final

from sqlalchemy.pool import Pool

_ready: weakref.WeakKeyDictionary[Pool, set[str | None]] = weakref.WeakKeyDictionary()
_ready_lock: Final = threading.Lock()


class Forgets:
    """How many times a pool's record was forgotten: a caller that saw a pool ready at
    `count` knows it still is while `count` has not changed (one attribute read, where
    `is_store_ready` takes the lock and a weak reference)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


FORGETS: Final = Forgets()


def is_store_ready(pool: Pool, schema: str | None = None) -> bool:
    """Whether the store's checks have passed on `pool` for `schema` (and still count)."""
    with _ready_lock:
        return schema in _ready.get(pool, ())


def mark_store_ready(pool: Pool, schema: str | None) -> None:
    with _ready_lock:
        _ready.setdefault(pool, set()).add(schema)


def forget_store_ready(pool: Pool) -> None:
    """Check the engine of `pool` again on next use."""
    with _ready_lock:
        FORGETS.count += 1
        _ready.pop(pool, None)


__all__ = ["FORGETS", "Forgets", "forget_store_ready", "is_store_ready", "mark_store_ready"]
