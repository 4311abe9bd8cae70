"""N durable transitions in a fresh process, for counting the append path's instructions:
`valgrind --tool=callgrind python -m benchmarks.append_instructions N`.

Instructions do not depend on the machine's load, so two trees compare where wall and
CPU time cannot (a shared machine): the per-transition cost is the difference between
two runs (N = 500 and N = 100, say) over the difference of N, in each tree
(`PYTHONPATH=<tree>`, `PYTHONHASHSEED=0`). One-off work (WAL checkpoints, garbage
collection) falls unevenly between runs, so the figure resolves a few per cent.
"""

from __future__ import annotations

import sys
import tempfile

from cadence_store import RunStore, upgrade


def main(argv: list[str] | None = None) -> None:
    count = int((argv or sys.argv[1:] or ["100"])[0])
    with tempfile.TemporaryDirectory(prefix="cadence-instructions-") as workdir:
        url = f"sqlite:///{workdir}/append.sqlite3"
        upgrade(url)
        with RunStore(url, root_hash="ab" * 32, clock=lambda: 1_000) as store:
            run = store.start_run("abel-design", provisional_key="a" * 64, operation_id="s")
            store.transition(run.run_id, "paused", operation_id="p0", code="x")
            for index in range(count):
                store.transition(run.run_id, "paused", operation_id=f"p{index + 1}", code="x")


if __name__ == "__main__":
    main()
