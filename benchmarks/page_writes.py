"""Which b-trees a SQLite commit writes: `python -m benchmarks.page_writes [--rounds N]`.

A transition's commit is measured in pages: the database is checkpointed before and after
one commit, and every page whose bytes changed is named by the b-tree it belongs to
(SQLite's `dbstat`). Four commits: one `RunStore.transition` (to the state the run is
in), one that changes the run's state (`ix_runs_state_run_id` moves with it), one
`acquire_lease` (a live lease is in `ix_operations_lease_expires_at`; a journal receipt
is not), and a unit of work of 100 transitions of the same run. The run has `--events` events first, so that its indexes
have the depth of a run in use.

The same is then measured on a second store given back cadence 1.x's
`UNIQUE (run_id, event_hash)` (as an index, after the store was opened), which the events
table kept until revision cs0006: its keys are hashes, so every appended event lands on a
random leaf, and events that share a commit share none of its pages. The last table times
the batch and a single call on both databases, interleaved (medians), to show what that
index cost. Nothing in the library reads events by hash: the chain's key is
(run_id, sequence).
"""

from __future__ import annotations

import argparse
import collections
import json
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from cadence_store import RunStore

from .common import ROOT_HASH, interleave, machine, median_ms, open_store, paused_run

BATCH: Final = 100
WARM_UP_BATCHES: Final = 10


def _pages(path: str) -> tuple[dict[int, bytes], dict[int, str]]:
    """Every page of the database file after a checkpoint, and the b-tree of each."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = connection.execute("PRAGMA page_size").fetchone()[0]
        owners = dict(connection.execute("SELECT pageno, name FROM dbstat"))
    finally:
        connection.close()
    data = Path(path).read_bytes()
    return {n + 1: data[n * size : (n + 1) * size] for n in range(len(data) // size)}, owners


def _add_event_hash_unique(path: str) -> None:
    """cadence 1.x's unique on (run_id, event_hash) again, as an index (the same b-tree
    its constraint kept before revision cs0006)."""
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute(
            "CREATE UNIQUE INDEX bench_events_run_id_event_hash ON events (run_id, event_hash)"
        )
    finally:
        connection.close()


class Subject:
    """A store with one run of `events` events, opened on its own file."""

    def __init__(self, directory: Path, name: str, events: int, *, unique: bool) -> None:
        self.path = str(directory / f"{name}.sqlite3")
        store = open_store(f"sqlite:///{self.path}")
        self.run_id = paused_run(store, name)
        with store.unit_of_work() as uow:
            for index in range(events):
                uow.runs.transition(self.run_id, "paused", operation_id=f"grow-{index}")
        store.close()
        self.store = RunStore(f"sqlite:///{self.path}", root_hash=ROOT_HASH)
        if unique:
            # behind the open store's back: its check at open would refuse the index (it
            # is not this version's schema); SQLite prepares its statements again
            _add_event_hash_unique(self.path)
        self.count = 0
        self.flips = 0  # state changes so far (the run is paused after an even number)
        for _ in range(WARM_UP_BATCHES):  # a new index's packed pages split first
            self.batch()

    def single(self, _n: int = 0) -> None:
        self.count += 1
        self.store.transition(self.run_id, "paused", operation_id=f"one-{self.count}")

    def state_change(self, _n: int = 0) -> None:
        """A transition that changes the run's state (paused and validating-delivery in
        turn): the runs' state index moves with it."""
        self.count += 1
        self.flips += 1
        to = "validating-delivery" if self.flips % 2 else "paused"
        self.store.transition(self.run_id, to, operation_id=f"state-{self.count}")

    def lease(self, _n: int = 0) -> None:
        """A lease acquired: its operation row, with an expiry."""
        self.count += 1
        self.store.acquire_lease(self.run_id, f"lease-{self.count}", 60_000)

    def batch(self, _n: int = 0) -> None:
        self.count += 1
        with self.store.unit_of_work() as uow:
            for index in range(BATCH):
                uow.runs.transition(self.run_id, "paused", operation_id=f"b-{self.count}-{index}")

    def pages_of(self, commit: Callable[[], object]) -> dict[str, int]:
        """The pages one `commit` changed, per b-tree."""
        self.store.transactions.release_kept()  # nobody holds the WAL while it is checkpointed
        before, _ = _pages(self.path)
        commit()
        self.store.transactions.release_kept()
        after, owners = _pages(self.path)
        changed = [n for n, page in after.items() if before.get(n) != page]
        counts = collections.Counter(owners.get(n, "(free list, header)") for n in changed)
        return dict(sorted(counts.items(), key=lambda item: -item[1]))

    def close(self) -> None:
        self.store.verify_integrity(self.run_id)  # every chain written still verifies
        self.store.close()


def run(events: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cadence-pages-") as workdir:
        subjects = {
            "head": Subject(Path(workdir), "head", events, unique=False),
            "with_event_hash_unique": Subject(Path(workdir), "unique", events, unique=True),
        }
        pages = {
            name: {
                "single": subject.pages_of(subject.single),
                "state_change": subject.pages_of(subject.state_change),
                "lease": subject.pages_of(subject.lease),
                "batch": subject.pages_of(subject.batch),
            }
            for name, subject in subjects.items()
        }
        samples = interleave(
            {
                f"{name}/{kind}": getattr(subject, kind)
                for name, subject in subjects.items()
                for kind in ("single", "batch")
            },
            rounds=rounds,
            per_round=1,
        )
        for subject in subjects.values():
            subject.close()
    medians: dict[str, dict[str, float]] = {}
    for name in subjects:
        single = median_ms(samples[f"{name}/single"])
        batched = median_ms(samples[f"{name}/batch"]) / BATCH  # per transition
        medians[name] = {
            "single": round(single, 4),
            "batch": round(batched, 4),
            "ratio": round(batched / single, 3),
        }
    return {"events": events, "rounds": rounds, "pages": pages, "median_ms": medians}


_COMMITS: Final = {
    "single": "1 transition",
    "state_change": "1 transition that changes the state",
    "lease": "1 acquire_lease",
}


def table(result: dict[str, Any]) -> str:
    lines = [
        f"pages one commit changes, per b-tree (a run of {result['events']} events)",
        "",
        "| database | commit | pages | per b-tree |",
        "|---|---|---|---|",
    ]
    for name, commits in result["pages"].items():
        for kind, counts in commits.items():
            what = _COMMITS.get(kind, f"{BATCH} transitions, one unit of work")
            detail = ", ".join(f"{tree} {count}" for tree, count in counts.items())
            lines.append(f"| {name} | {what} | {sum(counts.values())} | {detail} |")
    lines += [
        "",
        f"interleaved, {result['rounds']} rounds (medians)",
        "",
        "| database | single call ms | batched, ms per transition | batch / single |",
        "|---|---|---|---|",
    ]
    for name, figures in result["median_ms"].items():
        lines.append(f"| {name} | {figures['single']} | {figures['batch']} | {figures['ratio']}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.page_writes", description=__doc__)
    parser.add_argument("--events", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--out", default=None, help="write the result as JSON here")
    args = parser.parse_args(argv)
    result = run(args.events, args.rounds)
    result["machine"] = machine()
    print(table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
