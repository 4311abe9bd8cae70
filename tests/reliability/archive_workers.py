"""Process body of the archive kill campaign (tests/reliability/test_archive_campaign.py).

Importable by name, so that "spawn" children (fresh interpreters) can run it; the test
module puts this directory on ``sys.path`` first.

``archive`` opens the store, writes ``ready`` to its progress file, then runs
`RunStore.archive`, appending each progress step (``phase done total``) to the file,
flushed, so the parent can kill it at a chosen point; ``finished`` once it returns.
"""

from __future__ import annotations

from pathlib import Path

from cadence_store import RunStore
from cadence_store.journal.archives import ArchiveProgress

ROOT_HASH = "ab" * 32


def archive(url: str, to: str, key: str, before: int, batch: int, progress_path: str) -> None:
    with (
        RunStore(url, root_hash=ROOT_HASH) as store,
        open(progress_path, "a", encoding="utf-8") as log,
    ):

        def step(progress: ArchiveProgress) -> None:
            log.write(f"{progress.phase} {progress.done} {progress.total}\n")
            log.flush()

        store.counts()  # connected and checked before the parent starts its clock
        log.write("ready 0 0\n")
        log.flush()
        store.archive(finished_before_ms=before, to=to, key=key, batch=batch, progress=step)
        log.write("finished 0 0\n")
        log.flush()
    Path(progress_path).touch()
