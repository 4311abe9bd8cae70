"""Verifying many runs, across processes (`cadence-store verify --jobs N`).

Runs are independent chains, so N worker processes each verify a share of them, each on
its own connection and in its own read snapshots, exactly as `RunStore.verify_integrity`
does in one process; the results come back in the order of the run ids, each as soon as
it and those before it are known (`iter_verified_runs`; `verify_runs` collects them). In
one process a whole store's ids are read in keyset pages of `RUN_ID_PAGE`, so memory does
not grow with the store; across processes the ids are read whole first. A run that fails
is diagnosed (`transfer.check_record` on its rows) so that the report names the first bad
sequence and what differs.

Workers come from a fork server (spawn where there is none), never from a fork of the
caller's process: that process may run threads (a host's writers, a driver's), and a fork
copies whatever lock one of them held (a worker then hung in `sqlite3.connect`). The fork
server imports the library once, so a worker starts with it imported. Workers connect
with the store's URL and schema, never through the parent's connections. The parent waits
for them with a bound: a worker that sends nothing for `STALL_TIMEOUT_S` while the parent
has nothing left to verify ends the call with `run-store-unavailable`. As with any
`multiprocessing` start method but fork, a script that calls `verify_runs(..., jobs=N)` at
its top level needs an `if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.process
import queue
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

from sqlalchemy import Engine

from .errors import (
    CadenceStoreError,
    InvalidInputError,
    JournalIntegrityError,
    StoreUnavailableError,
)
from .storage.engine import create_store_engine
from .store.run_store import RunStore
from .transfer import RunCheck, check_record, read_record

__all__ = ["RUN_ID_PAGE", "diagnose_run", "iter_verified_runs", "verify_runs"]

# runs per task handed to a worker: big enough to amortise the round trip, small enough
# to keep both workers busy to the end
_MAX_CHUNK: Final = 64
# run ids read at a time (a keyset page of `RunStore.run_ids`) when one process verifies
# the whole store
RUN_ID_PAGE: Final = 10_000


def diagnose_run(store: RunStore, run_id: str, error: JournalIntegrityError) -> RunCheck:
    """What differs in a run that failed `verify_integrity` (the first bad sequence and
    the stored value), falling back to the error's own code and sequence."""
    with store.engine.connect() as connection:
        record = read_record(connection, run_id)
        connection.rollback()
    if record is not None:
        check = check_record(record)
        if not check.ok:
            return check
    return RunCheck(
        run_id=run_id,
        ok=False,
        code=error.code,
        sequence=error.sequence,
        message=error.detail,
    )


def verify_runs(
    store: RunStore,
    run_ids: Sequence[str] | None = None,
    *,
    jobs: int = 1,
    on_result: Callable[[RunCheck], object] | None = None,
) -> list[RunCheck]:
    """Verify `run_ids` (default: every run) with `jobs` processes; one `RunCheck` per
    run, in the order of `run_ids`. `on_result` is called as each verdict arrives.

    With `jobs=1` everything happens in this process, on `store`. A failure other than a
    run that does not verify (busy, unavailable, a run that vanished) is raised as the
    `CadenceStoreError` it was, whichever process met it. The list holds a verdict per
    run: `iter_verified_runs` gives them one at a time instead (a whole store's).
    """
    results: list[RunCheck] = []
    for check in iter_verified_runs(store, run_ids, jobs=jobs):
        results.append(check)
        if on_result is not None:
            on_result(check)
    return results


def iter_verified_runs(
    store: RunStore, run_ids: Sequence[str] | None = None, *, jobs: int = 1
) -> Iterator[RunCheck]:
    """`verify_runs`' verdicts, in the same order, each yielded as it is known. It
    returns a generator: `jobs` is checked at the call (`invalid-jobs`), the store is
    read from the first verdict asked for on; leaving the loop early, or closing the
    generator, stops the walk (and the workers).

    With `jobs=1` a run is verified when its chunk (up to 64 runs, one read snapshot)
    is reached, never sooner. With `run_ids=None` the ids are read in keyset pages of
    `RUN_ID_PAGE` (`RunStore.run_ids(after=, limit=)`), each once the one before is
    verified, so memory does not grow with the store; a run started during the walk is
    verified if its id sorts after the page read last. With `jobs > 1` the ids are read
    whole first, as a list (the workers claim chunks of it, ahead of the caller); the
    verdicts still stream, in order.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InvalidInputError("invalid-jobs", "jobs must be a positive integer")
    if jobs == 1:
        return _in_process(store, _id_pages(store) if run_ids is None else [run_ids])
    return _across_processes(store, run_ids, jobs)


def _id_pages(store: RunStore) -> Iterator[list[str]]:
    """Every run id, sorted, a keyset page at a time."""
    after: str | None = None
    while True:
        page = store.run_ids(after=after, limit=RUN_ID_PAGE)
        if page:
            yield page
        if len(page) < RUN_ID_PAGE:
            return
        after = page[-1]


def _in_process(store: RunStore, pages: Iterable[Sequence[str]]) -> Iterator[RunCheck]:
    """The verdicts of the runs of `pages`, in this process: a chunk (one read snapshot)
    at a time, each within one page (a page is read when the one before is done)."""
    for page in pages:
        for start in range(0, len(page), _MAX_CHUNK):
            yield from _checks(store, list(page[start : start + _MAX_CHUNK]))


def _checks(store: RunStore, run_ids: list[str]) -> list[RunCheck]:
    """`verify_integrity` of each run as a verdict (ok, or diagnosed), all in one read
    snapshot: on PostgreSQL a snapshot costs three round trips (begin, isolation,
    rollback), as many as verifying a short run."""
    checks = []
    with store.snapshot() as repository:
        for run_id in run_ids:
            try:
                repository.verify_integrity(run_id)
            except JournalIntegrityError as error:
                checks.append(diagnose_run(store, run_id, error))
            else:
                checks.append(RunCheck(run_id=run_id, ok=True))
    return checks


def _across_processes(
    store: RunStore, run_ids: Sequence[str] | None, jobs: int
) -> Iterator[RunCheck]:
    ids = list(store.run_ids() if run_ids is None else run_ids)
    jobs = min(jobs, len(ids))
    if jobs <= 1:
        yield from _in_process(store, [ids])
        return
    # this process is one of the jobs (on `store`), jobs - 1 workers are the others; all
    # claim chunks from one counter, so a long run does not leave a worker idle
    size = max(1, min(_MAX_CHUNK, len(ids) // (jobs * 4)))
    chunks = [ids[start : start + size] for start in range(0, len(ids), size)]
    context = _context()
    claimed = context.Value("l", 0)
    outcomes = context.Queue()
    url = store.engine.url.render_as_string(hide_password=False)
    options = dict(store.engine.get_execution_options())
    workers = [
        context.Process(
            target=_work,
            args=(url, options, chunks, claimed, outcomes),
            name=f"cadence-verify-{number}",
            daemon=True,
        )
        for number in range(1, jobs)
    ]
    finished: dict[int, list[RunCheck] | _Failure] = {}
    emitted = 0
    waited_since: float | None = None
    try:
        for worker in workers:
            worker.start()
        while emitted < len(chunks):
            index = _claim(claimed, len(chunks))
            if index is not None:
                finished[index] = _verify_chunk(store, chunks[index])
            while True:  # collect what the workers have sent meanwhile
                try:
                    number, outcome = outcomes.get(block=index is None, timeout=_POLL_S)
                except queue.Empty:
                    if index is None:
                        _check_alive(workers)
                        waited_since = _check_progress(waited_since)
                    break
                waited_since = None
                finished[number] = outcome
                if index is not None:
                    continue
                break
            while emitted in finished:
                outcome = finished.pop(emitted)
                if isinstance(outcome, _Failure):
                    raise outcome.error()
                emitted += 1
                yield from outcome
    finally:
        for worker in workers:
            if worker.is_alive() and emitted < len(chunks):
                worker.terminate()
            worker.join(_JOIN_S)
            if worker.is_alive():
                worker.kill()
                worker.join(_JOIN_S)
        outcomes.close()
        outcomes.cancel_join_thread()  # never wait on a pipe a killed worker left full


_POLL_S: Final = 0.5
_JOIN_S: Final = 10.0
# how long the parent waits for a worker's next chunk once it has nothing else to do
STALL_TIMEOUT_S: Final = 600.0


def _check_progress(waited_since: float | None) -> float:
    """When the parent began waiting with nothing arriving; raises past the bound."""
    now = time.monotonic()
    if waited_since is None:
        return now
    if now - waited_since > STALL_TIMEOUT_S:
        raise StoreUnavailableError(
            "run-store-unavailable",
            f"verification workers sent nothing for {STALL_TIMEOUT_S:g} s; stopped them",
        )
    return waited_since


def _claim(claimed: Any, count: int) -> int | None:
    with claimed.get_lock():
        index = int(claimed.value)
        if index >= count:
            return None
        claimed.value = index + 1
        return index


def _check_alive(workers: Sequence[multiprocessing.process.BaseProcess]) -> None:
    for worker in workers:
        if worker.exitcode not in (None, 0):
            raise StoreUnavailableError(
                "run-store-unavailable",
                f"verification worker {worker.name} exited with code {worker.exitcode}",
            )


def _context() -> Any:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


class _Failure:
    """A `CadenceStoreError` carried back from a worker (its class, code and fields;
    pickling the exception itself would rebuild it with the wrong arguments)."""

    def __init__(self, error: CadenceStoreError) -> None:
        self.kind = type(error)
        self.args = error.args
        self.state = dict(vars(error))

    def error(self) -> CadenceStoreError:
        error = self.kind.__new__(self.kind)
        error.args = self.args
        error.__dict__.update(self.state)
        return error


def _verify_chunk(store: RunStore, run_ids: list[str]) -> list[RunCheck] | _Failure:
    try:
        return _checks(store, run_ids)
    except CadenceStoreError as error:
        return _Failure(error)


def _work(
    url: str, options: dict[str, Any], chunks: list[list[str]], claimed: Any, outcomes: Any
) -> None:
    """A worker process: its own engine, chunks claimed until none is left."""
    engine: Engine = create_store_engine(url)
    try:
        try:
            store = RunStore(engine.execution_options(**options) if options else engine)
        except CadenceStoreError as error:
            index = _claim(claimed, len(chunks))
            if index is not None:
                outcomes.put((index, _Failure(error)))
            return
        while (index := _claim(claimed, len(chunks))) is not None:
            outcomes.put((index, _verify_chunk(store, chunks[index])))
    finally:
        engine.dispose()
