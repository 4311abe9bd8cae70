"""One writer process of tests/reliability/test_failover.py.

``python failover_writer.py URL RUN_ID PREFIX LOG STOP`` appends paused -> paused
transitions to RUN_ID with unique operation ids (PREFIX-0, PREFIX-1, ...) through its own
`RunStore` on URL (a multi-host URL), until the file STOP exists. It never retries by
itself: re-running across the failover is the store's job. Each attempt is a line in LOG,
flushed at once, so a writer killed at any moment leaves a readable record:

    attempt <op> <unix time>
    ack <op> <unix time>
    fail <op> <unix time> <code>
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from cadence_store import CadenceStoreError, RunStore

ROOT_HASH = "ab" * 32


def main(url: str, run_id: str, prefix: str, log_path: str, stop_path: str) -> None:
    stop = Path(stop_path)
    with RunStore(url, root_hash=ROOT_HASH) as store, open(log_path, "a") as log:
        number = 0
        while not stop.exists():
            operation_id = f"{prefix}-{number}"
            number += 1
            log.write(f"attempt {operation_id} {time.time():.6f}\n")
            log.flush()
            try:
                store.transition(run_id, "paused", operation_id=operation_id, code="tick")
            except CadenceStoreError as error:
                log.write(f"fail {operation_id} {time.time():.6f} {error.code}\n")
            else:
                log.write(f"ack {operation_id} {time.time():.6f}\n")
            log.flush()


if __name__ == "__main__":
    main(*sys.argv[1:6])
