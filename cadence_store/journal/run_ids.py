"""New run ids: time-ordered UUIDs (RFC 9562, version 7).

A run's id leads the primary key of its rows in the runs, events and operations tables.
Random (version 4) ids, as cadence 1.x made, put each new run on a random page of each of
those indexes; on a large PostgreSQL store the first write to a page after a checkpoint
logs the whole page, so a new run wrote 24 KB of WAL at 100,000 runs against 2.5 KB at 200
(measured), and cost 1.6x as much. A version 7 id begins with the time in milliseconds,
so new runs land at the right edge of every index; its other 74 bits are random. Ids of
adopted cadence 1.x runs stay as they were.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Final

_MILLISECONDS: Final = (1 << 48) - 1
_VERSION_BITS: Final = 0xF << 76
_VARIANT_BITS: Final = 0x3 << 62


def new_run_id() -> str:
    """A fresh run id: a version 7 UUID, in the canonical lowercase form."""
    milliseconds = (time.time_ns() // 1_000_000) & _MILLISECONDS
    value = milliseconds << 80 | int.from_bytes(os.urandom(10), "big")
    value = (value & ~_VERSION_BITS) | 0x7 << 76
    value = (value & ~_VARIANT_BITS) | 0x2 << 62  # the RFC 9562 variant
    return str(uuid.UUID(int=value))


__all__ = ["new_run_id"]
