"""One process of tests/reliability/test_verify_jobs_threads.py.

``python verify_with_writers.py URL ATTEMPTS`` starts writer threads that append to the
SQLite store at URL (each call on a new connection, as a threaded application's would),
then runs ``verify_runs(store, jobs=2)`` ATTEMPTS times while they write; it prints
``attempt N ok`` after each and ``done`` at the end, flushed, so a hang shows where.
"""

from __future__ import annotations

import sys
import threading

from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from cadence_store import CadenceStoreError, RunStore
from cadence_store.parallel_verify import verify_runs

ROOT_HASH = "ab" * 32
WRITERS = 6  # each call on a new connection: connects often, as the deadlock needs


def write_until(url: str, run_id: str, name: str, stop: threading.Event) -> None:
    engine = create_engine(url, poolclass=NullPool)  # a new connection per call
    try:
        with RunStore(engine, root_hash=ROOT_HASH) as store:
            number = 0
            while not stop.is_set():
                try:
                    store.transition(run_id, "paused", operation_id=f"{name}-{number}")
                except CadenceStoreError:
                    pass  # busy now and then: the writers only have to keep going
                number += 1
    finally:
        engine.dispose()


def main(url: str, attempts: int) -> None:
    with RunStore(url, root_hash=ROOT_HASH) as store:
        run_ids = [
            store.start_run("abel-implement", change=f"w{n}", operation_id=f"s{n}").run_id
            for n in range(WRITERS)
        ]
        stop = threading.Event()
        threads = [
            threading.Thread(target=write_until, args=(url, run_id, f"w{n}", stop), daemon=True)
            for n, run_id in enumerate(run_ids)
        ]
        for thread in threads:
            thread.start()
        try:
            for attempt in range(attempts):
                checks = verify_runs(store, jobs=2)
                assert all(check.ok for check in checks), checks
                print(f"attempt {attempt} ok", flush=True)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
