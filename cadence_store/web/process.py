"""What the process serving the web view does once the app is built: freeze the heap it
started with, so that the garbage collector's full passes walk only what requests made.

A long run's page allocates tens of thousands of container objects (the rows of its
chain and receipts, read to verify it), and every so many of them CPython runs a full
collection, which walks every tracked object in the process: some 100,000 once the
library, the templates and the compiled statements are loaded (65 ms a pass measured on
the benchmark machine, about one render in twenty: the page's p95). `gc.freeze()` moves
what is alive now out of those passes (it stays alive for good, as start-up objects do
anyway). `cadence-store serve` calls it; a host may do the same at the end of its own
start-up (it is the host's process, so `create_app` never does).
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Collect once, then leave every object alive now out of later collections."""
    gc.collect()
    gc.freeze()


__all__ = ["freeze_startup_heap"]
