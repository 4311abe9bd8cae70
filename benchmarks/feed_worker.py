"""One process of `benchmarks.feed`, run by path (so PYTHONPATH picks the cadence_store).

`python benchmarks/feed_worker.py append URL TAG`: opens a store, starts a run of its own
(paused), prints `{"module": ...}`; then reads `go N` lines on stdin and answers each,
after N durable transitions of its run, with `{"seconds": ...}`; `quit` ends it.

`python benchmarks/feed_worker.py latency-writer URL COUNT GAP_S`: COUNT transitions,
`GAP_S` apart (jittered), printing `{"run_id", "sequence", "started_ns"}` per append
(the monotonic clock, shared by the machine's processes, before the call).

`python benchmarks/feed_worker.py latency-follower URL AFTER`: follows the feed after
AFTER, printing `{"run_id", "sequence", "yielded_ns"}` per item, until stdin closes.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import threading
import time

ROOT_HASH = "ab" * 32


def _say(value: object) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def _paused_run(store: object, tag: str) -> str:
    key = hashlib.sha256(tag.encode()).hexdigest()
    run = store.start_run("abel-design", provisional_key=key, operation_id=f"start-{tag}")  # type: ignore[attr-defined]
    store.transition(run.run_id, "paused", operation_id=f"pause-{tag}")  # type: ignore[attr-defined]
    return str(run.run_id)


def append(url: str, tag: str) -> None:
    import cadence_store
    from cadence_store import RunStore

    with RunStore(url, root_hash=ROOT_HASH) as store:
        run_id = _paused_run(store, tag)
        _say({"module": cadence_store.__file__})
        count = 0
        for line in sys.stdin:
            command = line.split()
            if command[0] == "quit":
                return
            calls = int(command[1])
            started = time.perf_counter()
            for _ in range(calls):
                count += 1
                store.transition(run_id, "paused", operation_id=f"{tag}-{count}", code="b")
            _say({"seconds": time.perf_counter() - started})


def latency_writer(url: str, count: int, gap_s: float) -> None:
    from cadence_store import RunStore

    with RunStore(url, root_hash=ROOT_HASH) as store:
        run_id = _paused_run(store, f"latency-{time.time_ns()}")
        for index in range(count):
            time.sleep(random.uniform(0.5, 1.5) * gap_s)
            started_ns = time.monotonic_ns()
            projection = store.transition(
                run_id, "paused", operation_id=f"latency-{index}", code="l"
            )
            _say({"run_id": run_id, "sequence": projection.sequence, "started_ns": started_ns})


def latency_follower(url: str, after: int) -> None:
    from cadence_store import RunStore

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    with RunStore(url, root_hash=ROOT_HASH) as store:
        _say({"ready": True})
        for item in store.follow(after=after, stop=stop):
            yielded_ns = time.monotonic_ns()
            _say({"run_id": item.run_id, "sequence": item.event.sequence, "yielded_ns": yielded_ns})


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "append":
        append(args[0], args[1])
    elif mode == "latency-writer":
        latency_writer(args[0], int(args[1]), float(args[2]))
    elif mode == "latency-follower":
        latency_follower(args[0], int(args[1]))
    else:
        raise SystemExit(f"unknown mode {mode}")
