"""Code the benchmark runs in child processes (importable, for the spawn start method)."""

from __future__ import annotations

import time
from typing import Any

from cadence_store import RunStore

ROOT_HASH = "ab" * 32


def contender(url: str, run_id: str, worker: int, appends: int, start: Any, done: Any) -> None:
    store = RunStore(url, root_hash=ROOT_HASH)
    start.wait()
    for index in range(appends):
        store.transition(
            run_id, "paused", operation_id=f"c-{worker}-{index}-{time.time_ns()}", code="c"
        )
    store.close()
    done.put(worker)
