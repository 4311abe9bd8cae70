"""One writer process of `benchmarks.archive`, run by path (so PYTHONPATH picks the
cadence_store): `python benchmarks/archive_worker.py URL RUN_ID TAG`.

Opens a store and appends durable transitions to its own (paused) run, one after the
other, until standard input closes; then prints one JSON line: every call as
`[started_ns, duration_ns]` on the monotonic clock (shared by the machine's processes, so
the parent can tell which calls fell inside the archive).
"""

from __future__ import annotations

import json
import sys
import threading
import time

ROOT_HASH = "ab" * 32


def main() -> None:
    from cadence_store import RunStore

    url, run_id, tag = sys.argv[1:4]
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    store = RunStore(url, root_hash=ROOT_HASH)
    samples: list[tuple[int, int]] = []
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    index = 0
    while not stop.is_set():
        started = time.monotonic_ns()
        store.transition(run_id, "paused", operation_id=f"w-{tag}-{index}", code="writer")
        samples.append((started, time.monotonic_ns() - started))
        index += 1
    store.close()
    sys.stdout.write(json.dumps(samples) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
